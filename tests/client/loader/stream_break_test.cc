// The loader's decision on a broken Fetch stream: every reason the server can
// give and every status code, and the same decisions whatever the messages
// say (the decision reads the code and the reason, never the text).
#include "client/loader/stream_break.h"

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "sophon/net/refusal.h"

namespace sophon {
namespace {

using A = StreamBreakAction;

// What each of the server's reasons means to the loader.
const std::map<Refusal, A>& ExpectedForReason() {
  static const auto* expected = new std::map<Refusal, A>{
      {Refusal::kInvalidRequest, A::kFail},
      {Refusal::kMaxRequestBytes, A::kFail},
      {Refusal::kMaxIdsPerRequest, A::kFail},
      {Refusal::kMaxCropSize, A::kFail},
      {Refusal::kMaxStreamInflightBytes, A::kFail},
      {Refusal::kMaxStreams, A::kAwaitSlot},
      {Refusal::kMaxStreamsPerPeer, A::kAwaitSlot},
      {Refusal::kStreamEvicted, A::kAwaitSlot},
      {Refusal::kIdleStreamTimeout, A::kRetry},
      {Refusal::kWriteStallTimeout, A::kRetry},
      {Refusal::kReadStallTimeout, A::kRetry},
      {Refusal::kReadSlotTaken, A::kRetry},
      {Refusal::kDraining, A::kRetry},
      {Refusal::kMaxUnaryCalls, A::kRetry},
      {Refusal::kMaxUnaryCallsPerPeer, A::kRetry},
  };
  return *expected;
}

// Every code but OK.
std::vector<absl::StatusCode> ErrorCodes() {
  std::vector<absl::StatusCode> codes;
  for (int c = 1; c <= 16; ++c) codes.push_back(static_cast<absl::StatusCode>(c));
  return codes;
}

// What each code means without a reason from the server, for a stream whose
// requests every server's gRPC accepts.
A ExpectedWithoutReason(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kCancelled:
    case absl::StatusCode::kResourceExhausted:  // the transport shedding load
      return A::kRetry;
    default:
      return A::kFail;
  }
}

// Messages a status might carry: gRPC's and the server's wordings, the
// wording of another case (to mislead a text match), empty, garbled.
std::vector<std::string> Messages() {
  return {"",
          "Received RST_STREAM with error code 11",
          "GOAWAY received",
          "Buffers full",
          "ENHANCE_YOUR_CALM",
          "Received message larger than max (5000 vs. 4160)",
          "the server has 4 open streams, its limit (ServiceOptions.max_streams = 4)",
          "client 10.0.0.1 has 2 open streams, the limit per client "
          "(ServiceOptions.max_streams_per_peer = 2)",
          "a response was not taken for 6s while other streams waited for the server's memory, "
          "over the server's write_stall_timeout limit (5s)",
          "the stream was idle for 5m, over the server's idle_stream_timeout limit (5m)",
          "over the server's read_stall_timeout limit (5s)",
          "a new stream took its read slot",
          "a request names 900 samples, over the server's max_ids_per_request limit (512)",
          "a request message of 70 bytes is over the server's max_request_bytes limit (64)",
          "zz\x01\xff garbled ##",
          "quelque chose s'est mal passé"};
}

TEST(StreamBreakTest, EveryReasonHasItsDecisionWhateverTheCode) {
  ASSERT_EQ(ExpectedForReason().size(), static_cast<size_t>(kNumRefusals));
  for (const auto& [reason, expected] : ExpectedForReason()) {
    for (absl::StatusCode code : ErrorCodes()) {
      SCOPED_TRACE(absl::StrCat(RefusalName(reason), " with ", absl::StatusCodeToString(code)));
      EXPECT_EQ(DecideStreamBreak({absl::Status(code, "x"), RefusalName(reason), 0}), expected);
      // The reason decides even after a large request (it is the server's).
      EXPECT_EQ(DecideStreamBreak({absl::Status(code, "x"), RefusalName(reason), 1 << 20}),
                expected);
    }
  }
}

TEST(StreamBreakTest, WithoutAReasonTheCodeDecides) {
  for (absl::StatusCode code : ErrorCodes()) {
    SCOPED_TRACE(absl::StatusCodeToString(code));
    EXPECT_EQ(DecideStreamBreak({absl::Status(code, "x"), "", 0}), ExpectedWithoutReason(code));
  }
}

// gRPC's own message-size refusal has no reason either: RESOURCE_EXHAUSTED on
// a stream that carried a message over what the smallest server limit lets
// through is not retried (the same message would be refused again).
TEST(StreamBreakTest, ResourceExhaustedAfterAMessageOverTheLeastServerLimitIsNotRetried) {
  const absl::Status exhausted = absl::ResourceExhaustedError("x");
  EXPECT_EQ(DecideStreamBreak({exhausted, "", kMinServerMessageLimitBytes}), A::kRetry);
  EXPECT_EQ(DecideStreamBreak({exhausted, "", kMinServerMessageLimitBytes + 1}), A::kFail);
  // Only RESOURCE_EXHAUSTED: a dropped connection is retried after any request.
  EXPECT_EQ(DecideStreamBreak({absl::UnavailableError("x"), "", int64_t{1} << 30}), A::kRetry);
  EXPECT_EQ(DecideStreamBreak({absl::CancelledError("x"), "", int64_t{1} << 30}), A::kRetry);
}

// A reason this build does not know (a newer server's): the codes that always
// mean "try again" are retried; RESOURCE_EXHAUSTED from the server itself may
// be a limit on the requests, and is not.
TEST(StreamBreakTest, AnUnknownReasonFallsBackToTheCodesThatMeanTryAgain) {
  for (absl::StatusCode code : ErrorCodes()) {
    SCOPED_TRACE(absl::StatusCodeToString(code));
    const A expected =
        code == absl::StatusCode::kResourceExhausted ? A::kFail : ExpectedWithoutReason(code);
    EXPECT_EQ(DecideStreamBreak({absl::Status(code, "x"), "max_something_new", 0}), expected);
  }
}

// The same decisions for every case whatever its message says: reworded,
// empty, garbled, or the wording of a case that is decided otherwise.
TEST(StreamBreakTest, RewordedMessagesGetTheSameDecisions) {
  std::vector<std::string> reasons = {"", "max_something_new"};
  for (int i = 0; i < kNumRefusals; ++i) reasons.push_back(RefusalName(static_cast<Refusal>(i)));
  int cases = 0;
  for (const std::string& reason : reasons) {
    for (absl::StatusCode code : ErrorCodes()) {
      for (int64_t largest : {int64_t{0}, kMinServerMessageLimitBytes + 1}) {
        const A reference = DecideStreamBreak({absl::Status(code, "reference"), reason, largest});
        for (const std::string& message : Messages()) {
          SCOPED_TRACE(absl::StrCat("reason '", reason, "', ", absl::StatusCodeToString(code),
                                    ", largest ", largest, ", message '", message, "'"));
          EXPECT_EQ(DecideStreamBreak({absl::Status(code, message), reason, largest}), reference);
          ++cases;
        }
      }
    }
  }
  EXPECT_EQ(cases, 17 * 16 * 2 * 16);
}

// Reasons are matched exactly: a name with other case, spaces or a suffix is
// not a known reason.
TEST(StreamBreakTest, ReasonsAreMatchedExactly) {
  const absl::Status exhausted = absl::ResourceExhaustedError("x");
  EXPECT_EQ(DecideStreamBreak({exhausted, "max_streams", 0}), A::kAwaitSlot);
  EXPECT_EQ(DecideStreamBreak({exhausted, "MAX_STREAMS", 0}), A::kFail);
  EXPECT_EQ(DecideStreamBreak({exhausted, " max_streams", 0}), A::kFail);
  EXPECT_EQ(DecideStreamBreak({exhausted, "max_streams_x", 0}), A::kFail);
}

TEST(StreamBreakTest, ActionsHaveNames) {
  EXPECT_STREQ(StreamBreakActionName(A::kFail), "fail");
  EXPECT_STREQ(StreamBreakActionName(A::kAwaitSlot), "await_slot");
  EXPECT_STREQ(StreamBreakActionName(A::kRetry), "retry");
}

}  // namespace
}  // namespace sophon
