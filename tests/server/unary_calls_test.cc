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

TEST(UnaryCallsTest, AnAddressWithCallsWaitingQueuesItsNextBehindThem) {
  UnaryCalls calls(/*max_calls=*/2, /*max_per_peer=*/2, /*max_waiting=*/10, absl::Seconds(30));
  Limit limit;
  absl::Status status;
  TestWaiter x, y, first, second;
  ASSERT_EQ(calls.AdmitOrWait("x", &x, &limit, &status), Admission::kAdmitted);
  ASSERT_EQ(calls.AdmitOrWait("y", &y, &limit, &status), Admission::kAdmitted);
  ASSERT_EQ(calls.AdmitOrWait("a", &first, &limit, &status), Admission::kWaiting);
  EXPECT_EQ(limit, Limit::kMaxUnaryCalls);
  calls.Release("x");
  EXPECT_EQ(first.admitted.load(), 1);
  // a now has one call and one slot left of its own, but none of the server's.
  ASSERT_EQ(calls.AdmitOrWait("a", &second, &limit, &status), Admission::kWaiting);
  calls.Release("y");
  EXPECT_EQ(second.admitted.load(), 1);
}

TEST(UnaryCallsTest, TheServersFreedSlotsGoToTheWaitingAddressesInTurn) {
  UnaryCalls calls(/*max_calls=*/2, /*max_per_peer=*/2, /*max_waiting=*/10, absl::Seconds(30));
  Limit limit;
  absl::Status status;
  TestWaiter hold[2], a[2], b[2];
  ASSERT_EQ(calls.AdmitOrWait("h", &hold[0], &limit, &status), Admission::kAdmitted);
  ASSERT_EQ(calls.AdmitOrWait("h", &hold[1], &limit, &status), Admission::kAdmitted);
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(calls.AdmitOrWait("a", &a[i], &limit, &status), Admission::kWaiting);
  }
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(calls.AdmitOrWait("b", &b[i], &limit, &status), Admission::kWaiting);
  }
  calls.Release("h");
  calls.Release("h");
  EXPECT_EQ(a[0].admitted.load(), 1);
  EXPECT_EQ(b[0].admitted.load(), 1) << "a's second call does not go before b's first";
  EXPECT_EQ(a[1].admitted.load() + b[1].admitted.load(), 0);
  calls.Release("a");  // a's own slot frees: its next call
  EXPECT_EQ(a[1].admitted.load(), 1);
  EXPECT_EQ(calls.waiting(), 1);
  EXPECT_TRUE(calls.StopWaiting("b", &b[1]));
  EXPECT_EQ(calls.waiting(), 0);
  EXPECT_FALSE(calls.StopWaiting("b", &b[1])) << "taken out once";
  EXPECT_FALSE(calls.StopWaiting("a", &a[0])) << "admitted, not waiting";
  calls.Release("a");
  calls.Release("b");
  EXPECT_EQ(calls.inflight(), 0);
  EXPECT_EQ(b[1].admitted.load(), 0);
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
