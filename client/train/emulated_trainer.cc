#include "client/train/emulated_trainer.h"

#include <algorithm>
#include <chrono>
#include <limits>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace sophon {
namespace {

using Clock = std::chrono::steady_clock;

Clock::duration ToDuration(double seconds) {
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

double SecondsBetween(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

absl::StatusOr<std::unique_ptr<EmulatedTrainer>> EmulatedTrainer::Create(
    const GpuProfile& profile, const EmulatedTrainerOptions& options, int batch_size) {
  if (options.gpu_count < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("EmulatedTrainerOptions.gpu_count must be >= 1, got ", options.gpu_count));
  }
  if (options.fused_models < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "EmulatedTrainerOptions.fused_models must be >= 1 (0: no fused array), got ",
        options.fused_models));
  }
  if (!(options.evaluate_compute_fraction >= 0)) {
    return absl::InvalidArgumentError("evaluate_compute_fraction must be >= 0");
  }
  std::unique_ptr<EmulatedTrainer> trainer(new EmulatedTrainer(profile, options));
  absl::StatusOr<GpuStepTime> t = trainer->StepTimeFor(batch_size);
  if (!t.ok()) return t.status();
  spdlog::info(
      "trainer: emulating {} x{} for {}{} (no model runs): copy {:.4f}s + compute {:.4f}s "
      "per step of {} samples, at most {:.1f} img/s",
      options.gpu_type, options.gpu_count, options.arch,
      options.fused_models > 0 ? absl::StrCat(", a fused array of ", options.fused_models) : "",
      t->copy_seconds, t->compute_seconds, batch_size,
      batch_size / std::max(1e-12, t->copy_seconds + t->compute_seconds));
  return trainer;
}

absl::StatusOr<GpuStepTime> EmulatedTrainer::StepTimeFor(int n) {
  auto it = times_.find(n);
  if (it != times_.end()) return it->second;
  absl::StatusOr<GpuStepTime> t = LookupFused(n);
  if (!t.ok()) return t.status();
  if (t->scaled) {
    spdlog::info("{}", t->note);
  } else {
    spdlog::debug("{}", t->note);
  }
  t->copy_seconds /= options_.gpu_count;
  t->compute_seconds /= options_.gpu_count;
  return times_.emplace(n, *std::move(t)).first->second;
}

absl::StatusOr<GpuStepTime> EmulatedTrainer::LookupFused(int n) const {
  const int b = options_.fused_models;
  if (b == 0) return profile_.Lookup(options_.gpu_type, options_.arch, n);
  absl::StatusOr<GpuStepTime> fused =
      profile_.Lookup(options_.gpu_type, absl::StrCat(options_.arch, "x", b), n);
  if (fused.ok() || fused.status().code() != absl::StatusCode::kNotFound) return fused;
  // No row for the fused array: one copy of n images, the compute of b*n.
  absl::StatusOr<GpuStepTime> copy = profile_.Lookup(options_.gpu_type, options_.arch, n);
  if (!copy.ok()) return copy.status();
  const int64_t fused_batch = static_cast<int64_t>(b) * n;
  if (fused_batch > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(absl::StrCat("a fused array of ", b, " at batch ", n,
                                                   " is beyond any GPU profile"));
  }
  absl::StatusOr<GpuStepTime> compute =
      profile_.Lookup(options_.gpu_type, options_.arch, static_cast<int>(fused_batch));
  if (!compute.ok()) {
    return absl::Status(compute.status().code(),
                        absl::StrCat("a fused array of ", b, " ", options_.arch, " at batch ", n,
                                     " runs like one at batch ", fused_batch, " (no row for ",
                                     options_.arch, "x", b, "): ", compute.status().message()));
  }
  GpuStepTime t = *std::move(compute);
  t.copy_seconds = copy->copy_seconds;
  t.scaled = true;
  t.note = absl::StrCat("fused array of ", b, " ", options_.arch, " at batch ", n,
                        " (no profile row for model ", options_.arch, "x", b,
                        "): copy of ", n, " images ", copy->copy_seconds, "s + compute of one ",
                        options_.arch, " at batch ", b * n, " ", t.compute_seconds, "s; ",
                        t.note);
  return t;
}

absl::StatusOr<StepResult> EmulatedTrainer::Sleep(const Batch& batch, double compute_fraction) {
  if (batch.n <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch ", batch.index, ": n must be > 0, got ", batch.n));
  }
  absl::StatusOr<GpuStepTime> t = StepTimeFor(batch.n);
  if (!t.ok()) return t.status();
  // Deadlines from one start, so that a late wake-up from the copy sleep does
  // not lengthen the step.
  const Clock::time_point start = Clock::now();
  const Clock::time_point copy_end = start + ToDuration(t->copy_seconds);
  std::this_thread::sleep_until(copy_end);
  const Clock::time_point copied = Clock::now();
  std::this_thread::sleep_until(copy_end + ToDuration(t->compute_seconds * compute_fraction));
  StepResult result;
  result.count = batch.n;
  result.copy_seconds = SecondsBetween(start, copied);
  result.models.resize(static_cast<size_t>(options_.fused_models));
  return result;
}

absl::StatusOr<StepResult> EmulatedTrainer::Step(const Batch& batch) { return Sleep(batch, 1.0); }

absl::StatusOr<std::vector<double>> EmulatedTrainer::TrialSteps(const Batch& batch, int steps) {
  if (steps < 1) {
    return absl::InvalidArgumentError(absl::StrCat("trial steps must be >= 1, got ", steps));
  }
  std::vector<double> seconds;
  for (int i = 0; i < steps; ++i) {
    const Clock::time_point start = Clock::now();
    absl::StatusOr<StepResult> step = Step(batch);
    if (!step.ok()) return step.status();
    seconds.push_back(SecondsBetween(start, Clock::now()));
  }
  return seconds;
}

absl::StatusOr<StepResult> EmulatedTrainer::Evaluate(const Batch& batch) {
  return Sleep(batch, options_.evaluate_compute_fraction);
}

absl::StatusOr<std::vector<std::string>> EmulatedTrainer::Save(const std::string& path) {
  return absl::FailedPreconditionError(absl::StrCat(
      "cannot save a model to '", path, "': --device=emulate emulates the GPU's time and trains "
      "no model"));
}

std::string EmulatedTrainer::DeviceName() const {
  return absl::StrCat("emulated ", options_.gpu_type, " x", options_.gpu_count);
}

}  // namespace sophon
