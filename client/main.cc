// sophon-train: trains a LibTorch model on samples served by a storage node,
// with each sample's preprocessing split between the two nodes by --mode.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "sophon/cli/cli.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "sophon/model/backbone.h"
#include "client/train/emulated_trainer.h"
#include "client/loader/loader.h"
#include "client/loader/sample_client.h"
#include "client/loader/sampler.h"
#include "client/loader/server_list.h"
#include "client/loader/server_set.h"
#include "client/train/launch_env.h"
#include "client/train/step_measure.h"
#include "client/offload/cluster_policy.h"
#include "client/offload/fixed_policy.h"
#include "client/offload/profile_pass.h"
#include "client/offload/smartoff_policy.h"
#include "sophon/planning/planner.h"
#include "sophon/base/allocator.h"
#include "sophon/emulation/gpu_profile.h"
#include "spdlog/spdlog.h"
#include "client/train/synthetic_run.h"
#include "client/train/train_loop.h"
#include "client/train/trainer.h"

ABSL_FLAG(std::string, server, "127.0.0.1:50051",
          "Storage server(s) HOST:PORT, comma-separated. Servers with the same dataset "
          "fingerprint are replicas (any of them serves any of its samples); servers with "
          "different ones hold shards, whose union is the dataset (the layout is printed at "
          "start). Default 127.0.0.1:50051.");
ABSL_FLAG(std::string, servers_file, "",
          "File listing the storage servers, one HOST:PORT a line ('#' comments); replaces "
          "--server. Default none.");
ABSL_FLAG(int, world_size, -1,
          "Data-parallel ranks (processes) of the job; -1 = $WORLD_SIZE (torchrun), else 1. "
          "Each rank takes a disjoint share of every epoch; gradients are all-reduced over "
          "c10d (--dist-backend) every step. Default -1.");
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
ABSL_FLAG(int64_t, local_cache_bytes, 0,
          "Keep up to this many bytes of whole sample files on this node (each file's size plus "
          "256 bytes of bookkeeping), filled from samples that arrive whole; a held sample is "
          "not fetched again but prepared by this node's --workers. 0 = off. Default 0.");
ABSL_FLAG(std::string, local_cache_policy, "noevict",
          "What --local-cache-bytes keeps: noevict (the first files that fit, never evicted: "
          "under a random order every later epoch hits capacity/dataset of its samples) or lru "
          "(evicts the least recently used). Default noevict.");
ABSL_FLAG(std::string, local_cache_dir, "",
          "A folder on this node's local disk that keeps whole sample files across runs (a "
          "folder per dataset fingerprint: another dataset never reads them), shared by every "
          "process of the node that names it (ranks, Python loaders): a restarted or later job "
          "starts warm. Needs --local-cache-dir-bytes. Default: none.");
ABSL_FLAG(int64_t, local_cache_dir_bytes, 0,
          "What --local-cache-dir may hold for this dataset, in bytes (each file plus a 40-byte "
          "header); once full nothing more is written. Default 0.");
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
ABSL_FLAG(int, workers, 2, "Local prep threads that finish each sample's ops. Default 2.");
ABSL_FLAG(int, prefetch_batches, 3,
          "Batches requested ahead of the trainer, P. Bounds the loader's memory: up to 2P+1 "
          "image buffers of batch*12*S^2 bytes (P requested, 1 being set up, up to P kept for "
          "reuse; P+2 in training, which hands each batch back), plus the received payloads of "
          "the P requested batches waiting for --workers (per sample 12*S^2 bytes with alloff, "
          "3*S^2 with resizeoff, the file's size with nooff). Default 3.");
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
ABSL_FLAG(int, crop_size, 224, "RandomResizedCrop output side S. Default 224.");
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
ABSL_FLAG(std::string, planner, "optimal",
          "--mode=smartoff: optimal (minimises the predicted epoch time over network, storage "
          "CPU, local CPU and GPU) or sophon (the published SOPHON heuristic). Default optimal.");
