#include "client/train/synthetic_run.h"

#include <algorithm>
#include <fstream>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/train/batch_timings.h"
#include "client/train/csv_log.h"
#include "client/train/epoch_steps.h"
#include "spdlog/spdlog.h"
#include "sophon/emulation/synthetic_batch.h"

namespace sophon {
namespace {

double Seconds(absl::Time since) { return absl::ToDoubleSeconds(absl::Now() - since); }

absl::Status StepError(const absl::Status& s, int64_t step, int epoch) {
  return absl::Status(s.code(), absl::StrCat("synthetic training step ", step, " of epoch ", epoch,
                                             ": ", s.message()));
}

}  // namespace

absl::Status SyntheticRunOptions::Validate() const {
  if (batch_size < 1 || crop_size < 1 || num_classes < 1 || samples < 1 || warmup_steps < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "synthetic data needs batch size, crop size, classes and samples >= 1 (got ", batch_size,
        ", ", crop_size, ", ", num_classes, ", ", samples, ") and warm-up steps >= 0"));
  }
  if (stage != Stage::kTensor && stage != Stage::kCropped && stage != Stage::kFlipped) {
    return absl::InvalidArgumentError(absl::StrCat(
        "synthetic data comes at the TENSOR, CROPPED or FLIPPED stage, not ", StageName(stage)));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<EpochReport>> RunSyntheticTraining(Trainer* trainer,
                                                              const SyntheticRunOptions& synthetic,
                                                              const TrainLoopOptions& loop) {
  if (absl::Status s = synthetic.Validate(); !s.ok()) return s;
  Batch full = MakeSyntheticBatch(synthetic.batch_size, synthetic.crop_size, synthetic.num_classes,
                                  synthetic.seed, synthetic.stage);
  Batch last;  // the short last batch, if the epoch size asks for one
  if (const int rest = static_cast<int>(synthetic.samples % synthetic.batch_size); rest != 0) {
    last = MakeSyntheticBatch(rest, synthetic.crop_size, synthetic.num_classes, synthetic.seed,
                              synthetic.stage);
  }
  for (int i = 0; i < synthetic.warmup_steps; ++i) {
    absl::StatusOr<StepResult> step = trainer->Step(full);
    if (!step.ok()) return StepError(step.status(), -1 - i, 0);
  }
  absl::StatusOr<std::unique_ptr<CsvLog>> opened =
      CsvLog::Create(loop.batch_timings, kBatchTimingsHeader, kBatchTimingsWhat);
  if (!opened.ok()) return opened.status();
  std::unique_ptr<CsvLog> timings = *std::move(opened);
  int64_t batches = (synthetic.samples + synthetic.batch_size - 1) / synthetic.batch_size;
  if (loop.max_batches > 0) batches = std::min(batches, loop.max_batches);
  std::vector<EpochReport> reports;
  DivergenceWatch divergence(loop.model_labels);
  for (int epoch = 0; epoch < loop.epochs; ++epoch) {
    trainer->BeginEpoch(epoch, loop.epochs);
    EpochReport report;
    report.epoch = epoch;
    report.emulated = loop.emulated;
    EpochTally tally;
    const absl::Time start = absl::Now();
    EpochSteps steps(trainer, epoch, &report, &tally, &divergence, timings.get());
    for (int64_t i = 0; i < batches; ++i) {
      Batch& batch = (i == batches - 1 && last.n > 0 && loop.max_batches == 0) ? last : full;
      batch.index = i;
      if (absl::StatusOr<double> s = steps.Submit(batch, i, 0.0); !s.ok()) {
        return absl::Status(s.status().code(), absl::StrCat("synthetic data: ", s.status().message()));
      }
    }
    if (absl::Status s = steps.Finish(); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("synthetic data: ", s.message()));
    }
    report.wall_seconds = Seconds(start);
    report.loader.samples = static_cast<uint64_t>(tally.seen());
    report.loader.batches = static_cast<uint64_t>(batches);
    tally.Finish(&report);
    spdlog::info("synthetic data: {}", FormatEpochReport(report, loop.model_labels));
    reports.push_back(report);
  }
  if (timings) {
    if (absl::Status s = timings->Close(); !s.ok()) return s;
  }
  if (absl::Status s = WriteReportJson(reports, loop); !s.ok()) return s;
  return reports;
}

}  // namespace sophon
