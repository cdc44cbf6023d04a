#include "sophon/profiling/profiler.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "sophon/base/status_macros.h"
#include "sophon/planning/epoch_crops.h"

namespace sophon {

absl::Status ProfilerOptions::Validate() const {
  RETURN_IF_ERROR(pipeline.augment.Validate());
  if (epochs < 1) {
    return absl::InvalidArgumentError(absl::StrCat("ProfilerOptions.epochs must be >= 1, got ", epochs));
  }
  if (max_samples < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ProfilerOptions.max_samples must be >= 0, got ", max_samples));
  }
  return absl::OkStatus();
}

absl::StatusOr<DatasetProfile> MeasureProfile(const SampleSource& source,
                                              const ProfilerOptions& options) {
  RETURN_IF_ERROR(options.Validate());
  const int s = options.pipeline.augment.crop_size;
  uint64_t n = source.size();
  if (options.max_samples > 0) n = std::min<uint64_t>(n, options.max_samples);
  DatasetProfile profile;
  profile.dataset = source.name();
  profile.fingerprint = source.fingerprint();
  profile.crop_size = s;
  profile.times_source = TimesSource::kMeasured;
  profile.times_detail =
      absl::StrCat("measured on this machine over ", options.epochs, " epoch(s)");
  profile.samples.resize(n);
  for (uint64_t id = 0; id < n; ++id) profile.samples[id].id = id;
  // FEATURES is measured when there is a backbone to run, PREDICTIONS when it
  // has a head.
  const FeatureExtractor* model = options.pipeline.backbone;
  const Stage last = model == nullptr            ? Stage::kTensor
                     : model->num_classes() > 0 ? Stage::kPredictions
                                                : Stage::kFeatures;
  for (Stage stage = Stage::kFeatures; stage <= last; stage = StageAt(StageIndex(stage) + 1)) {
    profile.stages.Add(stage);
  }
  // Every stage's size as the ops produced it, summed over the epochs (a
  // stage whose size depends on the crop differs between them).
  std::vector<PerStage<uint64_t>> byte_sums(n);
  for (int epoch = 0; epoch < options.epochs; ++epoch) {
    for (uint64_t id = 0; id < n; ++id) {
      SampleProfile& sample = profile.samples[id];
      ASSIGN_OR_RETURN(std::string bytes, source.Read(id));
      const auto fail = [&](const absl::Status& error) {
        return absl::Status(error.code(),
                            absl::StrCat("profiling sample ", id, " (",
                                         source.manifest().relative_path(id), "): ", error.message()));
      };
      if (epoch == 0) {
        absl::StatusOr<ImageInfo> info = ReadJpegInfo(bytes, options.pipeline.limits);
        if (!info.ok()) return fail(info.status());
        sample.source_pixels = static_cast<uint64_t>(info->width) * info->height;
        sample.width = static_cast<uint32_t>(info->width);
        sample.height = static_cast<uint32_t>(info->height);
      }
      const CropExtent crop =
          CropExtentOf(SampleKey{options.seed, static_cast<uint64_t>(epoch), id}, sample.width,
                       sample.height, options.pipeline.augment);
      sample.crop_part += crop.part / options.epochs;
      sample.crop_reach += crop.reach / options.epochs;
      StageData raw;
      raw.data = std::move(bytes);
      PerStage<uint64_t> stage_bytes;
      // The ops a sample sent RAW skips (the lossless crop and its decode).
      if (absl::Status st = MeasureSkippedOps(
              raw, SampleKey{options.seed, static_cast<uint64_t>(epoch), id}, options.pipeline,
              &sample.client, &stage_bytes);
          !st.ok()) {
        return fail(st);
      }
      absl::StatusOr<StageData> out = RunPipeline(
          std::move(raw), last, SampleKey{options.seed, static_cast<uint64_t>(epoch), id},
          options.pipeline, &sample.client, &stage_bytes);
      if (!out.ok()) return fail(out.status());
      for (int k = 0; k < kNumStages; ++k) byte_sums[id].values[k] += stage_bytes.values[k];
    }
  }
  for (SampleProfile& sample : profile.samples) {
    for (double& seconds : sample.client.values) seconds /= options.epochs;
    for (int k = 0; k < kNumStages; ++k) {
      const uint64_t epochs = static_cast<uint64_t>(options.epochs);
      sample.bytes.values[k] = (byte_sums[sample.id].values[k] + epochs / 2) / epochs;
    }
  }
  return profile;
}

}  // namespace sophon
