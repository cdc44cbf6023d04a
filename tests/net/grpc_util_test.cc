#include "sophon/net/grpc_util.h"

#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace sophon {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(GrpcUtilTest, StatusRoundTripsThroughGrpc) {
  EXPECT_TRUE(ToGrpcStatus(absl::OkStatus()).ok());
  EXPECT_TRUE(FromGrpcStatus(grpc::Status::OK).ok());
  for (int c = 1; c <= 16; ++c) {
    const absl::Status status(static_cast<absl::StatusCode>(c), "sample 7 (a/b.jpg): oops");
    const grpc::Status g = ToGrpcStatus(status);
    EXPECT_EQ(static_cast<int>(g.error_code()), c);
    EXPECT_EQ(g.error_message(), "sample 7 (a/b.jpg): oops");
    EXPECT_EQ(FromGrpcStatus(g), status);
  }
}

TEST(GrpcUtilTest, WrapErrorSaysWhatWasAttempted) {
  const absl::Status s = WrapError("GetManifest from 127.0.0.1:5000",
                                   grpc::Status(grpc::StatusCode::UNAVAILABLE, "refused"));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(s.message(), "GetManifest from 127.0.0.1:5000: refused");
  EXPECT_TRUE(WrapError("GetStats", grpc::Status::OK).ok());
  EXPECT_EQ(WrapError("x", absl::NotFoundError("y")), absl::NotFoundError("x: y"));
}

TEST(GrpcUtilTest, RetryableCodesMeanTryAgain) {
  EXPECT_TRUE(IsRetryable(absl::StatusCode::kUnavailable));
  EXPECT_TRUE(IsRetryable(absl::StatusCode::kAborted));
  EXPECT_TRUE(IsRetryable(absl::StatusCode::kDeadlineExceeded));
  EXPECT_FALSE(IsRetryable(absl::StatusCode::kOk));
  EXPECT_FALSE(IsRetryable(absl::StatusCode::kCancelled));
  EXPECT_FALSE(IsRetryable(absl::StatusCode::kInvalidArgument));
  EXPECT_FALSE(IsRetryable(absl::StatusCode::kOutOfRange));
  EXPECT_FALSE(IsRetryable(absl::StatusCode::kFailedPrecondition));
  EXPECT_FALSE(IsRetryable(absl::StatusCode::kNotFound));
}

// A clock that moves only when Retry sleeps (or a try advances it).
struct FakeClock {
  absl::Time now = absl::UnixEpoch() + absl::Hours(1);
  std::vector<absl::Duration> sleeps;

  RetryOptions Options() {
    RetryOptions options;
    options.now = [this] { return now; };
    options.sleep = [this](absl::Duration d) {
      sleeps.push_back(d);
      now += d;
    };
    return options;
  }
};

TEST(GrpcUtilTest, RetryStopsAtTheFirstCodeThatIsNotRetryable) {
  FakeClock clock;
  int calls = 0;
  const absl::Status s = Retry(
      [&] {
        ++calls;
        return calls == 1 ? absl::UnavailableError("down")
                          : absl::InvalidArgumentError("GetStats: bad request");
      },
      "get stats", clock.now + absl::Hours(1), clock.Options());
  EXPECT_EQ(calls, 2);
  EXPECT_EQ(s, absl::InvalidArgumentError("GetStats: bad request"));  // unchanged
  EXPECT_THAT(clock.sleeps, ElementsAre(absl::Milliseconds(50)));
}

TEST(GrpcUtilTest, RetryRetriesRetryableCodesUntilSuccess) {
  FakeClock clock;
  int calls = 0;
  const absl::Status s = Retry(
      [&] {
        ++calls;
        if (calls == 1) return absl::UnavailableError("down");
        if (calls == 2) return absl::AbortedError("restarting");
        if (calls == 3) return absl::DeadlineExceededError("slow");
        return absl::OkStatus();
      },
      "connect", clock.now + absl::Hours(1), clock.Options());
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_EQ(calls, 4);
  // Exponential backoff: 50 ms doubling.
  EXPECT_THAT(clock.sleeps, ElementsAre(absl::Milliseconds(50), absl::Milliseconds(100),
                                        absl::Milliseconds(200)));
}

