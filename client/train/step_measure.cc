#include "client/train/step_measure.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "sophon/emulation/synthetic_batch.h"
#include "spdlog/spdlog.h"

namespace sophon {

absl::Status StepMeasureOptions::Validate() const {
  const auto at_least = [](const char* field, int64_t value, int64_t min) {
    if (value >= min) return absl::OkStatus();
    return absl::InvalidArgumentError(
        absl::StrCat("StepMeasureOptions.", field, " must be >= ", min, ", got ", value));
  };
  for (absl::Status s : {at_least("batch_size", batch_size, 1),
                         at_least("crop_size", crop_size, 1),
                         at_least("num_classes", num_classes, 1),
                         at_least("warmup_steps", warmup_steps, 0),
                         at_least("timed_steps", timed_steps, 1),
                         at_least("feature_size", feature_size, 0)}) {
    if (!s.ok()) return s;
  }
  if (stage != Stage::kTensor && stage != Stage::kCropped && stage != Stage::kFlipped) {
    return absl::InvalidArgumentError(absl::StrCat(
        "StepMeasureOptions.stage must be TENSOR, CROPPED or FLIPPED, got ", StageName(stage)));
  }
  return absl::OkStatus();
}

absl::StatusOr<StepMeasurement> MeasureTrainingStep(Trainer* trainer,
                                                    const StepMeasureOptions& options,
                                                    int world_size) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  const absl::Time start = absl::Now();
  Batch batch = MakeSyntheticBatch(options.batch_size, options.crop_size, options.num_classes,
                                   options.seed,
                                   options.feature_size > 0 ? Stage::kTensor : options.stage);
  if (options.feature_size > 0) {
    // A fine-tuned head's batch: F features per sample, non-negative as
    // pooled ReLU activations are.
    batch.stage = Stage::kFeatures;
    batch.c = options.feature_size;
    batch.h = batch.w = 1;
    batch.images.resize(static_cast<size_t>(options.batch_size) * options.feature_size);
    for (size_t i = 0; i < batch.images.size(); ++i) {
      batch.images[i] = static_cast<float>((i * 2654435761u) % 1000) / 1000.0f;
    }
  }
  const int steps = options.warmup_steps + options.timed_steps;
  absl::StatusOr<std::vector<double>> seconds = trainer->TrialSteps(batch, steps);
  if (!seconds.ok()) {
    return absl::Status(seconds.status().code(),
                        absl::StrCat("measuring the training step (", steps,
                                     " trial steps on a synthetic batch of ", options.batch_size,
                                     "): ", seconds.status().message()));
  }
  if (seconds->size() != static_cast<size_t>(steps)) {
    return absl::InternalError(absl::StrCat("measuring the training step: ", steps,
                                            " trial steps gave ", seconds->size(), " times"));
  }
  StepMeasurement m;
  m.step_seconds = *std::move(seconds);
  std::vector<double> timed(m.step_seconds.begin() + options.warmup_steps, m.step_seconds.end());
  std::sort(timed.begin(), timed.end());
  m.seconds = timed[timed.size() / 2];
  m.total_seconds = absl::ToDoubleSeconds(absl::Now() - start);
  std::string steps_text;
  for (int i = 0; i < steps; ++i) {
    absl::StrAppend(&steps_text, i == 0 ? "" : i == options.warmup_steps ? " | " : " ",
                    absl::StrFormat("%.3f", m.step_seconds[i]));
  }
  spdlog::info(
      "training step measured before training: {:.3f}s/batch on {} (the median of the last {} of "
      "{} steps: {} s; a synthetic batch of {} x {}: copy, forward, backward and the step of "
      "a separate optimizer of the same kind, then the weights, buffers and RNG put back; {}; "
      "{:.2f}s in all)",
      m.seconds, trainer->DeviceName(), options.timed_steps, steps, steps_text, options.batch_size,
      options.feature_size > 0
          ? absl::StrCat(options.feature_size, " features")
          : absl::StrCat("3x", options.crop_size, "x", options.crop_size),
      world_size > 1 ? absl::StrCat("this rank alone, without the gradient all-reduce of ",
                                    world_size, " ranks")
                     : std::string("one rank"),
      m.total_seconds);
  return m;
}

}  // namespace sophon
