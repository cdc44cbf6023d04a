// A stream as the server's registries of streams (StreamRegistry, ReadSlots)
// hold it: by pointer, calling it without their lock held, with Ref/Unref
// keeping it alive meanwhile.
#ifndef SOPHON_SERVER_COUNTED_MEMBER_H_
#define SOPHON_SERVER_COUNTED_MEMBER_H_

namespace sophon {

class CountedMember {
 public:
  virtual ~CountedMember() = default;
  virtual void Ref() = 0;
  virtual void Unref() = 0;
};

}  // namespace sophon

#endif  // SOPHON_SERVER_COUNTED_MEMBER_H_
