#include "client/train/epoch_steps.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/train/batch_timings.h"

namespace sophon {
namespace {

double Seconds(absl::Time since) { return absl::ToDoubleSeconds(absl::Now() - since); }

}  // namespace

EpochSteps::EpochSteps(Trainer* trainer, int epoch, EpochReport* report, EpochTally* tally,
                       DivergenceWatch* divergence, CsvLog* timings)
    : trainer_(trainer),
      epoch_(epoch),
      report_(report),
      tally_(tally),
      divergence_(divergence),
      timings_(timings) {}

EpochSteps::~EpochSteps() {
  if (!pending_.empty()) (void)trainer_->Drain();
}

absl::StatusOr<double> EpochSteps::Submit(const Batch& batch, int64_t step, double wait_seconds) {
  const absl::Time start = absl::Now();
  absl::StatusOr<std::vector<StepResult>> results = trainer_->Submit(batch);
  const double seconds = Seconds(start);
  if (!results.ok()) {
    return absl::Status(results.status().code(),
                        absl::StrCat("training step ", step, " of epoch ", epoch_, ": ",
                                     results.status().message()));
  }
  pending_.push_back(Submitted{step, batch.n, wait_seconds, seconds});
  Account(*results);
  return seconds;
}

absl::Status EpochSteps::Finish() {
  const absl::Time start = absl::Now();
  absl::StatusOr<std::vector<StepResult>> results = trainer_->Drain();
  if (!results.ok()) {
    return absl::Status(results.status().code(),
                        absl::StrCat("the training steps of epoch ", epoch_, " still queued: ",
                                     results.status().message()));
  }
  // The host waited here for the device: that time is the last steps'.
  if (!pending_.empty()) pending_.back().seconds += Seconds(start);
  Account(*results);
  if (!pending_.empty() || unmatched_ > 0) {
    return absl::InternalError(absl::StrCat("epoch ", epoch_, ": the trainer returned ",
                                            pending_.size(), " results too few and ", unmatched_,
                                            " too many for its submitted steps"));
  }
  return absl::OkStatus();
}

void EpochSteps::Account(const std::vector<StepResult>& results) {
  for (const StepResult& result : results) {
    if (pending_.empty()) {  // Finish reports the mismatch
      ++unmatched_;
      continue;
    }
    const Submitted s = pending_.front();
    pending_.pop_front();
    tally_->AddStep(result, s.seconds, report_);
    divergence_->Check(result, epoch_, s.step);
    if (timings_ != nullptr) {
      AddBatchTimings(timings_, epoch_, s.step, s.samples, s.wait_seconds, result.copy_seconds,
                      s.seconds - result.copy_seconds);
    }
    latest_ = result;
  }
}

}  // namespace sophon
