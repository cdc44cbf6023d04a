// gRPC helpers shared by the storage server and the training node: status
// conversion, errors that say what was being attempted, and the one retry
// loop (exponential backoff inside a deadline, only for codes that mean
// "try again"). Modelled on tf.data's grpc_util.
#ifndef SOPHON_NET_GRPC_UTIL_H_
#define SOPHON_NET_GRPC_UTIL_H_

#include <grpcpp/support/status.h>

#include <cstdint>
#include <functional>
#include <random>

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

// gRPC refuses a message larger than the receiver accepts with
// RESOURCE_EXHAUSTED "Received message larger than max (N vs. M)" (or "Sent
// message larger than max" on the sender's side): true for such a status.
bool IsMessageTooLarge(const absl::Status& status);
// `status` with "; " + `hint` appended when IsMessageTooLarge(status), else
// unchanged: gRPC's text names no option that sets the limit.
absl::Status WithMessageTooLargeHint(const absl::Status& status, absl::string_view hint);

// Waits between tries: initial, then multiplied after every failed try, up
// to max. Backoff clamps the values: initial >= 1 ms, multiplier >= 1,
// max >= initial, jitter in [0, 1].
struct BackoffOptions {
  absl::Duration initial = absl::Milliseconds(50);  // first wait
  absl::Duration max = absl::Seconds(2);            // longest wait
  double multiplier = 2;                            // growth per failed try
  // Each wait is shortened by a random fraction of it up to `jitter` (0.5:
  // between half and all of the nominal wait), so that many clients refused
  // together do not all come back at the same moment. 0 = exact waits.
  double jitter = 0;
};

// The waits of one series of tries (exponential, capped, with jitter).
class Backoff {
 public:
  explicit Backoff(const BackoffOptions& options, uint64_t seed = std::random_device()());
  // The wait before the next try; each call grows the nominal wait.
  absl::Duration Next();
  // Back to the initial wait (after a success).
  void Reset();

 private:
  absl::Duration initial_;
  absl::Duration max_;
  double multiplier_;
  double jitter_;
  absl::Duration nominal_;
  std::mt19937_64 rng_;
};

struct RetryOptions {
  BackoffOptions backoff;
  // Checked before every try and at least every 50 ms while waiting; once it
  // returns true, Retry returns CANCELLED. Empty = never.
  std::function<bool()> stop;
  // Called before each wait with the tries made so far, the wait and the
  // last try's status (e.g. to log it). Empty = a debug log line.
  std::function<void(int tries, absl::Duration wait, const absl::Status& status)> on_retry;
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
