// Reading a byte range of an open file whole (pack shards and indexes).
// Internal to sophon_data.
#ifndef SOPHON_SRC_DATA_PREAD_EXACT_H_
#define SOPHON_SRC_DATA_PREAD_EXACT_H_

#include <cstdint>
#include <string>

namespace sophon {

// What PreadExact got: `bytes` read before the end of the file or an error;
// `error` the errno of a failed read, 0 when the range was read or the file
// ended first.
struct PreadResult {
  uint64_t bytes = 0;
  int error = 0;
  bool complete(uint64_t size) const { return error == 0 && bytes == size; }
};

// Reads `size` bytes at `offset` of `fd` into *out (resized to `size`),
// retrying short reads and EINTR.
PreadResult PreadExact(int fd, uint64_t offset, uint64_t size, std::string* out);

}  // namespace sophon

#endif  // SOPHON_SRC_DATA_PREAD_EXACT_H_
