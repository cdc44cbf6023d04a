#include "sophon/base/memory_releaser.h"

#include <atomic>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "sophon/base/allocator.h"
#include "sophon/base/process_status.h"

namespace sophon {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'000'000);

// The idle rules alone (no checks while busy), unless a test sets
// busy_interval.
MemoryReleaseOptions Options(absl::Duration idle_delay, absl::Duration min_interval) {
  MemoryReleaseOptions o;
  o.idle_delay = idle_delay;
  o.min_interval = min_interval;
  o.busy_interval = absl::InfiniteDuration();
  return o;
}

TEST(MemoryReleasePolicyTest, ReleasesOnceIdleDelayAfterWorkDrains) {
  MemoryReleasePolicy policy(Options(absl::Seconds(1), absl::Seconds(10)));
  EXPECT_EQ(policy.DueAt(), absl::InfiniteFuture());  // never busy, nothing to release
  EXPECT_FALSE(policy.TakeDue(kT0));
  policy.OnBusy(kT0);
  policy.OnIdle(kT0);
  EXPECT_EQ(policy.DueAt(), kT0 + absl::Seconds(1));
  EXPECT_FALSE(policy.TakeDue(kT0 + absl::Milliseconds(999)));
  EXPECT_TRUE(policy.TakeDue(kT0 + absl::Seconds(1)));
  EXPECT_EQ(policy.releases(), 1);
  // One release per idle period: staying idle releases nothing more.
  EXPECT_EQ(policy.DueAt(), absl::InfiniteFuture());
  EXPECT_FALSE(policy.TakeDue(kT0 + absl::Hours(1)));
  EXPECT_EQ(policy.releases(), 1);
}

TEST(MemoryReleasePolicyTest, WorkBeforeTheDelayCancelsAndRepeatedIdleKeepsTheFirstTime) {
  MemoryReleasePolicy policy(Options(absl::Seconds(1), absl::ZeroDuration()));
  policy.OnIdle(kT0);
  policy.OnIdle(kT0 + absl::Milliseconds(500));  // still the same idle period
  EXPECT_EQ(policy.DueAt(), kT0 + absl::Seconds(1));
  policy.OnBusy(kT0);  // a pause between two requests: no release
  EXPECT_FALSE(policy.TakeDue(kT0 + absl::Seconds(5)));
  policy.OnIdle(kT0 + absl::Seconds(6));
  EXPECT_FALSE(policy.TakeDue(kT0 + absl::Milliseconds(6500)));
  EXPECT_TRUE(policy.TakeDue(kT0 + absl::Seconds(7)));
  EXPECT_EQ(policy.releases(), 1);
}

TEST(MemoryReleasePolicyTest, AtMostOneReleasePerInterval) {
  MemoryReleasePolicy policy(Options(absl::ZeroDuration(), absl::Seconds(10)));
  // A server that goes idle every 100 ms for 60 s releases every 10 s, no more.
  int released = 0;
  for (int ms = 0; ms < 60'000; ms += 100) {
    const absl::Time now = kT0 + absl::Milliseconds(ms);
    policy.OnBusy(kT0);
    policy.OnIdle(now + absl::Milliseconds(50));
    if (policy.TakeDue(now + absl::Milliseconds(50))) ++released;
    if (policy.TakeDue(now + absl::Milliseconds(99))) ++released;
  }
  EXPECT_EQ(released, 6);
  EXPECT_EQ(policy.releases(), 6);
  // A release skipped for the interval is not lost: it comes when the interval is up.
  MemoryReleasePolicy late(Options(absl::ZeroDuration(), absl::Seconds(10)));
  late.OnIdle(kT0);
  EXPECT_TRUE(late.TakeDue(kT0));
  late.OnBusy(kT0);
  late.OnIdle(kT0 + absl::Seconds(2));  // the last burst, then idle for good
  EXPECT_EQ(late.DueAt(), kT0 + absl::Seconds(10));
  EXPECT_FALSE(late.TakeDue(kT0 + absl::Seconds(9)));
  EXPECT_TRUE(late.TakeDue(kT0 + absl::Seconds(10)));
}

