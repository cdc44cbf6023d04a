#include "client/train/staging_ring.h"

#include <cstdlib>
#include <map>
#include <memory>
#include <vector>

#include "gtest/gtest.h"

namespace sophon {
namespace {

// A copy that completes only when someone waits for it (the worst case: the
// device never finishes on its own), recording which buffer it reads.
struct FakeCopies {
  std::map<int, bool> done;  // copy number -> completed
  int next = 0;
};

class FakeEvent final : public CopyEvent {
 public:
  FakeEvent(FakeCopies* copies, int id) : copies_(copies), id_(id) {}
  bool Done() override { return copies_->done[id_]; }
  void Wait() override { copies_->done[id_] = true; }

 private:
  FakeCopies* copies_;
  int id_;
};

TEST(StagingRingTest, ABufferIsNeverHandedOutWhileItsCopyIsInFlight) {
  FakeCopies copies;
  std::map<void*, int> reader;  // buffer -> the copy that last read it
  int allocations = 0, frees = 0;
  {
    StagingRing ring(
        3, [&](size_t bytes) { ++allocations; return std::malloc(bytes); },
        [&](void* data, size_t) { ++frees; std::free(data); });
    for (int batch = 0; batch < 20; ++batch) {
      const StagingRing::Slot slot = ring.Acquire(1000 + batch);  // grows each time
      ASSERT_NE(slot.data, nullptr);
      ASSERT_GE(slot.bytes, 1000u + batch);
      EXPECT_EQ(slot.index, batch % 3);
      // Whatever last read this buffer has completed before we may write it.
      if (auto it = reader.find(slot.data); it != reader.end()) {
        EXPECT_TRUE(copies.done[it->second]) << "batch " << batch;
      }
      const int id = copies.next++;
      copies.done[id] = false;
      reader[slot.data] = id;
      ring.Release(std::make_unique<FakeEvent>(&copies, id));
      // Copies of the other buffers are still in flight: never waited for early.
      if (batch >= 2) EXPECT_FALSE(copies.done[id - 1]) << "batch " << batch;
    }
    EXPECT_EQ(ring.waits(), 17);  // every acquire after the first three
    // A copy that has completed on its own is not waited for.
    copies.done[copies.next - 3] = true;
    ring.Acquire(10);
    EXPECT_EQ(ring.waits(), 17);
    ring.Release(nullptr);
  }
  // Destruction waits for the last copies, then frees every buffer.
  for (const auto& [id, done] : copies.done) EXPECT_TRUE(done) << "copy " << id;
  EXPECT_EQ(frees, allocations);
}

TEST(StagingRingTest, ABufferLargeEnoughIsKept) {
  int allocations = 0;
  StagingRing ring(
      2, [&](size_t bytes) { ++allocations; return std::malloc(bytes); },
      [](void* data, size_t) { std::free(data); });
  for (int i = 0; i < 6; ++i) {
    ring.Acquire(i < 2 ? 4096 : 100);
    ring.Release(nullptr);  // a synchronous copy: nothing to wait for
  }
  EXPECT_EQ(allocations, 2);
  EXPECT_EQ(ring.waits(), 0);
}

}  // namespace
}  // namespace sophon
