// The training step of sophon-train behind a LibTorch-free interface: only
// sophon_torch's files see LibTorch, so the rest of the project compiles fast.
#ifndef SOPHON_CLIENT_TRAIN_TRAINER_H_
#define SOPHON_CLIENT_TRAIN_TRAINER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "sophon/data/batch.h"

namespace sophon {

enum class OptimizerKind { kSgd, kAdam };

// "sgd" | "adam"; InvalidArgument naming the valid names otherwise.
absl::StatusOr<OptimizerKind> ParseOptimizerKind(const std::string& name);
const char* OptimizerName(OptimizerKind kind);

// The stage a training device receives, from a transfer name: "float32" ->
// TENSOR (normalised by the CPUs), "uint8" -> CROPPED (flipped and
// normalised on the device), "auto" -> CROPPED on a device named "cuda..."
// and TENSOR elsewhere. InvalidArgument for another name.
absl::StatusOr<Stage> TransferStage(const std::string& transfer, const std::string& device);

// One model's optimizer settings, with PyTorch's meaning (torch.optim.SGD
// without dampening or Nesterov, torch.optim.Adam without amsgrad).
struct Hyperparameters {
  double lr = 0.1;
  double momentum = 0.9;       // SGD only
  double weight_decay = 1e-4;  // L2 term added to the gradient (both optimizers)
  double beta1 = 0.9;          // Adam only
  double beta2 = 0.999;        // Adam only
  double eps = 1e-8;           // Adam only
};

// "lr=0.1 momentum=0.9 weight_decay=0.0001" (the fields `kind` uses).
std::string DescribeHyperparameters(OptimizerKind kind, const Hyperparameters& h);

// How each model's learning rate changes over the epochs.
//   kConstant: lr in every epoch.
//   kCosine: lr * (1 + cos(pi * epoch / epochs)) / 2 in epoch 0..epochs-1
//            (cosine annealing to zero, stepped per epoch; lr in epoch 0).
enum class LrSchedule { kConstant, kCosine };
absl::StatusOr<LrSchedule> ParseLrSchedule(const std::string& name);  // "constant" | "cosine"
const char* LrScheduleName(LrSchedule schedule);
// The learning rate of epoch `epoch` (0-based) of `epochs` for base rate `lr`.
double ScheduledLearningRate(LrSchedule schedule, double lr, int epoch, int epochs);

// Data-parallel training over ranks (PyTorch c10d with Gloo, process_group.h):
// each rank trains a replica on its own batches, rank 0's initial parameters
// and buffers are broadcast, gradients are averaged over the ranks before
// every optimizer step, and BatchNorm buffers follow rank 0 (broadcast before
// each training forward, as PyTorch DDP's broadcast_buffers=True).
struct DistributedOptions {
  int world_size = 1;            // 1 = no process group
  int rank = 0;
  std::string master_addr = "127.0.0.1";  // rank 0 hosts the c10d TCPStore here
  int master_port = 29500;
  absl::Duration collective_timeout = absl::Minutes(5);  // every collective and the rendezvous (>= 1 s)
  int64_t bucket_bytes = 25 << 20;  // gradients all-reduced in buckets of about this size
  // c10d backend of the collectives: "auto" (NCCL when the model is on CUDA
  // and this build has it, else Gloo), "nccl" (CUDA only) or "gloo". A
  // backend this build lacks is refused by name (process_group.h).
  std::string backend = "auto";
  absl::Status Validate() const;  // errors name the field: "DistributedOptions.rank must be ..."
};

struct TrainerOptions {
  std::string arch = "resnet18";  // alexnet | resnet18 | resnet50 | tinycnn | tinymlp
  int num_classes = 1000;
  std::string device = "cpu";     // cpu | cuda | cuda:N
  uint64_t seed = 0;              // model initialisation seed (model k of a fused array: seed + k)
  int threads = 0;                // intra-op threads for LibTorch on cpu; 0 = LibTorch default
  OptimizerKind optimizer = OptimizerKind::kSgd;
  LrSchedule lr_schedule = LrSchedule::kConstant;  // applied to every model's lr
  // One entry per model. `fused` = false: exactly one entry, an ordinary
  // model. `fused` = true: a fused array (HFTA) of models.size() >= 1
  // models of `arch`, trained together on each batch, model k with models[k].
  std::vector<Hyperparameters> models = {Hyperparameters{}};
  bool fused = false;
  // Checkpoint (written by Trainer::Save) to start from; every model of a
  // fused array starts from it. Empty: initialise from `seed`.
  std::string init_checkpoint;
  // Fine-tuning: the network of init_checkpoint with its backbone frozen and
  // only its classifier head trained, on FEATURES batches (Batch.images
  // [n, F]: the backbone's features, made by the loader). When num_classes
  // differs from the checkpoint's, the head's last layer is new (from
  // `seed`). Checkpoints (Save) hold the whole network. Needs init_checkpoint.
  bool finetune = false;
  // AlexNet's dropout probability (tests set 0 to compare runs exactly).
  double dropout = 0.5;
  // Mixed precision: "off"; "bf16" (the forward pass under autocast to
  // bfloat16, on cpu or cuda; the loss and the weights stay float32); or
  // "fp16" (autocast to float16, on cuda only, with loss scaling:
  // grad_scaler.h; a step whose gradients overflow is skipped; not for a
  // fused array of several models, which one scale would couple).
  std::string amp = "off";
  // Convolution weights and image batches in channels-last (NHWC) memory
  // order, which cuDNN's and oneDNN's fastest convolutions take. Not with
  // finetune (its batches are feature vectors).
  bool channels_last = false;
  // On a CUDA device: batches are staged in this many pinned host buffers and
  // copied on a side stream the compute stream waits for (0: copied from
  // pageable memory on the compute stream). Ignored on other devices.
  int staging_buffers = 2;
  // On an asynchronous device (CUDA): training steps the host may leave
  // queued on the device while it prepares the next batch (Trainer::Submit);
  // the host waits for the oldest only beyond this many. 0: every step is
  // waited for. The CPU's steps are done when they return.
  int steps_in_flight = 2;
  // Ranks; world_size 1 trains alone.
  DistributedOptions distributed;

