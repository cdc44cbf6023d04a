#include "client/train/step_queue.h"

#include <exception>
#include <utility>

namespace sophon {

StepQueue::StepQueue(int max_in_flight) : max_in_flight_(max_in_flight < 0 ? 0 : max_in_flight) {}

StepQueue::~StepQueue() {
  for (Queued& step : queue_) {
    if (step.done == nullptr) continue;
    try {
      step.done->Wait();
    } catch (const std::exception&) {
      // The device failed; nothing is left to wait for.
    }
  }
}

StepResult StepQueue::PopFront(bool wait) {
  Queued& front = queue_.front();
  if (wait && front.done != nullptr) front.done->Wait();
  StepResult result = front.read();
  queue_.pop_front();
  return result;
}

std::vector<StepResult> StepQueue::Push(std::unique_ptr<CopyEvent> done,
                                        std::function<StepResult()> read) {
  queue_.push_back(Queued{std::move(done), std::move(read)});
  std::vector<StepResult> results;
  bool waited = false;
  while (!queue_.empty()) {
    Queued& front = queue_.front();
    const bool completed = front.done == nullptr || front.done->Done();
    if (!completed && in_flight() <= max_in_flight_) break;
    waited = waited || !completed;
    results.push_back(PopFront(/*wait=*/!completed));
  }
  if (waited) ++waits_;
  return results;
}

std::vector<StepResult> StepQueue::Drain() {
  std::vector<StepResult> results;
  while (!queue_.empty()) results.push_back(PopFront(/*wait=*/true));
  return results;
}

}  // namespace sophon
