// Training steps queued on an asynchronous device whose results the host
// reads later: the host never waits for the step it has just queued, only,
// once more than `max_in_flight` steps are queued, for the oldest of them.
// The device keeps working on the queued steps (and on the next batch's copy)
// while the host prepares and queues the next one.
//
// Each step's result (its losses and correct counts) is copied to host memory
// at the end of the step, asynchronously, and an event marks that copy's end;
// the queue hands the result out once that event has completed.
// LibTorch-free: the events and the reads of the results come from the
// caller (torch_trainer_base.cc).
#ifndef SOPHON_CLIENT_TRAIN_STEP_QUEUE_H_
#define SOPHON_CLIENT_TRAIN_STEP_QUEUE_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "client/train/staging_ring.h"
#include "client/train/trainer.h"

namespace sophon {

// Not thread-safe: the trainer's thread pushes and drains.
class StepQueue {
 public:
  // `max_in_flight` >= 0 steps may stay queued after Push returns (0: every
  // step is waited for as it is pushed, as a synchronous trainer does).
  explicit StepQueue(int max_in_flight);
  // Waits for the steps still queued (their results are dropped).
  ~StepQueue();
  StepQueue(const StepQueue&) = delete;
  StepQueue& operator=(const StepQueue&) = delete;

  // Queues a step: `read` gives its result once `done` has completed (a null
  // `done`: it has). Returns, oldest first, the results of the steps at the
  // front of the queue that have completed, and of the oldest ones waited for
  // until at most max_in_flight remain. `read` and a wait may throw (a device
  // error surfaces there): the step stays queued and the exception passes on.
  std::vector<StepResult> Push(std::unique_ptr<CopyEvent> done, std::function<StepResult()> read);
  // Waits for every queued step; their results, oldest first.
  std::vector<StepResult> Drain();

  int in_flight() const { return static_cast<int>(queue_.size()); }
  int max_in_flight() const { return max_in_flight_; }
  // Pushes that had to wait for an older step to complete.
  int64_t waits() const { return waits_; }

 private:
  struct Queued {
    std::unique_ptr<CopyEvent> done;
    std::function<StepResult()> read;
  };
  // Reads the oldest step, waiting for it if `wait`.
  StepResult PopFront(bool wait);

  const int max_in_flight_;
  std::deque<Queued> queue_;
  int64_t waits_ = 0;
};

}  // namespace sophon

#endif  // SOPHON_CLIENT_TRAIN_STEP_QUEUE_H_
