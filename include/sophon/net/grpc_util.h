// gRPC helpers shared by the storage server and the training node: status
// conversion, errors that say what was being attempted, and the one retry
// loop (exponential backoff inside a deadline, only for codes that mean
// "try again"). Modelled on tf.data's grpc_util.
#ifndef SOPHON_NET_GRPC_UTIL_H_
#define SOPHON_NET_GRPC_UTIL_H_

#include <grpcpp/support/status.h>

#include <functional>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace sophon {

// Same code and message; OK stays OK. The two code enums share their values.
grpc::Status ToGrpcStatus(const absl::Status& status);
absl::Status FromGrpcStatus(const grpc::Status& status);

// The status of a failed call, with what was being attempted in front:
// WrapError("GetManifest from 127.0.0.1:5000", s) gives "GetManifest from
// 127.0.0.1:5000: <s's message>" with s's code. OK stays OK.
absl::Status WrapError(absl::string_view what, const grpc::Status& status);
absl::Status WrapError(absl::string_view what, const absl::Status& status);

// Codes after which the same call may succeed if tried again: UNAVAILABLE
// (server unreachable or restarting), ABORTED, and DEADLINE_EXCEEDED (of a
// single try; Retry's own deadline bounds the whole).
bool IsRetryable(absl::StatusCode code);

// Waits between tries: initial, then multiplied after every failed try, up
// to max. Retry clamps the values: initial >= 1 ms, multiplier >= 1,
// max >= initial.
struct BackoffOptions {
  absl::Duration initial = absl::Milliseconds(50);  // first wait
  absl::Duration max = absl::Seconds(2);            // longest wait
  double multiplier = 2;                            // growth per failed try
};

struct RetryOptions {
  BackoffOptions backoff;
  // Checked before every try and at least every 50 ms while waiting; once it
  // returns true, Retry returns CANCELLED. Empty = never.
  std::function<bool()> stop;
  // The clock, for tests: both empty = the real one (absl::Now, SleepFor).
  std::function<absl::Time()> now;
  std::function<void(absl::Duration)> sleep;
};

// Calls `f` until it succeeds, fails with a code that is not retryable
// (IsRetryable), or the deadline passes. `f` is called at least once; a wait
// that would end past the deadline is cut short so that the last try starts
// at the deadline. Returns:
//   - f's status, unchanged, when it succeeds or fails with a code that is
//     not retryable (f should say what it attempted: WrapError);
//   - at the deadline, f's last code with "gave up trying to <description>
//     after N tries in <time>: <f's last message>";
//   - CANCELLED "stopped trying to <description>" once options.stop says so.
// `description` is a verb phrase: "connect to storage server 10.0.0.2:50051".
absl::Status Retry(const std::function<absl::Status()>& f, absl::string_view description,
                   absl::Time deadline, const RetryOptions& options = {});

}  // namespace sophon

#endif  // SOPHON_NET_GRPC_UTIL_H_
