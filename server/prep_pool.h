// The storage node's CPU budget: exactly N threads run every decode and
// transform. gRPC threads only move messages.
#ifndef SOPHON_SERVER_PREP_POOL_H_
#define SOPHON_SERVER_PREP_POOL_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace sophon {

class PrepPool {
 public:
  // REQUIRES: workers >= 1, queue_capacity >= 1.
  PrepPool(int workers, int queue_capacity);
  // Drains queued jobs, then joins the workers.
  ~PrepPool();

  PrepPool(const PrepPool&) = delete;
  PrepPool& operator=(const PrepPool&) = delete;

  // Queues a job; blocks while the queue is full. Thread-safe.
  void Submit(std::function<void()> job);
  // Queues a job of queue `key` without blocking, even past the capacity: for
  // callers that bound their work themselves (the Fetch streams admit by
  // bytes) and must not block (gRPC callbacks). Workers take one job from
  // each non-empty queue in turn, so a stream that posts a whole epoch at
  // once does not delay the others (Submit's jobs are queue 0). Thread-safe.
  void Post(uint64_t key, std::function<void()> job);

  int workers() const { return static_cast<int>(threads_.size()); }
  // Jobs waiting (not yet started).
  int queue_depth() const;
  // Thread CPU seconds spent inside jobs, summed over workers.
  double busy_seconds() const;

 private:
  void WorkerLoop();

  const int capacity_;
  std::vector<std::thread> threads_;

  mutable absl::Mutex mu_;
  void PushLocked(uint64_t key, std::function<void()> job) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::unordered_map<uint64_t, std::deque<std::function<void()>>> queues_ ABSL_GUARDED_BY(mu_);
  std::deque<uint64_t> turns_ ABSL_GUARDED_BY(mu_);  // keys with jobs, in serving order
  size_t queued_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<int64_t> busy_nanos_{0};
};

}  // namespace sophon

#endif  // SOPHON_SERVER_PREP_POOL_H_