  // The one check of these options; errors name the field
  // ("TrainerOptions.models[2].lr must be > 0, got -1"; the distributed
  // fields as "DistributedOptions.rank ..."). Does not check that
  // `arch` exists or that `device` is usable (Trainer::Create does).
  absl::Status Validate() const;
  int num_models() const { return static_cast<int>(models.size()); }
};

// One model's share of a training step of a fused array.
struct ModelStepResult {
  double loss = 0;      // mean cross-entropy of the batch
  int64_t correct = 0;  // top-1 correct predictions in the batch
};

struct StepResult {
  double loss = 0;       // mean cross-entropy of the batch (fused: the mean over the models)
  int64_t correct = 0;   // top-1 correct predictions in the batch (fused: 0; see `models`)
  int64_t count = 0;     // samples in the batch
  double copy_seconds = 0;  // host-to-device copy inside the step, where measured (else 0)
  // A fused array's models, in order; empty for one ordinary model.
  std::vector<ModelStepResult> models;
};

// Where Trainer::Save writes model k of `num_models` given the path the user
// named: the path itself for one ordinary model; otherwise ".k" goes before
// the file's extension ("ckpt.pt" -> "ckpt.3.pt", "ckpt" -> "ckpt.3").
std::string ModelCheckpointPath(const std::string& path, int k, int num_models, bool fused);

// What a checkpoint holds beside the weights and optimizer state.
struct TrainingCursor {
  int64_t epoch = 0;         // epoch in progress (the one to continue)
  int64_t position = 0;      // samples of that epoch's global order consumed (the data cursor)
  int64_t steps = 0;         // optimizer steps taken so far in the whole run
  int64_t global_batch = 0;  // samples per step over all ranks
  int world_size = 1;        // ranks that wrote it (information; resume may use another)
  uint64_t dataset_fingerprint = 0;
  uint64_t seed = 0;         // data seed
  int shuffle_window = 0;    // LoaderOptions.shuffle_window (0 = full shuffle)
};

// Trains one model, or a fused array of models, with cross-entropy.
// Not thread-safe: one thread calls Step().
class Trainer {
 public:
  virtual ~Trainer() = default;
  // Validates options (unknown arch, cuda requested but unavailable, ...)
  // and builds the model(s) and optimizer. With distributed.world_size > 1 it
  // also joins the process group (blocks until every rank has joined, at most
  // distributed.collective_timeout) and takes rank 0's parameters and buffers.
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(const TrainerOptions& options);
  // One forward + backward + optimizer step on the batch. Under world_size > 1
  // every rank must call it for every step (it runs collectives), and a batch
  // with n == 0 and no images or labels is allowed: the rank contributes zero
  // gradients (result: count 0, loss 0). Under world_size 1 such a batch is an
  // error. A failed collective ends with Unavailable naming the rank(s) gone.
  virtual absl::StatusOr<StepResult> Step(const Batch& batch) = 0;
  // Step without waiting for the device: queues the step (on CUDA its copy
  // and kernels; the host goes on at once) and returns the results of the
  // queued steps that have completed, oldest first, each step's exactly once
  // over Submit and Drain. The host waits only for the oldest steps beyond
  // TrainerOptions.steps_in_flight. A step's error may surface at a later
  // call, naming its batch. Trainers that run synchronously (the default)
  // return the step's own result.
  virtual absl::StatusOr<std::vector<StepResult>> Submit(const Batch& batch) {
    absl::StatusOr<StepResult> step = Step(batch);
    if (!step.ok()) return step.status();
    return std::vector<StepResult>{*std::move(step)};
  }
  // Waits for every step Submit queued; their results, oldest first. Step
  // and TrialSteps refuse to run while steps are queued (FailedPrecondition);
  // Evaluate, Save and SaveCheckpoint see the model after every step queued
  // so far (the device runs them in order).
  virtual absl::StatusOr<std::vector<StepResult>> Drain() { return std::vector<StepResult>{}; }
  // Times `steps` training steps on `batch` (each as Step runs it: the copy
  // to the device, forward, backward, optimizer step) and leaves no trace of
  // them: they step a new optimizer of the same kind and hyperparameters
  // (never the trainer's, whose state stays as it was), and the parameters,
  // buffers, gradients and random generators are put back afterwards, so that
  // training afterwards is bit-identical to training without them. The first
  // step allocates that optimizer's state (SGD momentum, Adam moments): time
  // it as a warm-up. Runs no collective, even under
  // world_size > 1 (a rank may call it alone; the step it times is this
  // rank's, without the gradient all-reduce). Returns each step's wall
  // seconds. InvalidArgument for steps < 1 or a batch Step would refuse (n
  // must be >= 1); Internal when the state could not be put back (the
  // trainer must not train on). Unimplemented by trainers that cannot.
  virtual absl::StatusOr<std::vector<double>> TrialSteps(const Batch& batch, int steps) {
    (void)batch;
    (void)steps;
    return absl::UnimplementedError("this trainer cannot time trial steps");
  }
  // Called by the train loop before epoch `epoch` (0-based) of `epochs`:
  // sets each model's learning rate for it (TrainerOptions.lr_schedule).
  virtual void BeginEpoch(int epoch, int epochs) {
    (void)epoch;
    (void)epochs;
  }
  // Forward only, no gradient (evaluation). Never runs collectives: ranks may
  // evaluate different numbers of batches (each with its own BatchNorm
  // buffers, as DDP in eval mode). Under world_size > 1 an empty batch gives
  // count 0, as in Step.
  virtual absl::StatusOr<StepResult> Evaluate(const Batch& batch) = 0;
  // "cpu" or "cuda:0", what the model actually runs on.
  virtual std::string DeviceName() const = 0;
  // Writes each model as an ordinary checkpoint (the unfused trainer loads
  // any of them with TrainerOptions.init_checkpoint) to
  // ModelCheckpointPath(path, k, ...); returns the files written.
  virtual absl::StatusOr<std::vector<std::string>> Save(const std::string& path) = 0;

