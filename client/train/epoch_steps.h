// An epoch's training steps as the training loops run them: each batch is
// submitted to the trainer (Trainer::Submit), and each step's result is
// accounted for in the epoch's report when it arrives, which on an
// asynchronous device is a few submits later (or at Finish). Shared by the
// real and the synthetic training loops.
#ifndef SOPHON_CLIENT_TRAIN_EPOCH_STEPS_H_
#define SOPHON_CLIENT_TRAIN_EPOCH_STEPS_H_

#include <cstdint>
#include <deque>
#include <optional>

#include "absl/status/status.h"
#include "client/train/csv_log.h"
#include "client/train/train_loop.h"
#include "client/train/trainer.h"
#include "sophon/data/batch.h"

namespace sophon {

class EpochSteps {
 public:
  // `timings` (per-batch CSV rows) may be null. Everything must outlive this.
  EpochSteps(Trainer* trainer, int epoch, EpochReport* report, EpochTally* tally,
             DivergenceWatch* divergence, CsvLog* timings);
  // Drains the trainer (results dropped) if steps are still queued: an
  // epoch ended by an error leaves the trainer with none.
  ~EpochSteps();
  EpochSteps(const EpochSteps&) = delete;
  EpochSteps& operator=(const EpochSteps&) = delete;

  // Submits `batch`, the epoch's step `step`, fetched after `wait_seconds`
  // of waiting. Returns the seconds the submit took (the whole step on a
  // synchronous trainer; on an asynchronous device the launch, plus any wait
  // for the oldest step queued). Errors name the step and the epoch.
  absl::StatusOr<double> Submit(const Batch& batch, int64_t step, double wait_seconds);
  // Waits for the steps still queued and accounts for them.
  absl::Status Finish();

  // The newest result accounted for, if any (its loss for the progress line).
  const std::optional<StepResult>& latest() const { return latest_; }
  // Steps submitted whose results have not arrived yet.
  int pending() const { return static_cast<int>(pending_.size()); }

 private:
  // What the host saw of a submitted step, kept until its result arrives.
  struct Submitted {
    int64_t step = 0;
    int samples = 0;
    double wait_seconds = 0;
    double seconds = 0;  // the submit's; Finish adds its wait to the last
  };
  void Account(const std::vector<StepResult>& results);

  Trainer* const trainer_;
  const int epoch_;
  EpochReport* const report_;
  EpochTally* const tally_;
  DivergenceWatch* const divergence_;
  CsvLog* const timings_;
  std::deque<Submitted> pending_;
  std::optional<StepResult> latest_;
  int64_t unmatched_ = 0;  // results beyond the steps submitted
};

}  // namespace sophon

#endif  // SOPHON_CLIENT_TRAIN_EPOCH_STEPS_H_
