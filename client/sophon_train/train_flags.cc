// sophon-train's own flags, and the steps of its main() that read them.
#include "client/sophon_train/train_flags.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/cli/job_flags.h"
#include "client/loader/sampler.h"
#include "client/offload/profile_pass.h"
#include "client/train/emulated_trainer.h"
#include "client/train/launch_env.h"
#include "client/train/step_measure.h"
#include "client/train/synthetic_run.h"
#include "sophon/cli/cli.h"
#include "sophon/emulation/gpu_profile.h"
#include "sophon/planning/planner.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(int, world_size, -1,
          "Data-parallel ranks (processes) of the job; -1 = $WORLD_SIZE (torchrun), else 1. "
          "Each rank takes a disjoint share of every epoch; gradients are all-reduced over "
          "c10d (--dist-backend) every step. Default -1.");
ABSL_FLAG(int, local_world_size, -1,
          "The job's ranks on this node, who share its link and cores: smartoff plans each "
          "rank with its part of them (and of the storage nodes' prep workers, over "
          "--world-size). -1 = $LOCAL_WORLD_SIZE (torchrun), else --world-size when "
          "--master-addr is a loopback address, else 1. Default -1.");
ABSL_FLAG(std::string, dist_backend, "auto",
          "c10d backend of the ranks' collectives: auto (nccl when --device is cuda and this "
          "build has NCCL, else gloo), nccl (CUDA only) or gloo. A backend the build lacks is "
          "refused by name at start. Default auto.");
ABSL_FLAG(int, rank, -1, "This process's rank in [0, --world-size); -1 = $RANK, else 0. Default -1.");
ABSL_FLAG(std::string, master_addr, "",
          "Address of rank 0, which hosts the c10d store; empty = $MASTER_ADDR, else 127.0.0.1. "
          "Default empty.");
ABSL_FLAG(int, master_port, -1,
          "Port of rank 0's c10d store; -1 = $MASTER_PORT, else 29500. Default -1.");
ABSL_FLAG(absl::Duration, collective_timeout, absl::Minutes(5),
          "With ranks: how long any collective (and the start-up rendezvous) may wait for the "
          "other ranks before the run ends naming the rank that is gone. Default 5m.");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "Write the whole training state (model, optimizer state, learning rate, RNG, epoch "
          "and the data cursor: the position in the epoch's global sample order) to "
          "DIR/checkpoint.pt atomically, every --checkpoint-every steps and at the end; rank 0 "
          "writes. Default none.");
ABSL_FLAG(int64_t, checkpoint_every, 0,
          "Steps between checkpoints into --checkpoint-dir; 0 = only at the end. Default 0.");
ABSL_FLAG(int64_t, max_steps, 0,
          "Stop the run after this many optimizer steps in total (counting those before a "
          "--resume); with --checkpoint-dir a checkpoint is written there. 0 = no limit. "
          "Default 0.");
ABSL_FLAG(bool, resume, false,
          "Continue from --checkpoint-dir's checkpoint: same epoch, same sample order, at its "
          "data cursor. Another world size is fine if --batch-size x --world-size (the global "
          "batch) is the same; another dataset or global batch is refused. Default false.");
ABSL_FLAG(std::string, mode, "nooff",
          "Where preprocessing runs: nooff (all on this node), resizeoff/piloff (storage node "
          "decodes, crops and flips), alloff (storage node does everything up to the tensor), "
          "featuresoff (with --finetune: the storage node's backbone also extracts the features), "
          "smartoff (per sample, from a profile and the cost model; see --planner). Aliases "
          "remote_nooff, remote_piloff, remote_alloff. Default nooff.");
ABSL_FLAG(std::string, arch, "auto",
          "Model: alexnet, resnet18, resnet50, tinycnn, tinymlp (a BatchNorm-free test model), or "
          "auto: the --init-checkpoint's architecture with --finetune, else resnet18. Default "
          "auto.");
ABSL_FLAG(int64_t, feature_cache_bytes, 0,
          "With --finetune and --augment=none (features are then the same every epoch): keep up "
          "to this many bytes of features on this node (2 bytes per feature, e.g. 1 KiB per "
          "sample for resnet18) and take a held sample from here in later epochs instead of "
          "fetching it. 0 = off. Default 0.");
ABSL_FLAG(bool, finetune, false,
          "Train only the classifier head of --init-checkpoint's network, on the features of its "
          "frozen backbone (the features stage: the pooled activations in front of the head). A "
          "storage node started with --backbone=<the same checkpoint> extracts them "
          "(--mode=featuresoff, or per sample with smartoff); samples sent at an earlier stage go "
          "through this node's copy of the backbone, forward only. When the dataset's class count "
          "differs from the checkpoint's, the head's last layer is new. --save writes the whole "
          "network. Default false.");
ABSL_FLAG(int, batch_size, 256,
          "Samples per batch of each rank (the global batch is this x --world-size). "
          "Default 256.");
ABSL_FLAG(int, epochs, 1, "Epochs to train. Default 1.");
ABSL_FLAG(int64_t, max_batches, 0, "Stop each epoch after this many batches; 0 = whole epoch.");
ABSL_FLAG(int64_t, warmup_batches, 0,
          "Train this many batches of an unreported warm-up epoch first (benchmarks: keeps "
          "one-time costs such as first-touch memory out of epoch 0). Default 0.");
ABSL_FLAG(int, fused_models, 0,
          "Train a fused array of B models of --arch on the one data stream (the HFTA design: "
          "each batch is prepared once and trains all B models in one pass), model k "
          "initialised as a single model with --model-seed + k and trained with the k-th value "
          "of each list flag (--lr, --momentum, --weight-decay, --beta1, --beta2, --eps). "
          "0 = one ordinary model; 1 runs the fused code with one model. Default 0.");
