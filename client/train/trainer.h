// The LibTorch side of sophon-train. This header deliberately does not include
// torch: only trainer.cc and models.cc see LibTorch, so the rest of the
// project compiles fast.
#ifndef SOPHON_CLIENT_TRAIN_TRAINER_H_
#define SOPHON_CLIENT_TRAIN_TRAINER_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "sophon/data/batch.h"

namespace sophon {

struct TrainerOptions {
  std::string arch = "resnet18";  // alexnet | resnet18 | resnet50 | tinycnn
  int num_classes = 1000;
  double lr = 0.1;
  double momentum = 0.9;
  double weight_decay = 1e-4;
  std::string device = "cpu";     // cpu | cuda
  uint64_t seed = 0;              // model initialisation seed
  int threads = 0;                // intra-op threads for LibTorch on cpu; 0 = LibTorch default
};

struct StepResult {
  double loss = 0;       // mean cross-entropy of the batch
  int64_t correct = 0;   // top-1 correct predictions in the batch
  int64_t count = 0;     // samples in the batch
  double copy_seconds = 0;  // host-to-device copy inside the step, where measured (else 0)
};

// Trains one model with SGD(momentum) and cross-entropy.
// Not thread-safe: one thread calls Step().
class Trainer {
 public:
  virtual ~Trainer() = default;
  // Validates options (unknown arch, cuda requested but unavailable, ...)
  // and builds the model and optimizer.
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(const TrainerOptions& options);
  // One forward + backward + optimizer step on the batch.
  virtual absl::StatusOr<StepResult> Step(const Batch& batch) = 0;
  // Forward only, no gradient (evaluation).
  virtual absl::StatusOr<StepResult> Evaluate(const Batch& batch) = 0;
  // "cpu" or "cuda:0", what the model actually runs on.
  virtual std::string DeviceName() const = 0;
};

}  // namespace sophon

#endif  // SOPHON_CLIENT_TRAIN_TRAINER_H_
