#include "server/prep_pool.h"

#include <pthread.h>

#include <algorithm>
#include <string>

#include "absl/time/clock.h"
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
  auto [it, added] = queues_.try_emplace(key);
  Queue& q = it->second;
  if (q.jobs.empty()) {
    // Back after a pause: no credit for the time it had no jobs.
    q.vtime = std::max(q.vtime, vtime_);
    turns_.emplace(q.vtime, key);
  }
  q.jobs.push_back(std::move(job));
  ++queued_;
}

void PrepPool::ChargeLocked(uint64_t key, double seconds, double charged) {
  auto it = queues_.find(key);
  if (it == queues_.end()) return;
  Queue& q = it->second;
  --q.running;
  ++q.jobs_done;
  q.mean_cost += (seconds - q.mean_cost) / static_cast<double>(std::min<uint64_t>(q.jobs_done, 16));
  if (q.jobs.empty()) {
    q.vtime += seconds - charged;
    if (q.running == 0) queues_.erase(it);
    return;
  }
  turns_.erase({q.vtime, key});
  q.vtime += seconds - charged;
  turns_.emplace(q.vtime, key);
}

int PrepPool::queue_depth() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(queued_);
}

double PrepPool::busy_seconds() const { return busy_nanos_.load() * 1e-9; }

void PrepPool::WorkerLoop() {
  while (true) {
    std::function<void()> job;
    uint64_t key = 0;
    double charged = 0;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](PrepPool* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(p->mu_) {
            return p->stopping_ || p->queued_ > 0;
          },
          this));
      if (queued_ == 0) return;  // stopping and drained
      const auto [vtime, picked] = *turns_.begin();
      turns_.erase(turns_.begin());
      key = picked;
      vtime_ = vtime;
      Queue& q = queues_[key];
      job = std::move(q.jobs.front());
      q.jobs.pop_front();
      --queued_;
      ++q.running;
      // Charged now at its mean, so that a second worker does not take the
      // same queue's next job as if this one cost nothing.
      charged = q.mean_cost;
      q.vtime += charged;
      if (!q.jobs.empty()) turns_.emplace(q.vtime, key);
    }
    const double t0 = ThreadCpuSeconds();
    const absl::Time start = absl::Now();
    job();
    busy_nanos_.fetch_add(static_cast<int64_t>((ThreadCpuSeconds() - t0) * 1e9));
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    absl::MutexLock lock(&mu_);
    ChargeLocked(key, seconds, charged);
  }
}

}  // namespace sophon