ABSL_FLAG(std::string, optimizer, "sgd",
          "sgd (momentum, weight decay) or adam (--beta1, --beta2, --eps, --weight-decay). "
          "Default sgd.");
ABSL_FLAG(std::string, lr_schedule, "constant",
          "Learning-rate schedule of every model: constant, or cosine (each model's --lr "
          "annealed to zero over --epochs, stepped per epoch: lr * (1 + cos(pi * e / epochs)) / "
          "2 in epoch e). Default constant.");
ABSL_FLAG(sophon::CommaList, lr, sophon::CommaList({"0.1"}),
          "Learning rate: one value, or one per model of --fused-models (comma-separated). "
          "Default 0.1.");
ABSL_FLAG(sophon::CommaList, momentum, sophon::CommaList({"0.9"}),
          "SGD momentum: one value or one per model. Default 0.9.");
ABSL_FLAG(sophon::CommaList, weight_decay, sophon::CommaList({"1e-4"}),
          "Weight decay (L2 added to the gradient, SGD and Adam): one value or one per model. "
          "Default 1e-4.");
ABSL_FLAG(sophon::CommaList, beta1, sophon::CommaList({"0.9"}),
          "Adam's beta1: one value or one per model. Default 0.9.");
ABSL_FLAG(sophon::CommaList, beta2, sophon::CommaList({"0.999"}),
          "Adam's beta2: one value or one per model. Default 0.999.");
ABSL_FLAG(sophon::CommaList, eps, sophon::CommaList({"1e-8"}),
          "Adam's eps: one value or one per model. Default 1e-8.");
ABSL_FLAG(std::string, save, "",
          "After training, write the model to this file as a checkpoint that --init-checkpoint "
          "loads; with --fused-models each model k goes to its own file, k before the "
          "extension (ckpt.pt -> ckpt.0.pt, ckpt.1.pt, ...). Default none.");
ABSL_FLAG(std::string, init_checkpoint, "",
          "Start from this checkpoint (written by --save; same --arch and classes) instead of a "
          "fresh initialisation; with --fused-models every model starts from it. Default none.");
ABSL_FLAG(int, shuffle_window, 0,
          "0: a full shuffle of every epoch. K >= 1: the group-aware order for packs: the "
          "servers' groups shuffled, samples drawn at random from K open groups at a time, so a "
          "pack's server reads each group once (see docs/packs.md). Default 0.");
ABSL_FLAG(uint64_t, seed, 0, "Seed of the shuffle, every augmentation and the model init. Default 0.");
ABSL_FLAG(int64_t, model_seed, -1,
          "Seed of the model initialisation (fused model k: this + k); -1 = --seed. Default -1.");
ABSL_FLAG(std::string, device, "cpu",
          "cpu, cuda, cuda:N, or emulate (no model runs: each step sleeps the profiled copy and "
          "compute time of --arch on --gpu-type, from --gpu-profile). Default cpu.");
ABSL_FLAG(std::string, amp, "off",
          "Mixed precision: off; bf16 (the forward pass under autocast to bfloat16, on cpu or "
          "cuda; the loss and the weights stay float32); or fp16 (autocast to float16, cuda "
          "only, with dynamic loss scaling: a step whose gradients overflow is skipped and the "
          "scale halves; each fp16 step reads one flag back from the device). Default off.");
ABSL_FLAG(bool, channels_last, false,
          "Convolution weights and image batches in channels-last (NHWC) memory order, which "
          "cuDNN's and oneDNN's fastest convolutions take. Not with --finetune. Default false.");
ABSL_FLAG(int, staging_buffers, 2,
          "On a cuda device: pinned host buffers that batches are staged in, copied to the device "
          "on a side stream that the step waits for on the device, not on the host; a buffer is "
          "reused only once its copy has completed. 0: copy from pageable memory on the compute "
          "stream. Ignored on cpu. Default 2.");
ABSL_FLAG(int, steps_in_flight, 2,
          "On a cuda device: training steps left queued on the device while the host fetches and "
          "queues the next batch (its copy then overlaps the step before it); the host waits for "
          "the oldest step only beyond this many, and reads each step's losses once it has "
          "completed. 0: the host waits for every step. Ignored on cpu. Default 2.");
ABSL_FLAG(std::string, transfer, "auto",
          "What the training device receives: float32 (tensors normalised by this node's CPUs) "
          "or uint8 (the crops, a quarter of the bytes, flipped and normalised on the device); "
          "auto: "
          "uint8 on cuda, float32 otherwise. Not with --finetune (features) or "
          "--device=emulate. Default auto.");
ABSL_FLAG(std::string, gpu_type, "v100",
          "With --device=emulate: the GPU type to emulate, as named in the GPU profile "
          "(case-insensitive). Default v100.");
ABSL_FLAG(int, gpu_count, 1,
          "With --device=emulate: emulated data-parallel GPUs; per-step times are divided by it. "
          "Default 1.");
ABSL_FLAG(sophon::CommaList, gpu_profile, sophon::CommaList({"profiles/gpu/starter.csv"}),
          "With --device=emulate: GPU profile file(s), comma-separated, later files overriding "
          "earlier rows; Sophon CSV or the original emulator's 12-column TSV. Default "
          "profiles/gpu/starter.csv.");
ABSL_FLAG(std::string, batch_timings, "",
          "Write per-batch timings (epoch,batch,samples,data_wait_s,copy_s,compute_s) as CSV to "
          "this file. Default none.");
ABSL_FLAG(std::string, batch_digests, "",
          "Write per-batch digests (epoch,batch,samples,ids,images_sha256) as CSV to this file: "
          "two runs, or this program and the Python loader, gave identical batches when their "
          "lines are equal. With several ranks, give each rank its own file. Default none.");