TEST(GrpcUtilTest, RetryGivesUpAtTheDeadlineNamingTheDescription) {
  FakeClock clock;
  const absl::Time deadline = clock.now + absl::Seconds(1);
  int calls = 0;
  const absl::Status s = Retry(
      [&] {
        ++calls;
        EXPECT_LE(clock.now, deadline);  // every try starts by the deadline
        return absl::UnavailableError("GetManifest from 10.0.0.2:50051: refused");
      },
      "connect to storage server 10.0.0.2:50051", deadline, clock.Options());
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("gave up trying to connect to storage server "
                                     "10.0.0.2:50051 after 6 tries"));
  EXPECT_THAT(s.message(), HasSubstr("GetManifest from 10.0.0.2:50051: refused"));
  EXPECT_EQ(calls, 6);
  // 50, 100, 200, 400, then the wait is cut short so that the last try
  // starts at the deadline.
  EXPECT_THAT(clock.sleeps,
              ElementsAre(absl::Milliseconds(50), absl::Milliseconds(100), absl::Milliseconds(200),
                          absl::Milliseconds(400), absl::Milliseconds(250)));
  EXPECT_EQ(clock.now, deadline);
}

TEST(GrpcUtilTest, RetryWaitsAreCappedByTheBackoffOptions) {
  FakeClock clock;
  RetryOptions options = clock.Options();
  options.backoff.initial = absl::Seconds(1);
  options.backoff.max = absl::Seconds(3);
  options.backoff.multiplier = 4;
  int calls = 0;
  const absl::Status s = Retry(
      [&] { return ++calls < 4 ? absl::AbortedError("busy") : absl::OkStatus(); }, "fetch",
      clock.now + absl::Hours(1), options);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_THAT(clock.sleeps, ElementsAre(absl::Seconds(1), absl::Seconds(3), absl::Seconds(3)));
}

TEST(GrpcUtilTest, RetryTriesOnceWhenTheDeadlineHasPassed) {
  FakeClock clock;
  int calls = 0;
  const absl::Status s = Retry(
      [&] {
        ++calls;
        return absl::UnavailableError("down");
      },
      "reach the server", clock.now - absl::Seconds(1), clock.Options());
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(s.message(), HasSubstr("gave up trying to reach the server after 1 try"));
  EXPECT_TRUE(clock.sleeps.empty());
}

TEST(GrpcUtilTest, RetryStopsWhenAskedWhileWaiting) {
  FakeClock clock;
  RetryOptions options = clock.Options();
  const absl::Time stop_at = clock.now + absl::Milliseconds(120);
  options.stop = [&] { return clock.now >= stop_at; };
  int calls = 0;
  const absl::Status s = Retry(
      [&] {
        ++calls;
        return absl::UnavailableError("down");
      },
      "wait for the server", clock.now + absl::Hours(1), options);
  EXPECT_EQ(s.code(), absl::StatusCode::kCancelled);
  EXPECT_THAT(s.message(), HasSubstr("wait for the server"));
  // Tries at 0 and 50 ms; the 100 ms wait is sliced (50 + 50) so the stop at
  // 120 ms is seen at 150 ms, before a third try.
  EXPECT_EQ(calls, 2);
  EXPECT_THAT(clock.sleeps,
              ElementsAre(absl::Milliseconds(50), absl::Milliseconds(50), absl::Milliseconds(50)));
}

// The real clock: a short deadline ends the retries (no upper bound on the
// time taken, which a loaded machine could exceed).
TEST(GrpcUtilTest, RetryWithTheRealClockEndsAtTheDeadline) {
  int calls = 0;
  const absl::Time start = absl::Now();
  const absl::Status s = Retry(
      [&] {
        ++calls;
        return absl::UnavailableError("down");
      },
      "reach the server", start + absl::Milliseconds(100));
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable);
  EXPECT_GE(calls, 1);
  EXPECT_GE(absl::Now(), start + absl::Milliseconds(100));
}

