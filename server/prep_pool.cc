#include "server/prep_pool.h"

#include <pthread.h>

#include <string>

#include "sophon/base/cpu_time.h"
#include "sophon/ops/pipeline.h"

namespace sophon {

PrepPool::PrepPool(int workers, int queue_capacity) : capacity_(queue_capacity) {
  threads_.reserve(workers);
  for (int i = 0; i < workers; ++i) {
    threads_.emplace_back([this] { WorkerLoop(); });
    const std::string name = "sophon-prep-" + std::to_string(i);
    pthread_setname_np(threads_.back().native_handle(), name.substr(0, 15).c_str());
  }
}

PrepPool::~PrepPool() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  for (std::thread& t : threads_) t.join();
}

void PrepPool::Submit(std::function<void()> job) {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(
      +[](PrepPool* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
        return static_cast<int>(p->queued_) < p->capacity_;
      },
      this));
  PushLocked(0, std::move(job));
}

void PrepPool::Post(uint64_t key, std::function<void()> job) {
  absl::MutexLock lock(&mu_);
  PushLocked(key, std::move(job));
}

void PrepPool::PushLocked(uint64_t key, std::function<void()> job) {
  std::deque<std::function<void()>>& q = queues_[key];
  if (q.empty()) turns_.push_back(key);
  q.push_back(std::move(job));
  ++queued_;
}

int PrepPool::queue_depth() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(queued_);
}

double PrepPool::busy_seconds() const { return busy_nanos_.load() * 1e-9; }

void PrepPool::WorkerLoop() {
  while (true) {
    std::function<void()> job;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](PrepPool* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
            return p->stopping_ || p->queued_ > 0;
          },
          this));
      if (queued_ == 0) return;  // stopping and drained
      const uint64_t key = turns_.front();
      turns_.pop_front();
      auto it = queues_.find(key);
      job = std::move(it->second.front());
      it->second.pop_front();
      --queued_;
      if (it->second.empty()) {
        queues_.erase(it);
      } else {
        turns_.push_back(key);  // its next job waits for the others' turns
      }
    }
    const double t0 = ThreadCpuSeconds();
    job();
    busy_nanos_.fetch_add(static_cast<int64_t>((ThreadCpuSeconds() - t0) * 1e9));
  }
}

}  // namespace sophon