ABSL_FLAG(bool, synthetic_data, false,
          "Train on one in-memory synthetic batch, repeated, with no server: measures the "
          "maximum ingestion rate of the training step alone. Default false.");
ABSL_FLAG(int64_t, synthetic_samples, 0,
          "With --synthetic-data: samples per epoch; 0 = 20 batches. Default 0.");
ABSL_FLAG(int, synthetic_classes, 1000,
          "With --synthetic-data: classes of the model (its last layer). Default 1000.");
ABSL_FLAG(int, torch_threads, 0, "LibTorch intra-op threads on cpu; 0 = LibTorch's default.");
ABSL_FLAG(std::string, scale, "0.08,1.0", "RandomResizedCrop area range MIN,MAX. Default 0.08,1.0.");
ABSL_FLAG(std::string, ratio, "0.75,1.3333333333333333",
          "RandomResizedCrop aspect ratio range MIN,MAX. Default 3/4,4/3.");
ABSL_FLAG(std::string, augment, "random",
          "random (RandomResizedCrop per --scale and --ratio, and random flips, new every epoch) "
          "or none (torchvision's evaluation transform: resize the shorter side to "
          "--eval-resize, centre crop --crop-size, no flip; the same every epoch). Default "
          "random.");
ABSL_FLAG(int, eval_resize, 0,
          "--augment=none: the side the shorter side is resized to; 0 = round(crop size x "
          "256 / 224), 256 for 224. Default 0.");
ABSL_FLAG(std::string, on_bad_sample, "skip",
          "skip (warn, count and go on) or fail (end the run) on a corrupt sample. Default skip.");
ABSL_FLAG(std::string, report_json, "", "Write per-epoch figures as JSON to this file.");
ABSL_FLAG(std::string, share_batches_dir, "",
          "Share finished batches with the other jobs on this node that name the same folder "
          "and make the same batches (the trials of a search: one dataset, --seed, --batch-size, "
          "ranks, crop and augmentation; other models or learning rates): each batch is fetched "
          "and prepared by whichever job needs it first and read by the others. Best on tmpfs "
          "(/dev/shm/...): the last job to leave removes what it holds. A job that falls behind "
          "the window makes its batches itself; a job that leaves holds no one back. Default: "
          "none.");
ABSL_FLAG(int64_t, share_batches_window_bytes, int64_t{256} << 20,
          "--share-batches-dir: how far behind the newest batch batches are kept, in bytes "
          "(at least two batches). Default 256 MiB.");
ABSL_FLAG(std::string, planner, "optimal",
          "--mode=smartoff: optimal (minimises the predicted epoch time over network, storage "
          "CPU, local CPU and GPU) or sophon (the published SOPHON heuristic). Default optimal.");
ABSL_FLAG(std::string, profile_out, "",
          "Profile the dataset through the server before training and write the profile to this "
          "folder (any mode). With smartoff and no profile, the profile goes here instead of "
          "--profile-folder. Default none.");
ABSL_FLAG(std::string, ingress_bw, "auto",
          "smartoff with several servers: this node's ingress link in Mbit/s, shared by every "
          "server's samples; 0 = not a limit (only each server's own link is); auto = probe "
          "every server at once and treat the sum as a limit when it falls short of what "
          "each carried alone. Default auto.");
ABSL_FLAG(double, remote_cpus, 0,
          "smartoff: storage node prep CPUs; 0 = the server's --prep-workers, or its CPU limit "
          "(sophon-server --cpu-limit) when smaller. Default 0.");
ABSL_FLAG(double, gpu_batch_seconds, -1,
          "smartoff: training step seconds per batch, fixed; negative = measure it (before "
          "training with --measure-step, and from the first training steps). Default -1.");
ABSL_FLAG(bool, measure_step, true,
          "smartoff without --gpu-batch-seconds (and not --device=emulate, whose step time is "
          "the GPU profile's): before the first plan, time 2 warm-up and 3 training steps of the "
          "model on a synthetic batch of --batch-size x 3 x --crop-size^2 and plan with their "
          "median; the steps use an optimizer of their own and the weights, buffers and RNG are "
          "put back, so training is bit-identical to a run without it. Under ranks each rank "
          "times its own step, without the gradient all-reduce. false: the first plan assumes no "
          "step time until the first training steps are measured. Default true.");
ABSL_FLAG(std::string, stages, "all",
          "smartoff: the stages a plan may send samples at, comma-separated from raw, jpeg_crop, "
          "cropped, flipped, tensor (must include raw), or all. --stages=raw,cropped,flipped,"
          "tensor plans without the lossless JPEG crop, for comparisons. Default all.");
ABSL_FLAG(double, replan_threshold, 0.25,
          "smartoff: re-plan the samples not yet requested when a measured resource drifts by "
          "more than this fraction from the assumed one. Default 0.25.");
ABSL_FLAG(bool, progress, true, "Show a progress line while training. Default true.");