ABSL_FLAG(std::string, profile_folder, "",
          "Where smartoff looks for this dataset's profile (sample_profile.csv). Default "
          "profiles/<dataset>/.");
ABSL_FLAG(std::string, profile_out, "",
          "Profile the dataset through the server before training and write the profile to this "
          "folder (any mode). With smartoff and no profile, the profile goes here instead of "
          "--profile-folder. Default none.");
ABSL_FLAG(std::string, net_bw, "auto",
          "smartoff: network bandwidth in Mbit/s, or auto to measure it by fetching raw samples. "
          "Default auto.");
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
ABSL_FLAG(absl::Duration, connect_timeout, absl::Seconds(30),
          "How long to keep retrying the storage server, with exponential backoff and jitter: "
          "while it is unreachable at start, after it went away mid-epoch, and while it "
          "refuses the fetch stream because it is full (its --max-streams or "
          "--max-streams-per-peer). Default 30s.");
ABSL_FLAG(std::string, credentials, "auto",
          "Transport security: insecure (plaintext), tls, or auto (tls when any --tls-* flag is "
          "given, else insecure). --credentials=tls alone checks the server against the "
          "system's CA roots. Default auto.");
ABSL_FLAG(std::string, tls_ca, "",
          "PEM CA certificate(s) the server's certificate must be signed by; implies TLS. "
          "Default none (the system's roots when TLS is on).");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM client certificate for a server that requires one (mutual TLS); with --tls-key. "
          "Default none.");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls-cert (unencrypted). Default none.");
ABSL_FLAG(std::string, tls_server_name, "",
          "Name to check in the server's certificate instead of the host of --server (e.g. when "
          "connecting by IP address to a certificate that names a host). Default: the host.");
ABSL_FLAG(std::string, auth_token_file, "",
          "File holding the bearer token the server requires (its --auth-token-file); sent on "
          "every call, over TLS only. Default none.");
ABSL_FLAG(bool, lenient_jpeg, false,
          "Accept JPEGs that libjpeg decodes with corrupt-data warnings when this node decodes "
          "(samples fetched at the raw stage); by default such a sample fails, as on a server "
          "without --lenient-jpeg. Must match the server's --lenient-jpeg (it says which in "
          "its manifest), or the run refuses to start. Default false.");
ABSL_FLAG(bool, progress, true, "Show a progress line while training. Default true.");
ABSL_FLAG(std::string, log_level, "info", "trace, debug, info, warn, error. Default info.");

