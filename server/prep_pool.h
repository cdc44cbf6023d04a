// The storage node's CPU budget: exactly N threads run every decode and
// transform. gRPC threads only move messages.
#ifndef SOPHON_SERVER_PREP_POOL_H_
#define SOPHON_SERVER_PREP_POOL_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <set>
#include <utility>
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
  // bytes) and must not block (gRPC callbacks). The workers' time is shared
  // fairly among the queues with jobs (start-time fair queuing): the next job
  // is the first of the queue that has had the least of the workers' time
  // since it last had jobs, so a stream that posts a whole epoch at once
  // does not delay the others, and a stream of cheap jobs (raw reads) is not
  // held a costly job (a large tensor) per turn behind every other stream.
  // Submit's jobs are queue 0. Thread-safe.
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

  struct Queue {
    std::deque<std::function<void()>> jobs;
    // The workers' seconds this queue has had since it last had jobs,
    // counted from the pool's virtual time when it got them (its jobs' time
    // charged when they start, at the queue's mean, and corrected when they
    // end).
    double vtime = 0;
    double mean_cost = 0;  // seconds per job, of this queue's jobs so far
    uint64_t jobs_done = 0;
    int running = 0;
  };
  // The next queue to serve: the least (vtime, key).
  using Turn = std::pair<double, uint64_t>;
  // Charges `key` for a job that took `seconds` of which `charged` was
  // charged at its start.
  void ChargeLocked(uint64_t key, double seconds, double charged)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  std::unordered_map<uint64_t, Queue> queues_ ABSL_GUARDED_BY(mu_);  // with jobs or running
  std::set<Turn> turns_ ABSL_GUARDED_BY(mu_);  // the queues with jobs waiting
  double vtime_ ABSL_GUARDED_BY(mu_) = 0;  // the vtime of the last queue served
  size_t queued_ ABSL_GUARDED_BY(mu_) = 0;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<int64_t> busy_nanos_{0};
};

}  // namespace sophon

#endif  // SOPHON_SERVER_PREP_POOL_H_
