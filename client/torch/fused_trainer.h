// The trainer of a fused model array (fused_models.h, fused_optimizer.h):
// B models of one architecture trained together on each batch, model k with
// its own hyperparameters and initialised as an ordinary model with seed
// + k. Trainer::Create picks it for TrainerOptions.fused.
//
// Only sophon_torch's files include this header: it pulls in LibTorch.
#ifndef SOPHON_CLIENT_TORCH_FUSED_TRAINER_H_
#define SOPHON_CLIENT_TORCH_FUSED_TRAINER_H_

#include <torch/types.h>

#include <memory>

#include "absl/status/statusor.h"
#include "client/train/trainer.h"

namespace sophon {

class DataParallel;
class TorchTrainerBase;

// REQUIRES: options validated (Trainer::Create does it), `device` usable.
// `data_parallel`: this rank's process group, or null without ranks.
absl::StatusOr<std::unique_ptr<TorchTrainerBase>> CreateFusedTrainer(
    const TrainerOptions& options, torch::Device device,
    std::unique_ptr<DataParallel> data_parallel);

}  // namespace sophon

#endif  // SOPHON_CLIENT_TORCH_FUSED_TRAINER_H_