namespace sophon::train_cli {

// Which flag sets each option whose errors the library reports by name.
const sophon::FlagNames kFlagNames = {
    {"LoaderOptions.batch_size", "--batch-size"},
    {"BatchShareOptions.window_bytes", "--share-batches-window-bytes"},
    {"BatchShareOptions.dir", "--share-batches-dir"},
    {"LoaderOptions.feature_cache_bytes", "--feature-cache-bytes"},
    {"LoaderOptions.shuffle_window", "--shuffle-window"},
    {"TrainerOptions.finetune", "--finetune"},
    {"LoaderOptions.pipeline.augment", "--crop-size/--scale/--ratio"},
    {"SmartoffOptions.remote_cpus", "--remote-cpus"},
    {"SmartoffOptions.replan_threshold", "--replan-threshold"},
    {"SmartoffOptions.stages", "--stages"},
    {"StepMeasureOptions.batch_size", "--batch-size"},
    {"StepMeasureOptions.crop_size", "--crop-size"},
    {"Resources.remote_cpus", "--remote-cpus"},
    {"Resources.gpu_seconds_per_batch", "--gpu-batch-seconds"},
    {"Resources.batch_size", "--batch-size"},
    {"EmulatedTrainerOptions.gpu_count", "--gpu-count"},
    {"TrainerOptions.device", "--device"},
    {"TrainerOptions.amp", "--amp"},
    {"TrainerOptions.channels_last", "--channels-last"},
    {"TrainerOptions.staging_buffers", "--staging-buffers"},
    {"TrainerOptions.steps_in_flight", "--steps-in-flight"},
    {"].lr must", "--lr"},
    {"].momentum must", "--momentum"},
    {"].weight_decay must", "--weight-decay"},
    {"].beta1 must", "--beta1"},
    {"].beta2 must", "--beta2"},
    {"].eps must", "--eps"},
    {"TrainerOptions.models", "--fused-models"},
    {"TrainerOptions.num_classes", "--synthetic-classes"},
    {"TrainerOptions.threads", "--torch-threads"},
    {"EmulatedTrainerOptions.fused_models", "--fused-models"},
    {"SyntheticRunOptions.samples", "--synthetic-samples"},
    {"DistributedOptions.world_size", "--world-size"},
    {"DistributedOptions.rank", "--rank"},
    {"DistributedOptions.master_addr", "--master-addr"},
    {"DistributedOptions.master_port", "--master-port"},
    {"DistributedOptions.collective_timeout", "--collective-timeout"},
    {"DistributedOptions.backend", "--dist-backend"},
    {"LoaderOptions.rank", "--rank"},
    {"JobSpec.ingress_mbit", "--ingress-bw"},
    {"SmartoffOptions.local_world_size", "--local-world-size"},
};

int Fail(const absl::Status& status) {
  sophon::FlagNames names = kFlagNames;
  const sophon::FlagNames& shared = sophon::JobFlagNames();
  names.insert(names.end(), shared.begin(), shared.end());
  return sophon::FailProgram("sophon-train", status, names);
}

// The per-model hyperparameter lists (--lr, ...) into options->models.
absl::Status HyperparametersFromFlags(sophon::TrainerOptions* options) {
  const int fused = absl::GetFlag(FLAGS_fused_models);
  if (fused < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--fused-models must be >= 1 to train a fused array (0: one ordinary model), got ", fused));
  }
  options->fused = fused > 0;
  const int models = std::max(1, fused);
  struct List {
    const char* flag;
    sophon::CommaList value;
    double sophon::Hyperparameters::*field;
  };
  const List lists[] = {
      {"--lr", absl::GetFlag(FLAGS_lr), &sophon::Hyperparameters::lr},
      {"--momentum", absl::GetFlag(FLAGS_momentum), &sophon::Hyperparameters::momentum},
      {"--weight-decay", absl::GetFlag(FLAGS_weight_decay),
       &sophon::Hyperparameters::weight_decay},
      {"--beta1", absl::GetFlag(FLAGS_beta1), &sophon::Hyperparameters::beta1},
      {"--beta2", absl::GetFlag(FLAGS_beta2), &sophon::Hyperparameters::beta2},
      {"--eps", absl::GetFlag(FLAGS_eps), &sophon::Hyperparameters::eps},
  };
  options->models.assign(static_cast<size_t>(models), sophon::Hyperparameters{});
  for (const List& list : lists) {
    absl::StatusOr<std::vector<double>> values =
        list.value.PerModel(list.flag, fused, "--fused-models");
    if (!values.ok()) return values.status();
    for (int k = 0; k < models; ++k) options->models[k].*list.field = (*values)[k];
  }
  return absl::OkStatus();
}

// Rank, world size and master from the flags, else torchrun's environment.
absl::StatusOr<sophon::DistributedOptions> DistributedFromFlags() {
  sophon::LaunchFlags flags;
  flags.world_size = absl::GetFlag(FLAGS_world_size);
  flags.rank = absl::GetFlag(FLAGS_rank);
  flags.master_addr = absl::GetFlag(FLAGS_master_addr);
  flags.master_port = absl::GetFlag(FLAGS_master_port);
  sophon::DistributedOptions base;
  base.collective_timeout = absl::GetFlag(FLAGS_collective_timeout);
  base.backend = absl::GetFlag(FLAGS_dist_backend);
  return sophon::ResolveLaunch(flags, base, [](const char* name) { return std::getenv(name); });
}

// `backbone`: --finetune's frozen backbone (its architecture is --arch=auto's).
absl::StatusOr<sophon::TrainerOptions> TrainerOptionsFromFlags(int num_classes,
                                                               const sophon::Backbone* backbone) {
  sophon::TrainerOptions options;
  absl::StatusOr<sophon::DistributedOptions> distributed = DistributedFromFlags();
  if (!distributed.ok()) return distributed.status();
  options.distributed = *distributed;
  options.arch = absl::GetFlag(FLAGS_arch);
  if (options.arch == "auto") options.arch = backbone != nullptr ? backbone->arch() : "resnet18";
  options.finetune = absl::GetFlag(FLAGS_finetune);
  options.num_classes = num_classes;
  options.device = absl::GetFlag(FLAGS_device);
  options.amp = absl::GetFlag(FLAGS_amp);
  options.channels_last = absl::GetFlag(FLAGS_channels_last);
  options.staging_buffers = absl::GetFlag(FLAGS_staging_buffers);
  options.steps_in_flight = absl::GetFlag(FLAGS_steps_in_flight);
  const int64_t model_seed = absl::GetFlag(FLAGS_model_seed);
  if (model_seed < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--model-seed must be >= 0, or -1 for --seed, got ", model_seed));
  }
  options.seed = model_seed == -1 ? absl::GetFlag(FLAGS_seed) : static_cast<uint64_t>(model_seed);
  options.threads = absl::GetFlag(FLAGS_torch_threads);
  absl::StatusOr<sophon::OptimizerKind> optimizer =
      sophon::ParseOptimizerKind(absl::GetFlag(FLAGS_optimizer));
  if (!optimizer.ok()) return sophon::FlagError("--optimizer", optimizer.status());
  options.optimizer = *optimizer;
  absl::StatusOr<sophon::LrSchedule> schedule =
      sophon::ParseLrSchedule(absl::GetFlag(FLAGS_lr_schedule));
  if (!schedule.ok()) return sophon::FlagError("--lr-schedule", schedule.status());
  options.lr_schedule = *schedule;
  if (absl::Status s = HyperparametersFromFlags(&options); !s.ok()) return s;
  options.init_checkpoint = absl::GetFlag(FLAGS_init_checkpoint);
  if (options.device == "emulate" &&
      (!absl::GetFlag(FLAGS_save).empty() || !options.init_checkpoint.empty())) {
    return absl::InvalidArgumentError(
        "--save and --init-checkpoint need a model: --device=emulate emulates the GPU's time "
        "and trains none");
  }
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  return options;
}

// For the reports: each fused model's hyperparameters; empty for one model.
std::vector<std::string> ModelLabels(const sophon::TrainerOptions& options) {
  std::vector<std::string> labels;
  if (!options.fused) return labels;
  for (const sophon::Hyperparameters& h : options.models) {
    labels.push_back(sophon::DescribeHyperparameters(options.optimizer, h));
  }
  return labels;
}

// --save's folder must exist and be writable before training starts, not
// only at its end.
absl::Status CheckSavePath() {
  const std::string path = absl::GetFlag(FLAGS_save);
  if (path.empty()) return absl::OkStatus();
  const size_t slash = path.rfind('/');
  if (slash == path.size() - 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("--save: '", path, "' names a folder; give a file name in it"));
  }
  const std::string folder = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  if (access(folder.c_str(), W_OK | X_OK) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--save: the folder '", folder, "' of '", path, "' does not exist or is not writable"));
  }
  return absl::OkStatus();
}

