#include "sophon/profile.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace sophon {
namespace {

absl::Status CheckOpSeconds(double seconds, const char* op, uint64_t id) {
  if (!std::isfinite(seconds) || seconds < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sample ", id, ": ", op, " seconds must be finite and >= 0, got ", seconds));
  }
  return absl::OkStatus();
}

}  // namespace

const char* TimesSourceName(TimesSource source) {
  switch (source) {
    case TimesSource::kMeasured: return "measured";
    case TimesSource::kModel: return "model";
  }
  return "unknown";
}

absl::Status DatasetProfile::Validate() const {
  if (crop_size <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("profile crop_size must be > 0, got ", crop_size));
  }
  if (!std::isfinite(server_speed_factor) || server_speed_factor <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("profile server_speed must be finite and > 0, got ", server_speed_factor));
  }
  for (size_t i = 0; i < samples.size(); ++i) {
    const SampleProfile& s = samples[i];
    if (s.id != i) {
      return absl::InvalidArgumentError(absl::StrCat("profile sample at position ", i, " has id ",
                                                     s.id, "; ids must be 0, 1, 2, ..."));
    }
    if (s.raw_bytes == 0 || s.cropped_bytes == 0 || s.flipped_bytes == 0 || s.tensor_bytes == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("sample ", s.id, ": every stage size must be > 0 bytes"));
    }
    if (absl::Status st = CheckOpSeconds(s.client.decode_crop, "decode_crop", s.id); !st.ok()) {
      return st;
    }
    if (absl::Status st = CheckOpSeconds(s.client.flip, "flip", s.id); !st.ok()) return st;
    if (absl::Status st = CheckOpSeconds(s.client.tensor, "tensor", s.id); !st.ok()) return st;
  }
  return absl::OkStatus();
}

uint64_t StageBytes(const SampleProfile& sample, Stage stage) {
  switch (stage) {
    case Stage::kRaw: return sample.raw_bytes;
    case Stage::kCropped: return sample.cropped_bytes;
    case Stage::kFlipped: return sample.flipped_bytes;
    case Stage::kTensor: return sample.tensor_bytes;
  }
  return 0;
}

double OpSecondsBetween(const OpTimes& times, Stage from, Stage to) {
  double seconds = 0;
  if (from < Stage::kCropped && to >= Stage::kCropped) seconds += times.decode_crop;
  if (from < Stage::kFlipped && to >= Stage::kFlipped) seconds += times.flip;
  if (from < Stage::kTensor && to >= Stage::kTensor) seconds += times.tensor;
  return seconds;
}

int64_t CpuNanos(double seconds) { return std::llround(seconds * 1e9); }

std::vector<uint64_t> AllSampleIds(const DatasetProfile& profile) {
  std::vector<uint64_t> ids(profile.samples.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = i;
  return ids;
}

absl::Status CheckSampleIds(const DatasetProfile& profile, absl::Span<const uint64_t> ids) {
  for (uint64_t id : ids) {
    if (id >= profile.samples.size()) {
      return absl::OutOfRangeError(absl::StrCat("sample ", id, " is outside the profile of ",
                                                profile.samples.size(), " samples"));
    }
  }
  return absl::OkStatus();
}

absl::Status Resources::Validate() const {
  if (!std::isfinite(net_bytes_per_s) || net_bytes_per_s <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("--net-bw: network bandwidth must be > 0, got ",
                                                   net_bytes_per_s * 8 / 1e6, " Mbit/s"));
  }
  if (!std::isfinite(remote_cpus) || remote_cpus < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--remote-cpus: must be >= 0, got ", remote_cpus));
  }
  if (!std::isfinite(remote_speed) || remote_speed <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--remote-speed: must be > 0, got ", remote_speed));
  }
  if (!std::isfinite(local_seconds_per_wire_byte) || local_seconds_per_wire_byte < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "receive cost per byte must be >= 0, got ", local_seconds_per_wire_byte));
  }
  if (!std::isfinite(remote_seconds_per_raw_byte) || remote_seconds_per_raw_byte < 0 ||
      !std::isfinite(remote_seconds_per_wire_byte) || remote_seconds_per_wire_byte < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "storage read and send costs per byte must be >= 0, got ", remote_seconds_per_raw_byte,
        " and ", remote_seconds_per_wire_byte));
  }
  if (!std::isfinite(local_cpus) || local_cpus <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("--workers: must be > 0, got ", local_cpus));
  }
  if (!std::isfinite(gpu_seconds_per_batch) || gpu_seconds_per_batch < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--gpu-batch-seconds: must be >= 0, got ", gpu_seconds_per_batch));
  }
  if (batch_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("--batch-size: must be > 0, got ", batch_size));
  }
  return absl::OkStatus();
}

}  // namespace sophon
