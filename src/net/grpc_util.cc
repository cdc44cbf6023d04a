#include "sophon/net/grpc_util.h"

#include <algorithm>
#include <string>

#include "absl/strings/match.h"
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

bool IsMessageTooLarge(const absl::Status& status) {
  return status.code() == absl::StatusCode::kResourceExhausted &&
         (absl::StrContains(status.message(), "Received message larger than max") ||
          absl::StrContains(status.message(), "Sent message larger than max"));
}

absl::Status WithMessageTooLargeHint(const absl::Status& status, absl::string_view hint) {
  if (!IsMessageTooLarge(status)) return status;
  return absl::Status(status.code(), absl::StrCat(status.message(), "; ", hint));
}

Backoff::Backoff(const BackoffOptions& options, uint64_t seed)
    : initial_(std::max(options.initial, absl::Milliseconds(1))),
      max_(std::max(options.max, initial_)),
      multiplier_(std::max(options.multiplier, 1.0)),
      jitter_(std::clamp(options.jitter, 0.0, 1.0)),
      nominal_(initial_),
      rng_(seed) {}

absl::Duration Backoff::Next() {
  absl::Duration wait = nominal_;
  if (jitter_ > 0) {
    wait -= wait * (jitter_ * std::uniform_real_distribution<double>(0, 1)(rng_));
    wait = std::max(wait, absl::Milliseconds(1));
  }
  nominal_ = std::min(nominal_ * multiplier_, max_);
  return wait;
}

void Backoff::Reset() { nominal_ = initial_; }

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
  Backoff backoff(options.backoff);
  // While `stop` may end the retries, waits are cut into slices this long.
  constexpr absl::Duration kStopPoll = absl::Milliseconds(50);

  const absl::Time start = now();
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
    const absl::Duration wait = std::min(backoff.Next(), deadline - t);
    if (options.on_retry) {
      options.on_retry(tries, wait, status);
    } else {
      spdlog::debug("{}: retrying in {} after: {}", std::string(description),
                    absl::FormatDuration(wait), std::string(status.message()));
    }
    if (!options.stop) {
      sleep(wait);
    } else {
      for (absl::Duration left = wait; left > absl::ZeroDuration(); left -= kStopPoll) {
        if (stopped()) return cancelled();
        sleep(std::min(left, kStopPoll));
      }
    }
  }
}

}  // namespace sophon