// --save: each model to its checkpoint file.
absl::Status SaveModels(sophon::Trainer* trainer, const sophon::TrainerOptions& options) {
  const std::string path = absl::GetFlag(FLAGS_save);
  if (path.empty()) return absl::OkStatus();
  absl::StatusOr<std::vector<std::string>> files = trainer->Save(path);
  if (!files.ok()) return sophon::FlagError("--save", files.status());
  for (size_t k = 0; k < files->size(); ++k) {
    if (options.fused) {
      spdlog::info("saved model {} ({}) to {}", k,
                   sophon::DescribeHyperparameters(options.optimizer, options.models[k]),
                   (*files)[k]);
    } else {
      spdlog::info("saved the model to {}", (*files)[k]);
    }
  }
  return absl::OkStatus();
}

// --device=emulate: an EmulatedTrainer over the GPU profile; otherwise LibTorch.
absl::StatusOr<std::unique_ptr<sophon::Trainer>> CreateTrainer(
    const sophon::TrainerOptions& options, int batch_size) {
  if (options.device != "emulate") return sophon::Trainer::Create(options);
  absl::StatusOr<sophon::GpuProfile> profile =
      sophon::GpuProfile::LoadAll(absl::GetFlag(FLAGS_gpu_profile).items);
  if (!profile.ok()) return profile.status();
  sophon::EmulatedTrainerOptions emulated;
  emulated.arch = options.arch;
  emulated.gpu_type = absl::GetFlag(FLAGS_gpu_type);
  emulated.gpu_count = absl::GetFlag(FLAGS_gpu_count);
  emulated.fused_models = options.fused ? options.num_models() : 0;
  absl::StatusOr<std::unique_ptr<sophon::EmulatedTrainer>> trainer =
      sophon::EmulatedTrainer::Create(*profile, emulated, batch_size);
  if (!trainer.ok()) return trainer.status();
  return std::unique_ptr<sophon::Trainer>(*std::move(trainer));
}

// --transfer: the stage the training device receives, TENSOR (float32) or
// CROPPED (uint8, flipped and normalised on the device).
absl::StatusOr<sophon::Stage> TransferStage() {
  const std::string device = absl::GetFlag(FLAGS_device);
  const absl::StatusOr<sophon::Stage> stage =
      sophon::TransferStage(absl::GetFlag(FLAGS_transfer), device);
  if (!stage.ok()) return absl::InvalidArgumentError(absl::StrCat("--", stage.status().message()));
  if (*stage == sophon::Stage::kTensor) return *stage;
  if (absl::GetFlag(FLAGS_finetune) || device == "emulate") {
    return absl::InvalidArgumentError(
        "--transfer=uint8 needs a model that trains on images (not --finetune) on a real "
        "device (not --device=emulate)");
  }
  spdlog::info("transfer: uint8 crops, flipped and normalised on {}", device);
  return sophon::Stage::kCropped;
}