  // Writes the whole training state to `path` atomically (a temporary file in
  // the same folder, fsync, rename), so that the data cursor never disagrees
  // with the weights: parameters and buffers, optimizer state, the current
  // learning rates, LibTorch's CPU RNG state, what identifies the trainer
  // (arch, classes, optimizer kind, fused model count) and `cursor`. Runs no
  // collectives (the train loop calls it on rank 0 only).
  virtual absl::Status SaveCheckpoint(const std::string& path, const TrainingCursor& cursor) {
    (void)path;
    (void)cursor;
    return absl::UnimplementedError("this trainer cannot write training checkpoints");
  }
  // Restores what SaveCheckpoint wrote and returns its cursor. NotFound for a
  // missing file; InvalidArgument naming the file and both values when the
  // arch, classes, optimizer kind, model count or finetune differ. Under world_size > 1
  // every rank loads the same file (it must be readable by every rank); no
  // collective runs.
  virtual absl::StatusOr<TrainingCursor> LoadCheckpoint(const std::string& path) {
    (void)path;
    return absl::UnimplementedError("this trainer cannot load training checkpoints");
  }

  // This process's rank and the number of ranks (0 and 1 without a process group).
  virtual int rank() const { return 0; }
  virtual int world_size() const { return 1; }
};

}  // namespace sophon

#endif  // SOPHON_CLIENT_TRAIN_TRAINER_H_
