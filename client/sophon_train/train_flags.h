// sophon-train's own flags (the model, the optimizer, ranks, checkpoints, the
// emulated GPU, smartoff's planner) and the steps of its main(), each reading
// the flags it needs. The flags every training-node program shares are in
// client/cli/job_flags.h.
#ifndef SOPHON_CLIENT_SOPHON_TRAIN_TRAIN_FLAGS_H_
#define SOPHON_CLIENT_SOPHON_TRAIN_TRAIN_FLAGS_H_

#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/job/job.h"
#include "client/job/job_spec.h"
#include "client/train/train_loop.h"
#include "client/train/trainer.h"
#include "sophon/model/backbone.h"

namespace sophon::train_cli {

// Prints the error naming the flag behind it; the exit code.
int Fail(const absl::Status& status);

// The job's options from the flags, checked before any server is reached:
// the loader, the mode and smartoff's options, the cache, the servers, and
// every flag that does not need the dataset (the model's, --save's folder,
// --checkpoint-dir, the combinations --finetune allows). `epochs`: --epochs.
absl::StatusOr<JobSpec> JobSpecFromFlags(int* epochs);

// --synthetic-data: the training step alone, no server; the exit code.
bool SyntheticData();
int RunSynthetic(const LoaderOptions& loader_options, int epochs);

// Logs how every epoch is split between the ranks (with several).
void LogRanks(const Job& job);

// --finetune: loads --init-checkpoint's frozen backbone and ends the job at
// FEATURES (the loader's backbone); null without --finetune. --transfer:
// ends the job at CROPPED for uint8 transfers.
absl::StatusOr<std::unique_ptr<Backbone>> SetTarget(Job* job);

// The model's options (its class count from the servers' manifest) and the
// trainer: LibTorch, or --device=emulate's.
absl::StatusOr<TrainerOptions> TrainerOptionsFromFlags(int num_classes,
                                                       const Backbone* backbone = nullptr);
absl::StatusOr<std::unique_ptr<Trainer>> CreateTrainer(const TrainerOptions& options,
                                                       int batch_size);

// The train loop's options; with --resume, the checkpoint's cursor (checked
// against the job: same dataset, seed and global batch).
absl::StatusOr<TrainLoopOptions> LoopOptionsFromFlags(const Job& job, int epochs,
                                                      const TrainerOptions& trainer_options,
                                                      Trainer* trainer);

// Before the plan: --profile-out with a fixed mode profiles the server;
// smartoff gets the step time (the emulated GPU's, or measured with
// --measure-step).
absl::Status PrepareToPlan(Job* job, Trainer* trainer, const TrainerOptions& trainer_options,
                           const Backbone* backbone);

// --save: each model to its checkpoint file.
absl::Status SaveModels(Trainer* trainer, const TrainerOptions& options);

}  // namespace sophon::train_cli

#endif  // SOPHON_CLIENT_SOPHON_TRAIN_TRAIN_FLAGS_H_
