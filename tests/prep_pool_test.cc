#include "prep_pool.h"

#include <atomic>
#include <chrono>
#include <set>
#include <thread>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"

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

TEST(PrepPoolTest, MeasuresBusyTime) {
  PrepPool pool(2, 8);
  for (int i = 0; i < 4; ++i) {
    pool.Submit([] {
      const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
      while (std::chrono::steady_clock::now() < end) {
      }
    });
  }
  while (pool.queue_depth() > 0) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  std::this_thread::sleep_for(std::chrono::milliseconds(60));
  EXPECT_GT(pool.busy_seconds(), 0.04);
}

}  // namespace
}  // namespace sophon