TEST(MemoryReleasePolicyTest, AnInfiniteDelayNeverReleasesAndOptionsAreValidated) {
  MemoryReleasePolicy never(Options(absl::InfiniteDuration(), absl::ZeroDuration()));
  never.OnIdle(kT0);
  EXPECT_EQ(never.DueAt(), absl::InfiniteFuture());
  EXPECT_FALSE(never.TakeDue(kT0 + absl::Hours(1000)));
  EXPECT_TRUE(MemoryReleaseOptions().Validate().ok());
  EXPECT_THAT(Options(absl::Seconds(-1), absl::ZeroDuration()).Validate().message(),
              ::testing::HasSubstr("MemoryReleaseOptions.idle_delay"));
  EXPECT_THAT(Options(absl::ZeroDuration(), absl::Seconds(-1)).Validate().message(),
              ::testing::HasSubstr("MemoryReleaseOptions.min_interval"));
}

TEST(MemoryReleasePolicyTest, WhileBusyReleasesWhenTheSlackWasFreedSinceTheLastRelease) {
  MemoryReleaseOptions o = Options(absl::Seconds(1), absl::Seconds(10));
  o.busy_interval = absl::Seconds(3);
  o.busy_slack_bytes = 16 << 20;
  MemoryReleasePolicy policy(o);
  policy.OnBusy(kT0);
  EXPECT_EQ(policy.DueAt(), kT0);  // the first check at once: 4 MiB free, under the slack
  EXPECT_FALSE(policy.TakeDue(kT0, int64_t{4} << 20));
  EXPECT_EQ(policy.DueAt(), kT0 + absl::Seconds(3));
  // Busy and idle between every two batches: the checks keep their schedule.
  for (int i = 1; i < 20; ++i) {
    policy.OnIdle(kT0 + absl::Milliseconds(100 * i));
    policy.OnBusy(kT0 + absl::Milliseconds(100 * i + 50));
  }
  EXPECT_FALSE(policy.TakeDue(kT0 + absl::Seconds(2), int64_t{100} << 20));  // not yet
  // The next check: 100 MiB free in the heap, more than the slack.
  EXPECT_TRUE(policy.TakeDue(kT0 + absl::Seconds(3), int64_t{100} << 20));
  policy.Released(int64_t{100} << 20);
  EXPECT_EQ(policy.DueAt(), kT0 + absl::Seconds(6));
  // An attack goes on: nothing more freed, no release (each would take the
  // arenas' locks for nothing).
  EXPECT_FALSE(policy.TakeDue(kT0 + absl::Seconds(6), int64_t{105} << 20));
  // Part of it reused: the reference follows it down...
  EXPECT_FALSE(policy.TakeDue(kT0 + absl::Seconds(9), int64_t{40} << 20));
  // ...so the attack's memory freed at its end is given back at the next check.
  EXPECT_TRUE(policy.TakeDue(kT0 + absl::Seconds(12), int64_t{300} << 20));
  EXPECT_EQ(policy.releases(), 2);
  // Idle: the idle rules again (the last release was at 12 s: 10 s apart).
  policy.OnIdle(kT0 + absl::Seconds(13));
  EXPECT_FALSE(policy.TakeDue(kT0 + absl::Seconds(21)));
  EXPECT_TRUE(policy.TakeDue(kT0 + absl::Seconds(22)));
  o.busy_interval = absl::ZeroDuration();
  EXPECT_THAT(o.Validate().message(), ::testing::HasSubstr("MemoryReleaseOptions.busy_interval"));
  // Off: a busy server never checks.
  o.busy_interval = absl::InfiniteDuration();
  MemoryReleasePolicy idle_only(o);
  idle_only.OnBusy(kT0);
  EXPECT_EQ(idle_only.DueAt(), absl::InfiniteFuture());
  EXPECT_TRUE(o.Validate().ok());
}

