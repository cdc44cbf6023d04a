// UnaryCalls: the caps per address and in all, and the calls that wait for a
// slot (their order, the turns between addresses, their timeout, their cap).
#include "server/unary_calls.h"

#include <atomic>
#include <string>

#include "absl/strings/match.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace sophon {
namespace {

class TestWaiter final : public UnaryCalls::Waiter {
 public:
  void Admitted() override { admitted.fetch_add(1); }
  void WaitTimedOut(const absl::Status& s, Limit l) override {
    status = s;
    limit = l;
    timed_out.Notify();
  }

  std::atomic<int> admitted{0};
  absl::Notification timed_out;
  absl::Status status;
  Limit limit = Limit::kDraining;
};

using Admission = UnaryCalls::Admission;

TEST(UnaryCallsTest, CallsOverAnAddressCapWaitInOrderForThatAddressSlots) {
  UnaryCalls calls(/*max_calls=*/10, /*max_per_peer=*/2, /*max_waiting=*/10, absl::Seconds(30));
  Limit limit;
  absl::Status status;
  TestWaiter w[4];
  EXPECT_EQ(calls.AdmitOrWait("a", &w[0], &limit, &status), Admission::kAdmitted);
  EXPECT_EQ(calls.AdmitOrWait("a", &w[1], &limit, &status), Admission::kAdmitted);
  EXPECT_EQ(calls.AdmitOrWait("a", &w[2], &limit, &status), Admission::kWaiting);
  EXPECT_EQ(limit, Limit::kMaxUnaryCallsPerPeer);
  EXPECT_TRUE(absl::StrContains(status.message(), "max_unary_calls_per_peer")) << status;
  EXPECT_EQ(calls.AdmitOrWait("a", &w[3], &limit, &status), Admission::kWaiting);
  EXPECT_TRUE(absl::StrContains(status.message(), "max_unary_calls_per_peer")) << status;
  EXPECT_EQ(calls.waiting(), 2);
  // Another address is not held up by a's.
  TestWaiter other;
  EXPECT_EQ(calls.AdmitOrWait("b", &other, &limit, &status), Admission::kAdmitted);
  calls.Release("b");
  EXPECT_EQ(w[2].admitted.load() + w[3].admitted.load(), 0) << "b's slot is not a's";
  calls.Release("a");
  EXPECT_EQ(w[2].admitted.load(), 1) << "the first to wait is the first admitted";
  EXPECT_EQ(w[3].admitted.load(), 0);
  EXPECT_EQ(calls.inflight("a"), 2);
  calls.Release("a");
  EXPECT_EQ(w[3].admitted.load(), 1);
  EXPECT_EQ(calls.waiting(), 0);
  calls.Release("a");
  calls.Release("a");
  EXPECT_EQ(calls.inflight(), 0);
}

// Each address may hold max_calls / (addresses + 1): the share of one more
// address stays free for a client that comes next.
TEST(UnaryCallsTest, ANewcomerFindsASlotBesideAddressesHoldingTheirShares) {
  UnaryCalls calls(/*max_calls=*/6, /*max_per_peer=*/6, /*max_waiting=*/10, absl::Seconds(30));
  Limit limit;
  absl::Status status;
  TestWaiter a[3], b[3], newcomer;
  ASSERT_EQ(calls.AdmitOrWait("a", &a[0], &limit, &status), Admission::kAdmitted);
  ASSERT_EQ(calls.AdmitOrWait("b", &b[0], &limit, &status), Admission::kAdmitted);
  // Two addresses and one to come: 2 each.
  ASSERT_EQ(calls.AdmitOrWait("a", &a[1], &limit, &status), Admission::kAdmitted);
  ASSERT_EQ(calls.AdmitOrWait("b", &b[1], &limit, &status), Admission::kAdmitted);
  EXPECT_EQ(calls.AdmitOrWait("a", &a[2], &limit, &status), Admission::kWaiting);
  EXPECT_EQ(limit, Limit::kMaxUnaryCalls);
  EXPECT_TRUE(absl::StrContains(status.message(), "its share")) << status;
  EXPECT_EQ(calls.AdmitOrWait("b", &b[2], &limit, &status), Admission::kWaiting);
  EXPECT_EQ(calls.inflight(), 4);
  EXPECT_EQ(calls.AdmitOrWait("c", &newcomer, &limit, &status), Admission::kAdmitted)
      << "the share kept free for the next address";
  EXPECT_TRUE(calls.StopWaiting("a", &a[2]));
  EXPECT_TRUE(calls.StopWaiting("b", &b[2]));
  for (const char* p : {"a", "a", "b", "b", "c"}) calls.Release(p);
  EXPECT_EQ(calls.inflight(), 0);
}

// A freed slot goes to the waiting address with the fewest calls: a client
// that asks late is not queued behind addresses that took their slots first.
TEST(UnaryCallsTest, AFreedSlotGoesToTheWaitingAddressWithTheFewestCalls) {
  UnaryCalls calls(/*max_calls=*/8, /*max_per_peer=*/8, /*max_waiting=*/32, absl::Seconds(30));
  Limit limit;
  absl::Status status;
  TestWaiter w[3][8], late;
  const char* names[3] = {"a1", "a2", "a3"};
  for (int p = 0; p < 3; ++p) {
    for (int i = 0; i < 8; ++i) (void)calls.AdmitOrWait(names[p], &w[p][i], &limit, &status);
  }
  ASSERT_EQ(calls.inflight(), 8);  // a1 4 (alone: 8 / 2), a2 2, a3 2
  ASSERT_EQ(calls.inflight("a1"), 4);
  ASSERT_EQ(calls.AdmitOrWait("late", &late, &limit, &status), Admission::kWaiting);
  calls.Release("a1");
  EXPECT_EQ(late.admitted.load(), 1) << "before a1's, a2's and a3's own waiting calls";
  EXPECT_EQ(calls.inflight("a1"), 3);
  // Everyone's waiting calls go; so do their held ones.
  for (int p = 0; p < 3; ++p) {
    for (int i = 0; i < 8; ++i) (void)calls.StopWaiting(names[p], &w[p][i]);
  }
  EXPECT_EQ(calls.waiting(), 0);
  EXPECT_FALSE(calls.StopWaiting("late", &late)) << "admitted, not waiting";
  for (int i = 0; i < 3; ++i) calls.Release("a1");
  for (int i = 0; i < 2; ++i) calls.Release("a2");
  for (int i = 0; i < 2; ++i) calls.Release("a3");
  calls.Release("late");
  EXPECT_EQ(calls.inflight(), 0);
}

TEST(UnaryCallsTest, ACallThatWaitsTooLongIsRefusedNamingItsLimit) {
  UnaryCalls calls(/*max_calls=*/4, /*max_per_peer=*/1, /*max_waiting=*/10,
                   absl::Milliseconds(100));
  Limit limit;
  absl::Status status;
  TestWaiter held, waiting;
  ASSERT_EQ(calls.AdmitOrWait("a", &held, &limit, &status), Admission::kAdmitted);
  const absl::Time start = absl::Now();
  ASSERT_EQ(calls.AdmitOrWait("a", &waiting, &limit, &status), Admission::kWaiting);
  ASSERT_TRUE(waiting.timed_out.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(100));
  EXPECT_EQ(waiting.limit, Limit::kMaxUnaryCallsPerPeer);
  EXPECT_EQ(waiting.status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_TRUE(absl::StrContains(waiting.status.message(), "max_unary_calls_per_peer"))
      << waiting.status;
  EXPECT_TRUE(absl::StrContains(waiting.status.message(), "unary_wait_timeout"))
      << waiting.status;
  EXPECT_EQ(calls.waiting(), 0);
  EXPECT_FALSE(calls.StopWaiting("a", &waiting));
  calls.Release("a");
  EXPECT_EQ(waiting.admitted.load(), 0) << "a call timed out is never admitted";
  EXPECT_EQ(calls.inflight(), 0);
}

TEST(UnaryCallsTest, OverTheWaitingCapACallIsRefusedAtOnce) {
  UnaryCalls calls(/*max_calls=*/4, /*max_per_peer=*/1, /*max_waiting=*/1, absl::Seconds(30));
  Limit limit;
  absl::Status status;
  TestWaiter w[3];
  ASSERT_EQ(calls.AdmitOrWait("a", &w[0], &limit, &status), Admission::kAdmitted);
  ASSERT_EQ(calls.AdmitOrWait("a", &w[1], &limit, &status), Admission::kWaiting);
  EXPECT_EQ(calls.AdmitOrWait("a", &w[2], &limit, &status), Admission::kRefused);
  EXPECT_EQ(limit, Limit::kMaxUnaryCallsPerPeer);
  EXPECT_TRUE(absl::StrContains(status.message(), "max_waiting_unary_calls")) << status;
  EXPECT_TRUE(calls.StopWaiting("a", &w[1]));
  calls.Release("a");
}

TEST(UnaryCallsTest, NoneWaitWhenTheWaitingCapIsZero) {
  UnaryCalls calls(/*max_calls=*/1, /*max_per_peer=*/1, /*max_waiting=*/0, absl::Seconds(30));
  Limit limit;
  absl::Status status;
  TestWaiter w[2];
  ASSERT_EQ(calls.AdmitOrWait("a", &w[0], &limit, &status), Admission::kAdmitted);
  EXPECT_EQ(calls.AdmitOrWait("b", &w[1], &limit, &status), Admission::kRefused);
  EXPECT_EQ(limit, Limit::kMaxUnaryCalls);
  calls.Release("a");
}

}  // namespace
}  // namespace sophon