// --synthetic-data: the training step alone, no server.
int RunSynthetic(const sophon::LoaderOptions& loader_options, int epochs) {
  const absl::StatusOr<sophon::TrainerOptions> options =
      TrainerOptionsFromFlags(absl::GetFlag(FLAGS_synthetic_classes));
  if (!options.ok()) return Fail(options.status());
  const sophon::TrainerOptions& trainer_options = *options;
  absl::StatusOr<std::unique_ptr<sophon::Trainer>> trainer =
      CreateTrainer(trainer_options, loader_options.batch_size);
  if (!trainer.ok()) return Fail(trainer.status());
  sophon::SyntheticRunOptions synthetic;
  synthetic.batch_size = loader_options.batch_size;
  synthetic.crop_size = loader_options.pipeline.augment.crop_size;
  synthetic.num_classes = trainer_options.num_classes;
  synthetic.samples = absl::GetFlag(FLAGS_synthetic_samples);
  if (synthetic.samples == 0) synthetic.samples = 20 * static_cast<int64_t>(synthetic.batch_size);
  synthetic.seed = absl::GetFlag(FLAGS_seed);  // the data's seed, not --model-seed
  const absl::StatusOr<sophon::Stage> stage = TransferStage();
  if (!stage.ok()) return Fail(stage.status());
  synthetic.stage = *stage;
  sophon::TrainLoopOptions loop;
  loop.epochs = epochs;
  loop.max_batches = absl::GetFlag(FLAGS_max_batches);
  loop.mode_name = "synthetic";
  loop.arch = trainer_options.arch;
  loop.progress = false;
  loop.report_json = absl::GetFlag(FLAGS_report_json);
  loop.device = (*trainer)->DeviceName();
  loop.emulated = trainer_options.device == "emulate";
  loop.batch_timings = absl::GetFlag(FLAGS_batch_timings);
  loop.model_labels = ModelLabels(trainer_options);
  loop.optimizer = sophon::OptimizerName(trainer_options.optimizer);
  spdlog::info("training {} on {} with synthetic in-memory batches of {}, {} samples per epoch",
               loop.arch, loop.device, synthetic.batch_size, synthetic.samples);
  absl::StatusOr<std::vector<sophon::EpochReport>> reports =
      sophon::RunSyntheticTraining(trainer->get(), synthetic, loop);
  if (!reports.ok()) return Fail(reports.status());
  if (absl::Status s = SaveModels(trainer->get(), trainer_options); !s.ok()) return Fail(s);
  return 0;
}

absl::Status SmartoffOptionsFromFlags(sophon::PlannerKind kind, sophon::SmartoffOptions* options) {
  options->planner = kind;
  if (absl::Status s = sophon::SmartoffFlagsInto(options); !s.ok()) return s;
  options->profile_out = absl::GetFlag(FLAGS_profile_out);
  options->remote_cpus = absl::GetFlag(FLAGS_remote_cpus);
  options->gpu_batch_seconds = absl::GetFlag(FLAGS_gpu_batch_seconds);
  options->replan_threshold = absl::GetFlag(FLAGS_replan_threshold);
  absl::StatusOr<sophon::StageSet> stages = sophon::ParseStageSet(absl::GetFlag(FLAGS_stages));
  if (!stages.ok()) return sophon::FlagError("--stages", stages.status());
  options->stages = *stages;
  return options->Validate();
}



bool SyntheticData() { return absl::GetFlag(FLAGS_synthetic_data); }