namespace {

// Which flag sets each option whose errors the library reports by name.
const sophon::FlagNames kFlagNames = {
    {"LoaderOptions.batch_size", "--batch-size"},
    {"LoaderOptions.workers", "--workers"},
    {"LoaderOptions.prefetch_batches", "--prefetch-batches"},
    {"LoaderOptions.feature_cache_bytes", "--feature-cache-bytes"},
    {"LocalCacheOptions.memory_bytes", "--local-cache-bytes"},
    {"LocalCacheOptions.dir_bytes", "--local-cache-dir-bytes"},
    {"LocalCacheOptions.dir", "--local-cache-dir"},
    {"LoaderOptions.shuffle_window", "--shuffle-window"},
    {"TrainerOptions.finetune", "--finetune"},
    {"LoaderOptions.pipeline.augment", "--crop-size/--scale/--ratio"},
    {"SmartoffOptions.net_bw_mbit", "--net-bw"},
    {"SmartoffOptions.remote_cpus", "--remote-cpus"},
    {"SmartoffOptions.replan_threshold", "--replan-threshold"},
    {"SmartoffOptions.stages", "--stages"},
    {"StepMeasureOptions.batch_size", "--batch-size"},
    {"StepMeasureOptions.crop_size", "--crop-size"},
    {"Resources.net_bytes_per_s", "--net-bw"},
    {"Resources.remote_cpus", "--remote-cpus"},
    {"Resources.local_cpus", "--workers"},
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
    {"ClientOptions.address", "--server"},
    {"ClientOptions.connect_timeout", "--connect-timeout"},
    {"LoaderOptions.pipeline.limits.lenient", "--lenient-jpeg"},
    {"CredentialsOptions.kind", "--credentials"},
    {"CredentialsOptions.tls_ca", "--tls-ca"},
    {"CredentialsOptions.tls_cert", "--tls-cert"},
    {"CredentialsOptions.tls_key", "--tls-key"},
    {"CredentialsOptions.tls_server_name", "--tls-server-name"},
    {"CredentialsOptions.auth_token_file", "--auth-token-file"},
    {"SmartoffOptions.profile_folder", "--profile-folder"},
    {"SyntheticRunOptions.samples", "--synthetic-samples"},
    {"DistributedOptions.world_size", "--world-size"},
    {"DistributedOptions.rank", "--rank"},
    {"DistributedOptions.master_addr", "--master-addr"},
    {"DistributedOptions.master_port", "--master-port"},
    {"DistributedOptions.collective_timeout", "--collective-timeout"},
    {"DistributedOptions.backend", "--dist-backend"},
    {"LoaderOptions.rank", "--rank"},
};

int Fail(const absl::Status& status) {
  return sophon::FailProgram("sophon-train", status, kFlagNames);
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
absl::StatusOr<sophon::TrainerOptions> TrainerOptionsFromFlags(
    int num_classes, const sophon::Backbone* backbone = nullptr) {
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
  options->profile_folder = absl::GetFlag(FLAGS_profile_folder);
  options->profile_out = absl::GetFlag(FLAGS_profile_out);
  const std::string net_bw = absl::GetFlag(FLAGS_net_bw);
  if (net_bw != "auto" &&
      (!absl::SimpleAtod(net_bw, &options->net_bw_mbit) || options->net_bw_mbit <= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--net-bw must be a positive number of Mbit/s or auto, got '", net_bw, "'"));
  }
  options->remote_cpus = absl::GetFlag(FLAGS_remote_cpus);
  options->gpu_batch_seconds = absl::GetFlag(FLAGS_gpu_batch_seconds);
  options->replan_threshold = absl::GetFlag(FLAGS_replan_threshold);
  absl::StatusOr<sophon::StageSet> stages = sophon::ParseStageSet(absl::GetFlag(FLAGS_stages));
  if (!stages.ok()) return sophon::FlagError("--stages", stages.status());
  options->stages = *stages;
  return options->Validate();
}

}  // namespace

int main(int argc, char** argv) {
  // LibTorch's OpenMP threads share the cores with the loader's prep threads;
  // spinning while they wait starves the loader (set before LibTorch starts).
  setenv("OMP_WAIT_POLICY", "PASSIVE", /*overwrite=*/0);
  sophon::ConfigureAllocatorForLargeBuffers();
  sophon::InitUsage(
      "Sophon training node.\nUsage: sophon-train --server=HOST:PORT --mode=nooff|resizeoff|"
      "alloff --arch=resnet18 [--epochs=1] [--workers=N]");
  sophon::ArgvHolder args(argc, argv);  // accepts --prep-workers and --prep_workers
  absl::ParseCommandLine(args.argc(), args.argv());
  spdlog::set_level(spdlog::level::from_str(absl::GetFlag(FLAGS_log_level)));

  absl::StatusOr<sophon::PlannerKind> smart =
      sophon::ParsePlannerKind(absl::GetFlag(FLAGS_planner));
  if (!smart.ok()) return Fail(sophon::FlagError("--planner", smart.status()));
  absl::StatusOr<sophon::PlannerKind> mode = sophon::ParseMode(absl::GetFlag(FLAGS_mode), *smart);
  if (!mode.ok()) return Fail(sophon::FlagError("--mode", mode.status()));
  absl::StatusOr<sophon::BadSamplePolicy> bad_sample =
      sophon::ParseBadSamplePolicy(absl::GetFlag(FLAGS_on_bad_sample));
  if (!bad_sample.ok()) return Fail(sophon::FlagError("--on-bad-sample", bad_sample.status()));

  sophon::LoaderOptions loader_options;
  loader_options.batch_size = absl::GetFlag(FLAGS_batch_size);
  loader_options.workers = absl::GetFlag(FLAGS_workers);
  loader_options.prefetch_batches = absl::GetFlag(FLAGS_prefetch_batches);
  loader_options.seed = absl::GetFlag(FLAGS_seed);
  loader_options.shuffle_window = absl::GetFlag(FLAGS_shuffle_window);
  loader_options.on_bad_sample = *bad_sample;
  loader_options.pipeline.limits.lenient = absl::GetFlag(FLAGS_lenient_jpeg);
  sophon::AugmentOptions& augment = loader_options.pipeline.augment;
  augment.crop_size = absl::GetFlag(FLAGS_crop_size);
  if (absl::Status s = sophon::ParseRange("scale", absl::GetFlag(FLAGS_scale), &augment.scale_min,
                                  &augment.scale_max);
      !s.ok()) {
    return Fail(s);
  }
  if (absl::Status s = sophon::ParseRange("ratio", absl::GetFlag(FLAGS_ratio), &augment.ratio_min,
                                  &augment.ratio_max);
      !s.ok()) {
    return Fail(s);
  }
  if (absl::Status s = sophon::SetAugmentMode(absl::GetFlag(FLAGS_augment),
                                              absl::GetFlag(FLAGS_eval_resize), &augment);
      !s.ok()) {
    return Fail(sophon::FlagError("--augment", s));
  }
  if (absl::Status s = loader_options.Validate(); !s.ok()) return Fail(s);
  const int epochs = absl::GetFlag(FLAGS_epochs);
  if (epochs < 1) return Fail(absl::InvalidArgumentError("--epochs must be at least 1"));
  if (absl::GetFlag(FLAGS_max_batches) < 0 || absl::GetFlag(FLAGS_warmup_batches) < 0) {
    return Fail(absl::InvalidArgumentError("--max-batches and --warmup-batches must be >= 0"));
  }
  // The model's flags are checked before connecting (the class count comes
  // from the server's manifest).
  if (absl::StatusOr<sophon::TrainerOptions> o = TrainerOptionsFromFlags(1); !o.ok()) {
    return Fail(o.status());
  }
  if (absl::Status s = CheckSavePath(); !s.ok()) return Fail(s);
  if (absl::GetFlag(FLAGS_feature_cache_bytes) != 0 && !absl::GetFlag(FLAGS_finetune)) {
    return Fail(absl::InvalidArgumentError(
        "--feature-cache-bytes keeps features, which only --finetune takes"));
  }
  if (*mode == sophon::PlannerKind::kPredictionsOff) {
    return Fail(absl::InvalidArgumentError(
        "--mode=predictionsoff sends predictions, which only inference takes: use sophon-infer"));
  }
  if (absl::GetFlag(FLAGS_finetune)) {
    if (absl::GetFlag(FLAGS_init_checkpoint).empty()) {
      return Fail(absl::InvalidArgumentError(
          "--finetune needs --init-checkpoint: the network whose head is trained"));
    }
    if (absl::GetFlag(FLAGS_synthetic_data) || absl::GetFlag(FLAGS_device) == "emulate") {
      return Fail(absl::InvalidArgumentError(
          "--finetune trains a real head on real features: it needs a server, and a device "
          "other than emulate"));
    }
  } else if (*mode == sophon::PlannerKind::kFeaturesOff) {
    return Fail(absl::InvalidArgumentError(
        "--mode=featuresoff sends features, which only a head being fine-tuned takes: give "
        "--finetune --init-checkpoint=CHECKPOINT"));
  }
  if (absl::GetFlag(FLAGS_synthetic_data)) return RunSynthetic(loader_options, epochs);

  absl::StatusOr<sophon::DistributedOptions> distributed = DistributedFromFlags();
  if (!distributed.ok()) return Fail(distributed.status());
  loader_options.rank = distributed->rank;
  loader_options.world = distributed->world_size;
  const std::string checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  if (absl::GetFlag(FLAGS_checkpoint_every) < 0 || absl::GetFlag(FLAGS_max_steps) < 0) {
    return Fail(absl::InvalidArgumentError("--checkpoint-every and --max-steps must be >= 0"));
  }
  if (absl::GetFlag(FLAGS_resume) && checkpoint_dir.empty()) {
    return Fail(absl::InvalidArgumentError("--resume needs --checkpoint-dir"));
  }
  if (!checkpoint_dir.empty() && absl::GetFlag(FLAGS_device) == "emulate") {
    return Fail(absl::InvalidArgumentError(
        "--checkpoint-dir needs a model: --device=emulate emulates the GPU's time and trains "
        "none"));
  }
  if (!checkpoint_dir.empty() && access(checkpoint_dir.c_str(), W_OK | X_OK) != 0) {
    return Fail(absl::InvalidArgumentError(absl::StrCat(
        "--checkpoint-dir: the folder '", checkpoint_dir, "' does not exist or is not writable")));
  }

  // This node's sample cache, checked before any server is reached.
  sophon::LocalCacheOptions cache_options;
  cache_options.memory_bytes = absl::GetFlag(FLAGS_local_cache_bytes);
  {
    absl::StatusOr<sophon::CachePolicy> policy =
        sophon::ParseCachePolicy(absl::GetFlag(FLAGS_local_cache_policy));
    if (!policy.ok()) return Fail(sophon::FlagError("--local-cache-policy", policy.status()));
    cache_options.policy = *policy;
  }
  cache_options.dir = absl::GetFlag(FLAGS_local_cache_dir);
  cache_options.dir_bytes = absl::GetFlag(FLAGS_local_cache_dir_bytes);
  if (absl::Status s = cache_options.Validate(); !s.ok()) return Fail(s);

  absl::StatusOr<std::vector<std::string>> addresses =
      absl::GetFlag(FLAGS_servers_file).empty()
          ? sophon::ParseServerList(absl::GetFlag(FLAGS_server))
          : sophon::ReadServersFile(absl::GetFlag(FLAGS_servers_file));
  if (!addresses.ok()) {
    return Fail(sophon::FlagError(
        absl::GetFlag(FLAGS_servers_file).empty() ? "--server" : "--servers-file",
        addresses.status()));
  }
  std::vector<sophon::ClientOptions> all_client_options;
  for (const std::string& address : *addresses) {
    sophon::ClientOptions client_options;
    client_options.address = address;
    client_options.connect_timeout = absl::GetFlag(FLAGS_connect_timeout);
    sophon::CredentialsOptions& credentials = client_options.credentials;
    credentials.tls_ca = absl::GetFlag(FLAGS_tls_ca);
    credentials.tls_cert = absl::GetFlag(FLAGS_tls_cert);
    credentials.tls_key = absl::GetFlag(FLAGS_tls_key);
    credentials.tls_server_name = absl::GetFlag(FLAGS_tls_server_name);
    credentials.auth_token_file = absl::GetFlag(FLAGS_auth_token_file);
    credentials.kind = absl::GetFlag(FLAGS_credentials) == "auto"
                           ? sophon::DefaultCredentialsKind(credentials)
                           : absl::GetFlag(FLAGS_credentials);
    spdlog::info("transport to {}: {}", client_options.address,
                 sophon::DescribeCredentials(credentials, sophon::CredentialsSide::kChannel));
    if (credentials.kind == "insecure" &&
        !sophon::IsLoopbackHost(
            client_options.address.substr(0, client_options.address.rfind(':')))) {
      spdlog::warn("connecting to {} in plaintext: samples cross the network unencrypted and "
                   "unauthenticated; if the server has TLS, give --tls-ca (and --tls-cert, "
                   "--tls-key, --auth-token-file as it requires)",
                   client_options.address);
    }
    all_client_options.push_back(std::move(client_options));
  }
  absl::StatusOr<std::unique_ptr<sophon::ServerSet>> servers =
      sophon::ServerSet::Connect(all_client_options);
  if (!servers.ok()) return Fail(servers.status());
  const sophon::GlobalManifest& manifest = (*servers)->manifest();
  // Before profiling or building a model: the loader would refuse it later.
  for (int i = 0; i < (*servers)->size(); ++i) {
    const sophon::ServerManifest& m = (*servers)->client(i)->manifest();
    if (absl::Status s = sophon::CheckJpegDecodingAgrees(m, (*servers)->address(i),
                                                         loader_options.pipeline.limits);
        !s.ok()) {
      return Fail(s);
    }
    spdlog::info("connected to {}: dataset '{}', {} samples, {} classes, server prep workers {}",
                 (*servers)->address(i), m.dataset_name, m.num_samples(), m.class_names.size(),
                 m.prep_workers);
  }
  if ((*servers)->size() > 1) spdlog::info("dataset layout: {}", (*servers)->Describe());
  if (loader_options.world > 1) {
    spdlog::info("rank {} of {}: batches of {} per rank, global batch {}; every epoch's order "
                 "padded by {} repeated samples so that every rank gets as many",
                 loader_options.rank, loader_options.world, loader_options.batch_size,
                 static_cast<int64_t>(loader_options.batch_size) * loader_options.world,
                 sophon::PaddedEpochLength(manifest.num_samples(), loader_options.world) -
                     static_cast<int64_t>(manifest.num_samples()));
  }

  // --finetune: the job ends at FEATURES, and this node holds the frozen
  // backbone for the samples that arrive before it.
  std::unique_ptr<sophon::Backbone> backbone;
  {
    absl::StatusOr<std::shared_ptr<sophon::SampleCache>> cache =
        sophon::OpenSampleCache(cache_options, manifest.fingerprint(), manifest.num_samples());
    if (!cache.ok()) return Fail(cache.status());
    loader_options.sample_cache = *std::move(cache);
    if (loader_options.sample_cache != nullptr) {
      spdlog::info("sample cache: {:.1f} MB in memory ({}){}", cache_options.memory_bytes / 1e6,
                   std::string(sophon::CachePolicyName(cache_options.policy)),
                   cache_options.dir.empty()
                       ? std::string()
                       : absl::StrCat(", ", cache_options.dir_bytes / 1e6, " MB in ",
                                      cache_options.dir));
    }
  }
  if (absl::GetFlag(FLAGS_finetune)) {
    sophon::BackboneOptions backbone_options;
    backbone_options.checkpoint = absl::GetFlag(FLAGS_init_checkpoint);
    absl::StatusOr<std::unique_ptr<sophon::Backbone>> loaded =
        sophon::Backbone::Load(backbone_options);
    if (!loaded.ok()) return Fail(sophon::FlagError("--init-checkpoint", loaded.status()));
    backbone = *std::move(loaded);
    loader_options.target = sophon::Stage::kFeatures;
    loader_options.pipeline.backbone = backbone.get();
    loader_options.feature_cache_bytes = absl::GetFlag(FLAGS_feature_cache_bytes);
    spdlog::info("fine-tuning the head of {}: {} features per sample", backbone->description(),
                 backbone->feature_size());
    for (int i = 0; i < (*servers)->size(); ++i) {
      const sophon::ServerManifest& m = (*servers)->client(i)->manifest();
      spdlog::info("storage server {}: {}", (*servers)->address(i),
                   m.feature_size > 0 ? absl::StrCat("extracts features with ", m.backbone)
                                      : std::string("no backbone: samples come at most at the "
                                                    "tensor stage, features are extracted here"));
    }
  }

  {
    const absl::StatusOr<sophon::Stage> target = TransferStage();
    if (!target.ok()) return Fail(target.status());
    if (*target == sophon::Stage::kCropped) loader_options.target = *target;
  }
  const absl::StatusOr<sophon::TrainerOptions> options = TrainerOptionsFromFlags(
      std::max<int>(1, static_cast<int>(manifest.class_names().size())), backbone.get());
  if (!options.ok()) return Fail(options.status());
  const sophon::TrainerOptions& trainer_options = *options;
  absl::StatusOr<std::unique_ptr<sophon::Trainer>> trainer =
      CreateTrainer(trainer_options, loader_options.batch_size);
  if (!trainer.ok()) return Fail(trainer.status());

  sophon::TrainLoopOptions loop_options;
  loop_options.global_batch =
      static_cast<int64_t>(loader_options.batch_size) * loader_options.world;
  loop_options.dataset_fingerprint = manifest.fingerprint();
  loop_options.seed = loader_options.seed;
  loop_options.shuffle_window = loader_options.shuffle_window;
  if (!checkpoint_dir.empty()) loop_options.checkpoint_path = checkpoint_dir + "/checkpoint.pt";
  loop_options.checkpoint_every = absl::GetFlag(FLAGS_checkpoint_every);
  loop_options.max_steps = absl::GetFlag(FLAGS_max_steps);
  if (absl::GetFlag(FLAGS_resume)) {
    absl::StatusOr<sophon::TrainingCursor> cursor =
        (*trainer)->LoadCheckpoint(loop_options.checkpoint_path);
    if (!cursor.ok()) return Fail(sophon::FlagError("--resume", cursor.status()));
    if (absl::Status s = sophon::CheckResumable(*cursor, loop_options, loop_options.checkpoint_path);
        !s.ok()) {
      return Fail(s);
    }
    loop_options.start = *cursor;
    loop_options.resumed = true;
    spdlog::info("resuming from {}: step {}, epoch {} at sample {} of its order (written by {} "
                 "rank{})",
                 loop_options.checkpoint_path, cursor->steps, cursor->epoch, cursor->position,
                 cursor->world_size, cursor->world_size == 1 ? "" : "s");
  }

  sophon::SmartoffOptions smartoff_options;
  if (absl::Status s = SmartoffOptionsFromFlags(*mode, &smartoff_options); !s.ok()) {
    return Fail(s);
  }
  // The plan knows what this node holds (loader_options keeps the cache alive).
  sophon::PlanWithSampleCache(loader_options.sample_cache.get(), &smartoff_options);
  smartoff_options.last_epoch = epochs - 1;
  const std::string profile_out = absl::GetFlag(FLAGS_profile_out);
  const bool fixed = sophon::IsFixedKind(*mode);
  if (fixed && !profile_out.empty() && (*servers)->size() > 1) {
    return Fail(absl::UnimplementedError(absl::StrCat(
        "--profile-out with a fixed mode profiles one storage server; with ", (*servers)->size(),
        " servers give --mode=smartoff --profile-out=DIR (it profiles every shard)")));
  }
  double ingress_mbit = -1;  // auto
  if (const std::string ingress = absl::GetFlag(FLAGS_ingress_bw); ingress != "auto") {
    if (!absl::SimpleAtod(ingress, &ingress_mbit) || ingress_mbit < 0) {
      return Fail(absl::InvalidArgumentError(absl::StrCat(
          "--ingress-bw must be a number of Mbit/s >= 0 or auto, got '", ingress, "'")));
    }
  }
  sophon::SampleClient* const first = (*servers)->client(0);
  if (!profile_out.empty() && fixed) {
    absl::Status s = sophon::WriteProfileOverNetwork(
        first, loader_options, smartoff_options.speed_probe_samples, profile_out);
    if (!s.ok()) return Fail(s);
  }
  std::unique_ptr<sophon::OffloadPolicy> policy;
  if (!fixed) {
    // An emulated GPU's step time is known from its profile: no need to measure it.
    auto* emulated = dynamic_cast<sophon::EmulatedTrainer*>(trainer->get());
    if (emulated != nullptr && smartoff_options.gpu_batch_seconds < 0) {
      absl::StatusOr<sophon::GpuStepTime> step = emulated->StepTimeFor(loader_options.batch_size);
      if (!step.ok()) return Fail(step.status());
      smartoff_options.gpu_batch_seconds = step->copy_seconds + step->compute_seconds;
      spdlog::info("smartoff: training step {:.3f}s/batch from the GPU profile (not measured)",
                   smartoff_options.gpu_batch_seconds);
    } else if (smartoff_options.gpu_batch_seconds < 0 && absl::GetFlag(FLAGS_measure_step)) {
      sophon::StepMeasureOptions measure;
      measure.batch_size = loader_options.batch_size;
      measure.crop_size = loader_options.pipeline.augment.crop_size;
      measure.num_classes = trainer_options.num_classes;
      measure.feature_size = backbone != nullptr ? backbone->feature_size() : 0;
      measure.stage = loader_options.target == sophon::Stage::kCropped ? sophon::Stage::kCropped
                                                                       : sophon::Stage::kTensor;
      measure.seed = loader_options.seed;
      absl::StatusOr<sophon::StepMeasurement> step =
          sophon::MeasureTrainingStep(trainer->get(), measure, loader_options.world);
      if (!step.ok()) {
        return Fail(absl::Status(step.status().code(),
                                 absl::StrCat(step.status().message(),
                                              " (--measure-step=false plans epoch 0 without it)")));
      }
      smartoff_options.measured_gpu_batch_seconds = step->seconds;
    }
    absl::StatusOr<std::unique_ptr<sophon::OffloadPolicy>> created = sophon::CreateSmartoffFor(
        servers->get(), loader_options, smartoff_options, ingress_mbit);
    if (!created.ok()) return Fail(created.status());
    policy = *std::move(created);
  } else {
    policy = std::make_unique<sophon::FixedPolicy>(sophon::FixedKindStage(*mode),
                                                   sophon::ModeName(*mode));
  }
  absl::StatusOr<std::unique_ptr<sophon::Loader>> loader =
      sophon::Loader::Create(servers->get(), loader_options, policy.get());
  if (!loader.ok()) return Fail(loader.status());

  loop_options.epochs = epochs;
  loop_options.max_batches = absl::GetFlag(FLAGS_max_batches);
  loop_options.warmup_batches = absl::GetFlag(FLAGS_warmup_batches);
  loop_options.mode_name = policy->name();
  loop_options.arch = trainer_options.arch;
  loop_options.progress = absl::GetFlag(FLAGS_progress) && loader_options.rank == 0;
  loop_options.report_json = absl::GetFlag(FLAGS_report_json);
  loop_options.device = (*trainer)->DeviceName();
  loop_options.emulated = trainer_options.device == "emulate";
  loop_options.batch_timings = absl::GetFlag(FLAGS_batch_timings);
  loop_options.batch_digests = absl::GetFlag(FLAGS_batch_digests);
  loop_options.model_labels = ModelLabels(trainer_options);
  loop_options.optimizer = sophon::OptimizerName(trainer_options.optimizer);
  spdlog::info("training {}{} on {} in mode {}, batch {}, {} local workers",
               trainer_options.fused
                   ? absl::StrCat("a fused array of ", trainer_options.num_models(), " x ")
                   : "",
               loop_options.arch, (*trainer)->DeviceName(), loop_options.mode_name,
               loader_options.batch_size, loader_options.workers);
  absl::StatusOr<std::vector<sophon::EpochReport>> reports =
      sophon::RunTraining(loader->get(), trainer->get(), loop_options);
  if (!reports.ok()) return Fail(reports.status());
  if (loader_options.rank == 0) {
    if (absl::Status s = SaveModels(trainer->get(), trainer_options); !s.ok()) return Fail(s);
  }
  return 0;
}