TEST(MemoryReleaserTest, ItsThreadReleasesWhileBusyOnceMemoryWasFreed) {
  MemoryReleaseOptions o = Options(absl::Hours(1), absl::Hours(1));
  o.busy_interval = absl::Milliseconds(20);
  o.busy_slack_bytes = 16 << 20;
  std::atomic<int64_t> free_bytes{0};
  std::atomic<int> calls{0};
  absl::Notification released;
  MemoryReleaser releaser(
      o, [&] { if (++calls == 1) released.Notify(); }, [&] { return free_bytes.load(); });
  releaser.OnBusy();
  absl::SleepFor(absl::Milliseconds(200));  // ten checks, nothing freed
  EXPECT_EQ(calls.load(), 0);
  free_bytes = int64_t{64} << 20;  // an attack's memory freed while busy
  EXPECT_TRUE(released.WaitForNotificationWithTimeout(absl::Seconds(30)));
}

TEST(MemoryReleaserTest, ItsThreadReleasesWhenIdleAndStopsCleanly) {
  absl::Notification released;
  std::atomic<int> calls{0};
  {
    MemoryReleaser releaser(Options(absl::ZeroDuration(), absl::ZeroDuration()), [&] {
      if (++calls == 1) released.Notify();
    });
    releaser.OnBusy();
    releaser.OnIdle();
    released.WaitForNotification();
    EXPECT_EQ(releaser.releases(), 1);
  }
  EXPECT_EQ(calls.load(), 1);  // once per idle period, none at destruction
  {
    // Idle, but the delay has not passed when it is destroyed: no release.
    MemoryReleaser releaser(Options(absl::Hours(1), absl::ZeroDuration()), [&] { ++calls; });
    releaser.OnIdle();
  }
  EXPECT_EQ(calls.load(), 1);
}

// A bounded burst (256 MB over 4 threads, freed by another thread, as the
// server does) with the server's allocator settings: ReleaseFreeMemory()
// brings the resident set back near where it started.
TEST(ReleaseFreeMemoryTest, ReturnsMostOfABurstAfterItIsFreed) {
  ConfigureAllocatorForLargeBuffers(kServerMaxArenas);
  constexpr int kThreads = 4;
  constexpr size_t kBuffer = 3 * 224 * 224 * 4;
  constexpr size_t kPerThread = (size_t{64} << 20) / kBuffer;
  const uint64_t before = ResidentBytes();
  ASSERT_GT(before, 0u);
  std::vector<std::vector<std::unique_ptr<char[]>>> held(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&held, t] {
      for (size_t i = 0; i < kPerThread; ++i) {
        held[t].emplace_back(new char[kBuffer]);
        std::memset(held[t].back().get(), 1, kBuffer);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const uint64_t peak = ResidentBytes();
  ASSERT_GE(peak, before + (200u << 20));
  held.clear();
  const uint64_t freed = ResidentBytes();
  ReleaseFreeMemory();
  const uint64_t released = ResidentBytes();
  // glibc keeps the top of each thread's heap (up to 64 MB per arena, see
  // allocator.h) until a large free in that arena: malloc_trim alone left 110
  // MB of this burst here. The release frees a block in every arena, so the
  // tops go too: all but 32 MB of the burst.
  EXPECT_GE(freed, released + (64u << 20))
      << "MB: before " << (before >> 20) << " peak " << (peak >> 20) << " after free "
      << (freed >> 20) << " after release " << (released >> 20);
  EXPECT_LT(released, before + (32u << 20))
      << "MB: before " << (before >> 20) << " peak " << (peak >> 20) << " after free "
      << (freed >> 20) << " after release " << (released >> 20);
  KeepArenaTops();
}

}  // namespace
}  // namespace sophon
