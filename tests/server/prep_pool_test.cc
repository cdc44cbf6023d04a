#include "server/prep_pool.h"

#include <atomic>
#include <chrono>
#include <set>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "sophon/base/cpu_time.h"
#include "sophon/ops/pipeline.h"

namespace sophon {
namespace {

TEST(PrepPoolTest, RunsEveryJobOnExactlyTheConfiguredThreads) {
  std::atomic<int> done{0};
  absl::Mutex mu;
  std::set<std::thread::id> ids;
  {
    PrepPool pool(3, 4);
    EXPECT_EQ(pool.workers(), 3);
    for (int i = 0; i < 200; ++i) {
      pool.Submit([&] {
        volatile double x = 0;
        for (int k = 0; k < 20000; ++k) x = x + k;
        absl::MutexLock lock(&mu);
        ids.insert(std::this_thread::get_id());
        done++;
      });
    }
  }  // destructor drains the queue
  EXPECT_EQ(done.load(), 200);
  EXPECT_LE(ids.size(), 3u);
  EXPECT_EQ(ids.count(std::this_thread::get_id()), 0u);
}

TEST(PrepPoolTest, SubmitBlocksWhenTheQueueIsFull) {
  PrepPool pool(1, 1);
  absl::Notification release;
  pool.Submit([&] { release.WaitForNotification(); });  // occupies the worker
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  pool.Submit([] {});  // fills the queue
  std::atomic<bool> third_queued{false};
  std::thread t([&] {
    pool.Submit([] {});
    third_queued = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(third_queued.load());
  EXPECT_EQ(pool.queue_depth(), 1);
  release.Notify();
  t.join();
  EXPECT_TRUE(third_queued.load());
}

// Each job burns 10 ms of its own thread CPU time, so the pool's CPU-time
// total is at least 40 ms however loaded the machine is.
TEST(PrepPoolTest, MeasuresBusyTime) {
  double busy = 0;
  {
    PrepPool pool(2, 8);
    for (int i = 0; i < 4; ++i) {
      pool.Submit([] {
        const double start = ThreadCpuSeconds();
        while (ThreadCpuSeconds() - start < 0.010) {
        }
      });
    }
    // Wait (up to 20 s) for the jobs to be accounted for.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (pool.busy_seconds() < 0.04 - 1e-6 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    busy = pool.busy_seconds();
  }
  EXPECT_GE(busy, 0.04 - 1e-6);
  EXPECT_LT(busy, 1.0);
}

}  // namespace
}  // namespace sophon
