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
        return static_cast<int>(p->queue_.size()) < p->capacity_;
      },
      this));
  queue_.push_back(std::move(job));
}

void PrepPool::Post(std::function<void()> job) {
  absl::MutexLock lock(&mu_);
  queue_.push_back(std::move(job));
}

int PrepPool::queue_depth() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(queue_.size());
}

double PrepPool::busy_seconds() const { return busy_nanos_.load() * 1e-9; }

void PrepPool::WorkerLoop() {
  while (true) {
    std::function<void()> job;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](PrepPool* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
            return p->stopping_ || !p->queue_.empty();
          },
          this));
      if (queue_.empty()) return;  // stopping and drained
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    const double t0 = ThreadCpuSeconds();
    job();
    busy_nanos_.fetch_add(static_cast<int64_t>((ThreadCpuSeconds() - t0) * 1e9));
  }
}

}  // namespace sophon
