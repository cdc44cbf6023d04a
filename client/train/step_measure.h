// The training step's time, measured before training starts (smartoff's
// first plan needs it): a few steps of the real trainer on a synthetic batch
// of the training batch's shape, through Trainer::TrialSteps, which steps an
// optimizer of its own (the trainer's state is never touched) and puts the
// model and the random generators back as they were, so the training that
// follows is bit-identical to one without the measurement.
//
// Under data-parallel ranks each rank measures its own step without the
// gradient all-reduce (TrialSteps runs no collective): a rank measures alone,
// whenever it likes, and plans its own slice of the epoch with what it
// measured, as it does with its link. The train loop's measured steps (all
// collectives included) then correct a plan that assumed too short a step.
#ifndef SOPHON_CLIENT_TRAIN_STEP_MEASURE_H_
#define SOPHON_CLIENT_TRAIN_STEP_MEASURE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/train/trainer.h"
#include "sophon/ops/stage.h"

namespace sophon {

struct StepMeasureOptions {
  int batch_size = 256;   // samples per step of this rank; >= 1
  int crop_size = 224;    // images are 3 x crop_size x crop_size; >= 1
  // What the device receives (LoaderOptions.target): kTensor, float32
  // images, or kCropped (kFlipped), uint8 crops the step flips and
  // normalises (normalises) on the device, so that the time measured
  // includes that work.
  Stage stage = Stage::kTensor;
  int num_classes = 1000; // labels cycle through [0, num_classes); >= 1
  // Untimed first steps; >= 0. On the CPU the first step of a model takes
  // ~4x the steady one and the second still ~1.5x (first-touch memory,
  // kernel set-up; tools/demo.sh's ResNet-18), hence two.
  int warmup_steps = 2;
  int timed_steps = 3;    // their median is the step time; >= 1
  uint64_t seed = 0;      // of the synthetic pixels
  // > 0: the trainer fine-tunes a head, and the batch holds this many
  // features per sample (the FEATURES stage) instead of images. >= 0
  int feature_size = 0;

  // The one check; errors name the field ("StepMeasureOptions.timed_steps ...").
  absl::Status Validate() const;
};

struct StepMeasurement {
  double seconds = 0;               // the median of the timed steps
  std::vector<double> step_seconds; // every step, the warm-up ones first
  double total_seconds = 0;         // all of it: batch, state copy, steps, restore
};

// Runs warmup_steps + timed_steps trial steps of `trainer` on a synthetic
// batch and logs one line with the result and how it was measured.
// `world_size` > 1 only changes the log (a single-rank measurement). Errors
// from Trainer::TrialSteps are returned with what was being measured.
absl::StatusOr<StepMeasurement> MeasureTrainingStep(Trainer* trainer,
                                                    const StepMeasureOptions& options,
                                                    int world_size = 1);

}  // namespace sophon

#endif  // SOPHON_CLIENT_TRAIN_STEP_MEASURE_H_
