#include "sophon/planning/profile.h"

#include <algorithm>
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
  if (!stages.Has(kFirstStage)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "profile stages (", StageSetNames(stages), ") must include ", StageName(kFirstStage)));
  }
  for (Stage stage : AllStages()) {
    if (stage > target && stages.Has(stage)) {
      return absl::InvalidArgumentError(absl::StrCat("profile stages (", StageSetNames(stages),
                                                     ") include ", StageName(stage),
                                                     ", past the job's target stage ",
                                                     StageName(target)));
    }
  }
  for (size_t i = 0; i < samples.size(); ++i) {
    const SampleProfile& s = samples[i];
    if (s.id != i) {
      return absl::InvalidArgumentError(absl::StrCat("profile sample at position ", i, " has id ",
                                                     s.id, "; ids must be 0, 1, 2, ..."));
    }
    for (const StageInfo& stage : kStageTable) {
      if (s.bytes[stage.stage] == 0 && stages.Has(stage.stage)) {
        return absl::InvalidArgumentError(
            absl::StrCat("sample ", s.id, ": the size of every stage the profile offers must be > 0 bytes (",
                         stage.name, " is 0)"));
      }
    }
    for (const OpInfo& op : kOpTable) {
      if (absl::Status st = CheckOpSeconds(s.client[op.op], op.name, s.id); !st.ok()) return st;
    }
  }
  return absl::OkStatus();
}

void SetSizedStageBytes(int crop_size, SampleProfile* sample) {
  for (Stage stage : AllStages()) {
    const int64_t bytes = StagePayloadBytes(stage, crop_size);
    if (bytes >= 0) sample->bytes[stage] = static_cast<uint64_t>(bytes);
  }
}

void UseExpectedJpegCrops(DatasetProfile* profile) {
  if (!profile->stages.Has(Stage::kJpegCrop)) return;
  auto cropped = [](const SampleProfile& p) {
    return p.bytes[Stage::kJpegCrop] > 0 && p.bytes[Stage::kJpegCrop] < p.bytes[kFirstStage];
  };
  double raw = 0, crop = 0, decode = 0, region_decode = 0;
  for (const SampleProfile& p : profile->samples) {
    if (!cropped(p)) continue;
    raw += static_cast<double>(p.bytes[kFirstStage]);
    crop += static_cast<double>(p.bytes[Stage::kJpegCrop]);
    decode += p.client[Op::kDecodeCrop];
    region_decode += p.client[Op::kDecodeJpegCrop];
  }
  if (raw <= 0 || crop <= 0) return;
  const double bytes_ratio = crop / raw;
  const double decode_ratio = decode > 0 ? region_decode / decode : 0;
  for (SampleProfile& p : profile->samples) {
    if (!cropped(p)) continue;
    const double raw_bytes = static_cast<double>(p.bytes[kFirstStage]);
    p.bytes[Stage::kJpegCrop] = static_cast<uint64_t>(
        std::clamp<int64_t>(std::llround(raw_bytes * bytes_ratio), 1,
                   static_cast<int64_t>(p.bytes[kFirstStage]) - 1));
    if (decode_ratio > 0) p.client[Op::kDecodeJpegCrop] = p.client[Op::kDecodeCrop] * decode_ratio;
  }
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

}  // namespace sophon
