#include "server/prep_pool.h"

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"

#include "gtest/gtest.h"
#include "sophon/base/cpu_time.h"
#include "sophon/ops/pipeline.h"

namespace sophon {
namespace {

// Threads of this process named by the pool ("sophon-prep-N").
int PrepThreads() {
  int n = 0;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    if (std::getline(comm, name) && name.rfind("sophon-prep-", 0) == 0) ++n;
  }
  return n;
}

TEST(PrepPoolTest, RunsEveryJobOnExactlyTheConfiguredThreads) {
  constexpr int kWorkers = 3;
  absl::Mutex mu;
  int at_barrier = 0;
  int barrier_timeouts = 0;
  int done = 0;
  std::set<std::thread::id> barrier_ids, ids;
  {
    PrepPool pool(kWorkers, 4);
    EXPECT_EQ(pool.workers(), kWorkers);
    // A barrier that only opens once kWorkers jobs run at the same time: it
    // proves that kWorkers distinct threads take jobs (with fewer, it times
    // out and the test fails rather than hangs).
    for (int i = 0; i < kWorkers; ++i) {
      pool.Submit([&] {
        absl::MutexLock lock(&mu);
        barrier_ids.insert(std::this_thread::get_id());
        ++at_barrier;
        if (!mu.AwaitWithTimeout(absl::Condition(
                                     +[](int* n) { return *n == kWorkers; }, &at_barrier),
                                 absl::Seconds(10))) {
          ++barrier_timeouts;
        }
      });
    }
    for (int i = 0; i < 200; ++i) {
      pool.Submit([&] {
        volatile double x = 0;
        for (int k = 0; k < 20000; ++k) x = x + k;
        absl::MutexLock lock(&mu);
        ids.insert(std::this_thread::get_id());
        done++;
      });
    }
    EXPECT_EQ(PrepThreads(), kWorkers);  // and no more threads than that
  }  // destructor drains the queue
  EXPECT_EQ(barrier_timeouts, 0) << "fewer than " << kWorkers << " jobs ran at once";
  EXPECT_EQ(barrier_ids.size(), static_cast<size_t>(kWorkers));
  EXPECT_EQ(done, 200);
  EXPECT_LE(ids.size(), static_cast<size_t>(kWorkers));
  for (std::thread::id id : ids) EXPECT_EQ(barrier_ids.count(id), 1u);
  EXPECT_EQ(ids.count(std::this_thread::get_id()), 0u);
  EXPECT_EQ(PrepThreads(), 0);  // joined
}

TEST(PrepPoolTest, SubmitBlocksWhenTheQueueIsFull) {
  std::atomic<int> ran{0};
  absl::Notification first_started;
  absl::Notification release;
  absl::Notification third_about_to_submit;
  absl::Notification third_queued;
  {
    PrepPool pool(1, 1);
    // Occupies the only worker until released; once it has started, the
    // queue is empty.
    pool.Submit([&] {
      first_started.Notify();
      release.WaitForNotification();
      ++ran;
    });
    first_started.WaitForNotification();
    EXPECT_EQ(pool.queue_depth(), 0);
    pool.Submit([&] { ++ran; });  // fills the queue (capacity 1)
    EXPECT_EQ(pool.queue_depth(), 1);
    std::thread t([&] {
      third_about_to_submit.Notify();
      pool.Submit([&] { ++ran; });
      third_queued.Notify();
    });
    third_about_to_submit.WaitForNotification();
    // The worker is held and the queue is full, so the third Submit cannot
    // return until `release`: this wait can only time out. (A Submit that
    // did not block would be caught here unless the machine stalled the
    // thread for the whole wait; the check never fails spuriously.)
    EXPECT_FALSE(third_queued.WaitForNotificationWithTimeout(absl::Milliseconds(100)));
    EXPECT_EQ(pool.queue_depth(), 1);  // never more than the capacity
    EXPECT_EQ(ran.load(), 0);
    release.Notify();
    third_queued.WaitForNotification();
    t.join();
  }  // the destructor drains the queue
  EXPECT_EQ(ran.load(), 3);
}

// Each job burns 10 ms of its own thread CPU time, so the pool's CPU-time
// total is at least 40 ms however loaded the machine is.
TEST(PrepPoolTest, MeasuresBusyTime) {
  // Declared before the pool: its workers use them until it is destroyed.
  absl::Mutex mu;
  int arrived = 0;
  bool release = false;
  PrepPool pool(2, 8);
  for (int i = 0; i < 4; ++i) {
    pool.Submit([] {
      const double start = ThreadCpuSeconds();
      while (ThreadCpuSeconds() - start < 0.010) {
      }
    });
  }
  // One barrier job per worker, queued behind the four: a worker starts one
  // only after it has finished (and accounted) its previous job, so once
  // both barrier jobs are running, all four jobs are in busy_seconds().
  for (int i = 0; i < 2; ++i) {
    pool.Submit([&] {
      absl::MutexLock lock(&mu);
      ++arrived;
      mu.Await(absl::Condition(&release));
    });
  }
  {
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(+[](int* n) { return *n == 2; }, &arrived));
  }
  const double busy = pool.busy_seconds();
  EXPECT_GE(busy, 0.04 - 1e-6);
  EXPECT_LT(busy, 1.0);
  absl::MutexLock lock(&mu);
  release = true;  // the pool's destructor then joins the barrier jobs
}