// gRPC's own text for a message over the receiver's limit names no option;
// the hint is appended to exactly that status.
TEST(GrpcUtilTest, MessageTooLargeGetsTheHint) {
  const absl::Status grpc_text = absl::ResourceExhaustedError(
      "Received message larger than max (14036 vs. 4224)");
  EXPECT_TRUE(IsMessageTooLarge(grpc_text));
  EXPECT_TRUE(IsMessageTooLarge(
      absl::ResourceExhaustedError("Sent message larger than max (70000000 vs. 67108864)")));
  const absl::Status hinted = WithMessageTooLargeHint(grpc_text, "see --max-request-bytes");
  EXPECT_EQ(hinted.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(hinted.message(),
            "Received message larger than max (14036 vs. 4224); see --max-request-bytes");
  // Same text, another code; another RESOURCE_EXHAUSTED: unchanged.
  const absl::Status other_code =
      absl::InternalError("Received message larger than max (14036 vs. 4224)");
  EXPECT_EQ(WithMessageTooLargeHint(other_code, "hint"), other_code);
  const absl::Status other_text = absl::ResourceExhaustedError("max_streams reached");
  EXPECT_FALSE(IsMessageTooLarge(other_text));
  EXPECT_EQ(WithMessageTooLargeHint(other_text, "hint"), other_text);
  EXPECT_TRUE(WithMessageTooLargeHint(absl::OkStatus(), "hint").ok());
}

TEST(GrpcUtilTest, BackoffJitterShortensEachWaitWithinItsFraction) {
  BackoffOptions options;
  options.initial = absl::Milliseconds(100);
  options.max = absl::Milliseconds(800);
  options.jitter = 0.5;
  Backoff backoff(options, /*seed=*/7);
  std::vector<absl::Duration> waits;
  for (int i = 0; i < 6; ++i) waits.push_back(backoff.Next());
  const absl::Duration nominal[] = {absl::Milliseconds(100), absl::Milliseconds(200),
                                    absl::Milliseconds(400), absl::Milliseconds(800),
                                    absl::Milliseconds(800), absl::Milliseconds(800)};
  bool any_shortened = false;
  for (int i = 0; i < 6; ++i) {
    EXPECT_LE(waits[i], nominal[i]) << i;
    EXPECT_GE(waits[i], nominal[i] / 2) << i;
    any_shortened |= waits[i] < nominal[i];
  }
  EXPECT_TRUE(any_shortened);
  // Reset starts the series again; no jitter gives the nominal waits.
  backoff.Reset();
  EXPECT_LE(backoff.Next(), absl::Milliseconds(100));
  Backoff exact(BackoffOptions{});
  EXPECT_EQ(exact.Next(), absl::Milliseconds(50));
  EXPECT_EQ(exact.Next(), absl::Milliseconds(100));
}

TEST(GrpcUtilTest, RetryTellsOnRetryAboutEveryWait) {
  FakeClock clock;
  RetryOptions options = clock.Options();
  std::vector<int> tries;
  std::vector<std::string> messages;
  options.on_retry = [&](int n, absl::Duration wait, const absl::Status& status) {
    tries.push_back(n);
    messages.push_back(std::string(status.message()));
    EXPECT_GT(wait, absl::ZeroDuration());
  };
  int calls = 0;
  const absl::Status s = Retry(
      [&] { return ++calls < 3 ? absl::UnavailableError("down") : absl::OkStatus(); }, "connect",
      clock.now + absl::Hours(1), options);
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_THAT(tries, ElementsAre(1, 2));
  EXPECT_THAT(messages, ElementsAre("down", "down"));
}

}  // namespace
}  // namespace sophon
