#include "sophon/planning/resources.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace sophon {

absl::Status Resources::Validate() const {
  if (!std::isfinite(net_bytes_per_s) || net_bytes_per_s <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("Resources.net_bytes_per_s must be > 0, got ",
                                                   net_bytes_per_s));
  }
  if (!std::isfinite(remote_cpus) || remote_cpus < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Resources.remote_cpus must be >= 0, got ", remote_cpus));
  }
  if (!std::isfinite(remote_speed) || remote_speed <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Resources.remote_speed must be > 0, got ", remote_speed));
  }
  if (!std::isfinite(local_seconds_per_wire_byte) || local_seconds_per_wire_byte < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Resources.local_seconds_per_wire_byte must be >= 0, got ", local_seconds_per_wire_byte));
  }
  if (!std::isfinite(remote_seconds_per_raw_byte) || remote_seconds_per_raw_byte < 0 ||
      !std::isfinite(remote_seconds_per_wire_byte) || remote_seconds_per_wire_byte < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Resources.remote_seconds_per_raw_byte and remote_seconds_per_wire_byte must be >= 0, got ",
        remote_seconds_per_raw_byte, " and ", remote_seconds_per_wire_byte));
  }
  if (!std::isfinite(local_cpus) || local_cpus <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("Resources.local_cpus must be > 0, got ", local_cpus));
  }
  if (!std::isfinite(local_speed) || local_speed <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Resources.local_speed must be > 0, got ", local_speed));
  }
  if (!std::isfinite(gpu_seconds_per_batch) || gpu_seconds_per_batch < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("Resources.gpu_seconds_per_batch must be >= 0, got ", gpu_seconds_per_batch));
  }
  if (batch_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("Resources.batch_size must be > 0, got ", batch_size));
  }
  return absl::OkStatus();
}

}  // namespace sophon