absl::StatusOr<sophon::JobSpec> JobSpecFromFlags(int* epochs) {
  sophon::JobSpec spec;
  absl::StatusOr<sophon::PlannerKind> smart =
      sophon::ParsePlannerKind(absl::GetFlag(FLAGS_planner));
  if (!smart.ok()) return sophon::FlagError("--planner", smart.status());
  absl::StatusOr<sophon::PlannerKind> mode = sophon::ParseMode(absl::GetFlag(FLAGS_mode), *smart);
  if (!mode.ok()) return sophon::FlagError("--mode", mode.status());
  spec.mode = *mode;
  absl::StatusOr<sophon::BadSamplePolicy> bad_sample =
      sophon::ParseBadSamplePolicy(absl::GetFlag(FLAGS_on_bad_sample));
  if (!bad_sample.ok()) return sophon::FlagError("--on-bad-sample", bad_sample.status());

  sophon::LoaderOptions& loader = spec.loader;
  sophon::LoaderFlagsInto(&loader);
  loader.batch_size = absl::GetFlag(FLAGS_batch_size);
  loader.seed = absl::GetFlag(FLAGS_seed);
  loader.shuffle_window = absl::GetFlag(FLAGS_shuffle_window);
  loader.on_bad_sample = *bad_sample;
  sophon::AugmentOptions& augment = loader.pipeline.augment;
  if (absl::Status s = sophon::ParseRange("scale", absl::GetFlag(FLAGS_scale), &augment.scale_min,
                                          &augment.scale_max);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = sophon::ParseRange("ratio", absl::GetFlag(FLAGS_ratio), &augment.ratio_min,
                                          &augment.ratio_max);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = sophon::SetAugmentMode(absl::GetFlag(FLAGS_augment),
                                              absl::GetFlag(FLAGS_eval_resize), &augment);
      !s.ok()) {
    return sophon::FlagError("--augment", s);
  }
  if (absl::Status s = loader.Validate(); !s.ok()) return s;
  *epochs = absl::GetFlag(FLAGS_epochs);
  if (*epochs < 1) return absl::InvalidArgumentError("--epochs must be at least 1");
  if (absl::GetFlag(FLAGS_max_batches) < 0 || absl::GetFlag(FLAGS_warmup_batches) < 0) {
    return absl::InvalidArgumentError("--max-batches and --warmup-batches must be >= 0");
  }
  // The model's flags are checked before connecting (the class count comes
  // from the server's manifest).
  if (absl::StatusOr<sophon::TrainerOptions> o = TrainerOptionsFromFlags(1); !o.ok()) {
    return o.status();
  }
  if (absl::Status s = CheckSavePath(); !s.ok()) return s;
  if (absl::GetFlag(FLAGS_feature_cache_bytes) != 0 && !absl::GetFlag(FLAGS_finetune)) {
    return absl::InvalidArgumentError(
        "--feature-cache-bytes keeps features, which only --finetune takes");
  }
  if (spec.mode == sophon::PlannerKind::kPredictionsOff) {
    return absl::InvalidArgumentError(
        "--mode=predictionsoff sends predictions, which only inference takes: use sophon-infer");
  }
  if (absl::GetFlag(FLAGS_finetune)) {
    if (absl::GetFlag(FLAGS_init_checkpoint).empty()) {
      return absl::InvalidArgumentError(
          "--finetune needs --init-checkpoint: the network whose head is trained");
    }
    if (absl::GetFlag(FLAGS_synthetic_data) || absl::GetFlag(FLAGS_device) == "emulate") {
      return absl::InvalidArgumentError(
          "--finetune trains a real head on real features: it needs a server, and a device "
          "other than emulate");
    }
  } else if (spec.mode == sophon::PlannerKind::kFeaturesOff) {
    return absl::InvalidArgumentError(
        "--mode=featuresoff sends features, which only a head being fine-tuned takes: give "
        "--finetune --init-checkpoint=CHECKPOINT");
  }
  if (absl::GetFlag(FLAGS_synthetic_data)) {
    if (!absl::GetFlag(FLAGS_checkpoint_dir).empty() || absl::GetFlag(FLAGS_resume)) {
      return absl::InvalidArgumentError(
          "--checkpoint-dir and --resume need a dataset: --synthetic-data trains on one "
          "repeated batch with no data cursor (--save writes its model)");
    }
    return spec;
  }

  absl::StatusOr<sophon::DistributedOptions> distributed = DistributedFromFlags();
  if (!distributed.ok()) return distributed.status();
  loader.rank = distributed->rank;
  loader.world = distributed->world_size;
  const std::string checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  if (absl::GetFlag(FLAGS_checkpoint_every) < 0 || absl::GetFlag(FLAGS_max_steps) < 0) {
    return absl::InvalidArgumentError("--checkpoint-every and --max-steps must be >= 0");
  }
  if (absl::GetFlag(FLAGS_resume) && checkpoint_dir.empty()) {
    return absl::InvalidArgumentError("--resume needs --checkpoint-dir");
  }
  if (!checkpoint_dir.empty() && absl::GetFlag(FLAGS_device) == "emulate") {
    return absl::InvalidArgumentError(
        "--checkpoint-dir needs a model: --device=emulate emulates the GPU's time and trains "
        "none");
  }
  if (!checkpoint_dir.empty() && access(checkpoint_dir.c_str(), W_OK | X_OK) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--checkpoint-dir: the folder '", checkpoint_dir, "' does not exist or is not writable"));
  }
  // This node's sample cache, checked before any server is reached.
  absl::StatusOr<sophon::LocalCacheOptions> cache = sophon::LocalCacheFromFlags();
  if (!cache.ok()) return cache.status();
  spec.cache = *cache;
  spec.share.dir = absl::GetFlag(FLAGS_share_batches_dir);
  spec.share.window_bytes = absl::GetFlag(FLAGS_share_batches_window_bytes);

  if (absl::Status s = SmartoffOptionsFromFlags(spec.mode, &spec.smartoff); !s.ok()) return s;
  spec.smartoff.last_epoch = *epochs - 1;
  absl::StatusOr<int> local_world = sophon::ResolveLocalWorldSize(
      absl::GetFlag(FLAGS_local_world_size), *distributed, [](const char* name) { return std::getenv(name); });
  if (!local_world.ok()) return local_world.status();
  spec.smartoff.local_world_size = *local_world;
  if (const std::string ingress = absl::GetFlag(FLAGS_ingress_bw); ingress != "auto") {
    if (!absl::SimpleAtod(ingress, &spec.ingress_mbit) || spec.ingress_mbit < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--ingress-bw must be a number of Mbit/s >= 0 or auto, got '", ingress, "'"));
    }
  }
  absl::StatusOr<sophon::ServersSpec> servers = sophon::ServersSpecFromFlags("127.0.0.1:50051");
  if (!servers.ok()) return servers.status();
  spec.servers = *std::move(servers);
  if (absl::Status s = spec.Validate(); !s.ok()) return s;
  return spec;
}

void LogRanks(const sophon::Job& job) {
  const sophon::LoaderOptions& loader = job.spec().loader;
  if (loader.world <= 1) return;
  const uint64_t samples = job.servers()->manifest().num_samples();
  spdlog::info("rank {} of {}: batches of {} per rank, global batch {}; every epoch's order "
               "padded by {} repeated samples so that every rank gets as many",
               loader.rank, loader.world, loader.batch_size,
               static_cast<int64_t>(loader.batch_size) * loader.world,
               sophon::PaddedEpochLength(samples, loader.world) - static_cast<int64_t>(samples));
}

absl::StatusOr<std::unique_ptr<sophon::Backbone>> SetTarget(sophon::Job* job) {
  sophon::LoaderOptions& loader = job->spec().loader;
  std::unique_ptr<sophon::Backbone> backbone;
  if (absl::GetFlag(FLAGS_finetune)) {
    sophon::BackboneOptions backbone_options;
    backbone_options.checkpoint = absl::GetFlag(FLAGS_init_checkpoint);
    absl::StatusOr<std::unique_ptr<sophon::Backbone>> loaded =
        sophon::Backbone::Load(backbone_options);
    if (!loaded.ok()) return sophon::FlagError("--init-checkpoint", loaded.status());
    backbone = *std::move(loaded);
    loader.target = sophon::Stage::kFeatures;
    loader.pipeline.backbone = backbone.get();
    loader.feature_cache_bytes = absl::GetFlag(FLAGS_feature_cache_bytes);
    spdlog::info("fine-tuning the head of {}: {} features per sample", backbone->description(),
                 backbone->feature_size());
    const sophon::ServerSet& servers = *job->servers();
    for (int i = 0; i < servers.size(); ++i) {
      const sophon::ServerManifest& m = servers.client(i)->manifest();
      spdlog::info("storage server {}: {}", servers.address(i),
                   m.feature_size > 0 ? absl::StrCat("extracts features with ", m.backbone)
                                      : std::string("no backbone: samples come at most at the "
                                                    "tensor stage, features are extracted here"));
    }
  }
  const absl::StatusOr<sophon::Stage> target = TransferStage();
  if (!target.ok()) return target.status();
  if (*target == sophon::Stage::kCropped) loader.target = *target;
  return backbone;
}