TEST(PrepPoolTest, APostedQueueDoesNotWaitForAnotherThatPostedFirst) {
  PrepPool pool(1, 1);
  absl::Mutex mu;
  bool release = false;
  std::vector<uint64_t> order;
  absl::Notification started;
  // Hold the only worker so that everything below queues up.
  pool.Post(99, [&] {
    started.Notify();
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(&release));
  });
  started.WaitForNotification();
  for (int i = 0; i < 3; ++i) {
    pool.Post(1, [&] {
      absl::MutexLock lock(&mu);
      order.push_back(1);
    });
  }
  for (int i = 0; i < 2; ++i) {
    pool.Post(2, [&] {
      absl::MutexLock lock(&mu);
      order.push_back(2);
    });
  }
  EXPECT_EQ(pool.queue_depth(), 5);
  {
    absl::MutexLock lock(&mu);
    release = true;
    mu.Await(absl::Condition(+[](std::vector<uint64_t>* o) { return o->size() == 5; }, &order));
  }
  // Stream 1 posted all of its jobs first, yet stream 2's first job runs
  // right after stream 1's first (then the time each has had decides).
  EXPECT_EQ(order[0], 1u);
  EXPECT_EQ(order[1], 2u);
}

TEST(PrepPoolTest, AQueueOfCheapJobsIsNotHeldACostlyJobPerTurnBehindTheOthers) {
  // Four streams of costly jobs (large tensors, 20 ms each) and one of cheap
  // ones (raw reads): the workers' time is shared, not their turns.
  PrepPool pool(1, 1);
  absl::Mutex mu;
  bool release = false;
  std::vector<char> order;  // 'c' costly, 'r' cheap, in the order they ran
  absl::Notification started;
  pool.Post(99, [&] {
    started.Notify();
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(&release));
  });
  started.WaitForNotification();
  for (uint64_t key = 1; key <= 4; ++key) {
    for (int i = 0; i < 4; ++i) {
      pool.Post(key, [&] {
        absl::SleepFor(absl::Milliseconds(20));
        absl::MutexLock lock(&mu);
        order.push_back('c');
      });
    }
  }
  for (int i = 0; i < 20; ++i) {
    pool.Post(5, [&] {
      absl::MutexLock lock(&mu);
      order.push_back('r');
    });
  }
  {
    absl::MutexLock lock(&mu);
    release = true;
    mu.Await(absl::Condition(+[](std::vector<char>* o) { return o->size() == 36; }, &order));
  }
  // Taking turns, the last cheap job would wait for 19 rounds of the four
  // costly streams (16 costly jobs: all of them); shared by time, it waits
  // for at most one costly job of each.
  const auto last_cheap = std::find(order.rbegin(), order.rend(), 'r');
  const int64_t costly_before = std::count(last_cheap, order.rend(), 'c');
  EXPECT_LE(costly_before, 4) << std::string(order.begin(), order.end());
}

}  // namespace
}  // namespace sophon
