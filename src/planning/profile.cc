#include "sophon/planning/profile.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "sophon/planning/epoch_crops.h"

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
  // Each sample's crop as the part of its file it kept (1: declined, sent whole).
  std::vector<size_t> index;
  std::vector<double> raw, area;
  double raw_sum = 0, crop_sum = 0, area_sum = 0;
  for (size_t i = 0; i < profile->samples.size(); ++i) {
    const SampleProfile& p = profile->samples[i];
    if (p.bytes[Stage::kJpegCrop] == 0 || p.bytes[kFirstStage] == 0) continue;
    const double r = static_cast<double>(p.bytes[kFirstStage]);
    index.push_back(i);
    raw.push_back(r);
    area.push_back(std::min(1.0, static_cast<double>(p.bytes[Stage::kJpegCrop]) / r));
    area_sum += area.back();
    if (cropped(p)) {
      raw_sum += r;
      crop_sum += static_cast<double>(p.bytes[Stage::kJpegCrop]);
    }
  }
  if (raw_sum <= 0 || crop_sum <= 0) return;

  // The times of the ops whose work depends on the crop: each sample's at an average crop.
  // Fitted over the samples of the profile whose crop is known. A profile too small for a
  // fit keeps its measured times but the region decode's: that of the whole file's decode
  // times the dataset's ratio of the two.
  if (index.size() < kMinSamplesForCropFit) {
    double decode = 0, region_decode = 0;
    for (const SampleProfile& p : profile->samples) {
      if (!cropped(p)) continue;
      decode += p.client[Op::kDecodeCrop];
      region_decode += p.client[Op::kDecodeJpegCrop];
    }
    for (SampleProfile& p : profile->samples) {
      if (cropped(p) && decode > 0) {
        p.client[Op::kDecodeJpegCrop] = p.client[Op::kDecodeCrop] * (region_decode / decode);
      }
    }
  } else {
    const double mean_area = area_sum / static_cast<double>(index.size());
    // Sizes in units of the mean file: the normal equations' terms are then all near 1.
    double size_unit = 0;
    for (double r : raw) size_unit += r;
    size_unit /= static_cast<double>(raw.size());
    for (Op op : {Op::kJpegCrop, Op::kDecodeCrop, Op::kDecodeJpegCrop}) {
      std::vector<double> t;
      std::vector<double> r, a;
      double t_min = std::numeric_limits<double>::infinity();
      for (size_t k = 0; k < index.size(); ++k) {
        const SampleProfile& p = profile->samples[index[k]];
        // The region decode of a crop that was declined decoded the whole file.
        if (op == Op::kDecodeJpegCrop && !cropped(p)) continue;
        t.push_back(p.client[op]);
        r.push_back(raw[k] / size_unit);
        a.push_back(area[k]);
        if (p.client[op] > 0) t_min = std::min(t_min, p.client[op]);
      }
      if (t.size() < kMinSamplesForCropFit || !std::isfinite(t_min)) continue;
      // Singular (every file of one size, or every crop alike): proportional to the size.
      std::optional<LinearCropFit> fit = FitLinearCrop(t, r, a);
      if (!fit.has_value()) {
        double t_sum = 0, r_sum = 0;
        for (size_t k = 0; k < t.size(); ++k) t_sum += t[k], r_sum += r[k];
        fit = LinearCropFit{0, t_sum / r_sum, 0};
      }
      for (size_t k = 0; k < index.size(); ++k) {
        SampleProfile& p = profile->samples[index[k]];
        if (op == Op::kDecodeJpegCrop && !cropped(p)) continue;
        p.client[op] = std::max(t_min, fit->At(raw[k] / size_unit, mean_area));
      }
    }
  }

  // The crop's bytes: the file's size times the dataset's ratio of cropped to whole bytes.
  const double bytes_ratio = crop_sum / raw_sum;
  for (SampleProfile& p : profile->samples) {
    if (!cropped(p)) continue;
    const double raw_bytes = static_cast<double>(p.bytes[kFirstStage]);
    p.bytes[Stage::kJpegCrop] = static_cast<uint64_t>(
        std::clamp<int64_t>(std::llround(raw_bytes * bytes_ratio), 1,
                   static_cast<int64_t>(p.bytes[kFirstStage]) - 1));
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
