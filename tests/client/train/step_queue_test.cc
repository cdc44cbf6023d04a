#include "client/train/step_queue.h"

#include <map>
#include <memory>
#include <stdexcept>
#include <vector>

#include "gtest/gtest.h"

namespace sophon {
namespace {

// Steps that complete only when the test says so or someone waits for them
// (the device never finishes on its own).
struct FakeDevice {
  std::map<int, bool> done;  // step -> completed
  std::vector<int> waited;   // steps the host waited for, in order
  int queued = 0;            // steps pushed so far
};

class FakeEvent final : public CopyEvent {
 public:
  FakeEvent(FakeDevice* device, int step) : device_(device), step_(step) {}
  bool Done() override { return device_->done[step_]; }
  void Wait() override {
    if (!device_->done[step_]) device_->waited.push_back(step_);
    device_->done[step_] = true;
  }

 private:
  FakeDevice* device_;
  int step_;
};

// Pushes step `device->queued` whose result's count is its number; the read
// checks that the step has completed before its result is read.
std::vector<StepResult> PushStep(StepQueue* queue, FakeDevice* device) {
  const int step = device->queued++;
  device->done[step] = false;
  return queue->Push(std::make_unique<FakeEvent>(device, step), [device, step] {
    EXPECT_TRUE(device->done[step]) << "step " << step << " read before it completed";
    StepResult result;
    result.count = step;
    return result;
  });
}

std::vector<int64_t> Counts(const std::vector<StepResult>& results) {
  std::vector<int64_t> counts;
  for (const StepResult& r : results) counts.push_back(r.count);
  return counts;
}

TEST(StepQueueTest, TheHostWaitsOnlyForTheOldestStepBeyondTheBound) {
  FakeDevice device;
  StepQueue queue(2);
  std::vector<int64_t> seen;
  for (int i = 0; i < 10; ++i) {
    const std::vector<StepResult> results = PushStep(&queue, &device);
    // Never more than two steps left queued, and the step just queued is
    // never waited for.
    EXPECT_LE(queue.in_flight(), 2) << "after step " << i;
    EXPECT_FALSE(device.done[i]) << "step " << i << " waited for as it was queued";
    for (int64_t c : Counts(results)) seen.push_back(c);
  }
  // Steps 0..7 were waited for one by one, each as step + 2 was queued.
  EXPECT_EQ(device.waited, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(queue.waits(), 8);
  const std::vector<StepResult> rest = queue.Drain();
  for (int64_t c : Counts(rest)) seen.push_back(c);
  EXPECT_EQ(queue.in_flight(), 0);
  // Every step's result exactly once, in order.
  std::vector<int64_t> all;
  for (int i = 0; i < 10; ++i) all.push_back(i);
  EXPECT_EQ(seen, all);
}

TEST(StepQueueTest, CompletedStepsAreHandedOutWithoutWaiting) {
  FakeDevice device;
  StepQueue queue(3);
  EXPECT_TRUE(PushStep(&queue, &device).empty());
  EXPECT_TRUE(PushStep(&queue, &device).empty());
  EXPECT_TRUE(PushStep(&queue, &device).empty());
  // The device finished steps 0 and 1 on its own; step 2 is still running.
  device.done[0] = true;
  device.done[1] = true;
  EXPECT_EQ(Counts(PushStep(&queue, &device)), (std::vector<int64_t>{0, 1}));
  EXPECT_TRUE(device.waited.empty());
  EXPECT_EQ(queue.waits(), 0);
  EXPECT_EQ(queue.in_flight(), 2);
  // A completed step behind a running one waits its turn: results stay in order.
  device.done[3] = true;
  EXPECT_TRUE(PushStep(&queue, &device).empty());
  EXPECT_EQ(Counts(queue.Drain()), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(device.waited, (std::vector<int>{2, 4}));
}

TEST(StepQueueTest, NoStepsInFlightWaitsForEachStep) {
  FakeDevice device;
  StepQueue queue(0);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(Counts(PushStep(&queue, &device)), (std::vector<int64_t>{i}));
    EXPECT_EQ(queue.in_flight(), 0);
  }
  EXPECT_EQ(device.waited, (std::vector<int>{0, 1, 2, 3}));
  // A step with no event (a synchronous device) is read at once.
  StepQueue sync(2);
  const std::vector<StepResult> results = sync.Push(nullptr, [] {
    StepResult r;
    r.count = 7;
    return r;
  });
  EXPECT_EQ(Counts(results), (std::vector<int64_t>{7}));
}

TEST(StepQueueTest, AFailedReadLeavesTheStepQueuedAndPassesTheErrorOn) {
  FakeDevice device;
  StepQueue queue(1);
  device.done[0] = true;
  const auto throwing = [] () -> StepResult { throw std::runtime_error("device lost"); };
  EXPECT_THROW(queue.Push(std::make_unique<FakeEvent>(&device, 0), throwing), std::runtime_error);
  EXPECT_EQ(queue.in_flight(), 1);
}

TEST(StepQueueTest, DestructionWaitsForTheStepsStillQueued) {
  FakeDevice device;
  {
    StepQueue queue(4);
    for (int i = 0; i < 3; ++i) PushStep(&queue, &device);
  }
  EXPECT_EQ(device.waited, (std::vector<int>{0, 1, 2}));
}

}  // namespace
}  // namespace sophon
