#include "sophon/net/grpc_util.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "spdlog/spdlog.h"

namespace sophon {

grpc::Status ToGrpcStatus(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()),
                      std::string(status.message()));
}

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

absl::Status WrapError(absl::string_view what, const grpc::Status& status) {
  return WrapError(what, FromGrpcStatus(status));
}

absl::Status WrapError(absl::string_view what, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(what, ": ", status.message()));
}

bool IsRetryable(absl::StatusCode code) {
  return code == absl::StatusCode::kUnavailable || code == absl::StatusCode::kAborted ||
         code == absl::StatusCode::kDeadlineExceeded;
}

absl::Status Retry(const std::function<absl::Status()>& f, absl::string_view description,
                   absl::Time deadline, const RetryOptions& options) {
  const auto now = [&] { return options.now ? options.now() : absl::Now(); };
  const auto sleep = [&](absl::Duration d) {
    if (options.sleep) {
      options.sleep(d);
    } else {
      absl::SleepFor(d);
    }
  };
  const auto stopped = [&] { return options.stop && options.stop(); };
  const auto cancelled = [&] {
    return absl::CancelledError(absl::StrCat("stopped trying to ", description));
  };
  // The one place the backoff options are clamped.
  const absl::Duration initial = std::max(options.backoff.initial, absl::Milliseconds(1));
  const absl::Duration max_wait = std::max(options.backoff.max, initial);
  const double multiplier = std::max(options.backoff.multiplier, 1.0);
  // While `stop` may end the retries, waits are cut into slices this long.
  constexpr absl::Duration kStopPoll = absl::Milliseconds(50);

  const absl::Time start = now();
  absl::Duration backoff = initial;
  for (int tries = 1;; ++tries) {
    if (stopped()) return cancelled();
    const absl::Status status = f();
    if (status.ok() || !IsRetryable(status.code())) return status;
    const absl::Time t = now();
    if (t >= deadline) {
      return absl::Status(status.code(),
                          absl::StrCat("gave up trying to ", description, " after ", tries,
                                       tries == 1 ? " try" : " tries", " in ",
                                       absl::FormatDuration(t - start), ": ", status.message()));
    }
    const absl::Duration wait = std::min(backoff, deadline - t);
    spdlog::debug("{}: retrying in {} after: {}", std::string(description),
                  absl::FormatDuration(wait), std::string(status.message()));
    if (!options.stop) {
      sleep(wait);
    } else {
      for (absl::Duration left = wait; left > absl::ZeroDuration(); left -= kStopPoll) {
        if (stopped()) return cancelled();
        sleep(std::min(left, kStopPoll));
      }
    }
    backoff = std::min(backoff * multiplier, max_wait);
  }
}

}  // namespace sophon