absl::StatusOr<sophon::TrainLoopOptions> LoopOptionsFromFlags(
    const sophon::Job& job, int epochs, const sophon::TrainerOptions& trainer_options,
    sophon::Trainer* trainer) {
  const sophon::LoaderOptions& loader = job.spec().loader;
  sophon::TrainLoopOptions loop;
  loop.global_batch = static_cast<int64_t>(loader.batch_size) * loader.world;
  loop.dataset_fingerprint = job.servers()->manifest().fingerprint();
  loop.seed = loader.seed;
  loop.shuffle_window = loader.shuffle_window;
  const std::string checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  if (!checkpoint_dir.empty()) loop.checkpoint_path = checkpoint_dir + "/checkpoint.pt";
  loop.checkpoint_every = absl::GetFlag(FLAGS_checkpoint_every);
  loop.max_steps = absl::GetFlag(FLAGS_max_steps);
  if (absl::GetFlag(FLAGS_resume)) {
    absl::StatusOr<sophon::TrainingCursor> cursor = trainer->LoadCheckpoint(loop.checkpoint_path);
    if (!cursor.ok()) return sophon::FlagError("--resume", cursor.status());
    if (absl::Status s = sophon::CheckResumable(*cursor, loop, loop.checkpoint_path); !s.ok()) {
      return s;
    }
    loop.start = *cursor;
    loop.resumed = true;
    spdlog::info("resuming from {}: step {}, epoch {} at sample {} of its order (written by {} "
                 "rank{})",
                 loop.checkpoint_path, cursor->steps, cursor->epoch, cursor->position,
                 cursor->world_size, cursor->world_size == 1 ? "" : "s");
  }
  loop.epochs = epochs;
  loop.max_batches = absl::GetFlag(FLAGS_max_batches);
  loop.warmup_batches = absl::GetFlag(FLAGS_warmup_batches);
  loop.arch = trainer_options.arch;
  loop.progress = absl::GetFlag(FLAGS_progress) && loader.rank == 0;
  loop.report_json = absl::GetFlag(FLAGS_report_json);
  loop.device = trainer->DeviceName();
  loop.emulated = trainer_options.device == "emulate";
  loop.batch_timings = absl::GetFlag(FLAGS_batch_timings);
  loop.batch_digests = absl::GetFlag(FLAGS_batch_digests);
  loop.model_labels = ModelLabels(trainer_options);
  loop.optimizer = sophon::OptimizerName(trainer_options.optimizer);
  return loop;
}

absl::Status PrepareToPlan(sophon::Job* job, sophon::Trainer* trainer,
                           const sophon::TrainerOptions& trainer_options,
                           const sophon::Backbone* backbone) {
  sophon::JobSpec& spec = job->spec();
  const std::string profile_out = absl::GetFlag(FLAGS_profile_out);
  if (!spec.smart()) {
    if (profile_out.empty()) return absl::OkStatus();
    if (job->servers()->size() > 1) {
      return absl::UnimplementedError(absl::StrCat(
          "--profile-out with a fixed mode profiles one storage server; with ",
          job->servers()->size(),
          " servers give --mode=smartoff --profile-out=DIR (it profiles every shard)"));
    }
    return sophon::WriteProfileOverNetwork(job->servers()->client(0), spec.loader,
                                           spec.smartoff.speed_probe_samples, profile_out);
  }
  sophon::SmartoffOptions& smartoff = spec.smartoff;
  if (smartoff.gpu_batch_seconds >= 0) return absl::OkStatus();
  // An emulated GPU's step time is known from its profile: no need to measure it.
  if (auto* emulated = dynamic_cast<sophon::EmulatedTrainer*>(trainer); emulated != nullptr) {
    absl::StatusOr<sophon::GpuStepTime> step = emulated->StepTimeFor(spec.loader.batch_size);
    if (!step.ok()) return step.status();
    smartoff.gpu_batch_seconds = step->copy_seconds + step->compute_seconds;
    spdlog::info("smartoff: training step {:.3f}s/batch from the GPU profile (not measured)",
                 smartoff.gpu_batch_seconds);
    return absl::OkStatus();
  }
  if (!absl::GetFlag(FLAGS_measure_step)) return absl::OkStatus();
  sophon::StepMeasureOptions measure;
  measure.batch_size = spec.loader.batch_size;
  measure.crop_size = spec.loader.pipeline.augment.crop_size;
  measure.num_classes = trainer_options.num_classes;
  measure.feature_size = backbone != nullptr ? backbone->feature_size() : 0;
  measure.stage = spec.loader.target == sophon::Stage::kCropped ? sophon::Stage::kCropped
                                                                : sophon::Stage::kTensor;
  measure.seed = spec.loader.seed;
  absl::StatusOr<sophon::StepMeasurement> step =
      sophon::MeasureTrainingStep(trainer, measure, spec.loader.world);
  if (!step.ok()) {
    return absl::Status(step.status().code(),
                        absl::StrCat(step.status().message(),
                                     " (--measure-step=false plans epoch 0 without it)"));
  }
  smartoff.measured_gpu_batch_seconds = step->seconds;
  return absl::OkStatus();
}

}  // namespace sophon::train_cli
