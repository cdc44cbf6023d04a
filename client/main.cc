// sophon-train: trains a LibTorch model on samples served by a storage node,
// with each sample's preprocessing split between the two nodes by --mode.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "sophon/cli.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "loader.h"
#include "modes.h"
#include "sample_client.h"
#include "spdlog/spdlog.h"
#include "train_loop.h"
#include "trainer.h"

ABSL_FLAG(std::string, server, "127.0.0.1:50051", "Storage server HOST:PORT. Default 127.0.0.1:50051.");
ABSL_FLAG(std::string, mode, "nooff",
          "Where preprocessing runs: nooff (all on this node), resizeoff/piloff (storage node "
          "decodes, crops and flips), alloff (storage node does everything). Aliases "
          "remote_nooff, remote_piloff, remote_alloff. Default nooff.");
ABSL_FLAG(std::string, arch, "resnet18", "Model: alexnet, resnet18, resnet50, tinycnn. Default resnet18.");
ABSL_FLAG(int, batch_size, 256, "Samples per batch. Default 256.");
ABSL_FLAG(int, epochs, 1, "Epochs to train. Default 1.");
ABSL_FLAG(int64_t, max_batches, 0, "Stop each epoch after this many batches; 0 = whole epoch.");
ABSL_FLAG(int, workers, 2, "Local prep threads that finish each sample's ops. Default 2.");
ABSL_FLAG(int, prefetch_batches, 3,
          "Batches requested ahead of the trainer (bounds memory: ~batch*12*S^2 bytes each). "
          "Default 3.");
ABSL_FLAG(double, lr, 0.1, "SGD learning rate. Default 0.1.");
ABSL_FLAG(double, momentum, 0.9, "SGD momentum. Default 0.9.");
ABSL_FLAG(double, weight_decay, 1e-4, "SGD weight decay. Default 1e-4.");
ABSL_FLAG(uint64_t, seed, 0, "Seed of the shuffle, every augmentation and the model init. Default 0.");
ABSL_FLAG(std::string, device, "cpu", "cpu or cuda. Default cpu.");
ABSL_FLAG(int, torch_threads, 0, "LibTorch intra-op threads on cpu; 0 = LibTorch's default.");
ABSL_FLAG(int, crop_size, 224, "RandomResizedCrop output side S. Default 224.");
ABSL_FLAG(std::string, scale, "0.08,1.0", "RandomResizedCrop area range MIN,MAX. Default 0.08,1.0.");
ABSL_FLAG(std::string, ratio, "0.75,1.3333333333333333",
          "RandomResizedCrop aspect ratio range MIN,MAX. Default 3/4,4/3.");
ABSL_FLAG(std::string, on_bad_sample, "skip",
          "skip (warn, count and go on) or fail (end the run) on a corrupt sample. Default skip.");
ABSL_FLAG(std::string, report_json, "", "Write per-epoch figures as JSON to this file.");
ABSL_FLAG(absl::Duration, connect_timeout, absl::Seconds(30),
          "How long to retry reaching the storage server. Default 30s.");
ABSL_FLAG(bool, progress, true, "Show a progress line while training. Default true.");
ABSL_FLAG(std::string, log_level, "info", "trace, debug, info, warn, error. Default info.");

namespace {

int Fail(const absl::Status& status) {
  std::fprintf(stderr, "sophon-train: %s\n", std::string(status.message()).c_str());
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

absl::Status ParseRange(const std::string& flag, const std::string& text, double* lo,
                        double* hi) {
  std::vector<std::string> parts = absl::StrSplit(text, ',');
  if (parts.size() != 2 || !absl::SimpleAtod(parts[0], lo) || !absl::SimpleAtod(parts[1], hi)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " must be MIN,MAX (two numbers), got '", text, "'"));
  }
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  // LibTorch's OpenMP threads share the cores with the loader's prep threads;
  // spinning while they wait starves the loader (set before LibTorch starts).
  setenv("OMP_WAIT_POLICY", "PASSIVE", /*overwrite=*/0);
  sophon::InitUsage(
      "Sophon training node.\nUsage: sophon-train --server=HOST:PORT --mode=nooff|resizeoff|"
      "alloff --arch=resnet18 [--epochs=1] [--workers=N]");
  sophon::ArgvHolder args(argc, argv);  // accepts --prep-workers and --prep_workers
  absl::ParseCommandLine(args.argc(), args.argv());
  spdlog::set_level(spdlog::level::from_str(absl::GetFlag(FLAGS_log_level)));

  absl::StatusOr<sophon::Mode> mode = sophon::ParseMode(absl::GetFlag(FLAGS_mode));
  if (!mode.ok()) return Fail(mode.status());
  absl::StatusOr<sophon::BadSamplePolicy> policy =
      sophon::ParseBadSamplePolicy(absl::GetFlag(FLAGS_on_bad_sample));
  if (!policy.ok()) return Fail(policy.status());

  sophon::LoaderOptions loader_options;
  loader_options.batch_size = absl::GetFlag(FLAGS_batch_size);
  loader_options.workers = absl::GetFlag(FLAGS_workers);
  loader_options.prefetch_batches = absl::GetFlag(FLAGS_prefetch_batches);
  loader_options.seed = absl::GetFlag(FLAGS_seed);
  loader_options.on_bad_sample = *policy;
  sophon::AugmentOptions& augment = loader_options.pipeline.augment;
  augment.crop_size = absl::GetFlag(FLAGS_crop_size);
  if (absl::Status s = ParseRange("scale", absl::GetFlag(FLAGS_scale), &augment.scale_min,
                                  &augment.scale_max);
      !s.ok()) {
    return Fail(s);
  }
  if (absl::Status s = ParseRange("ratio", absl::GetFlag(FLAGS_ratio), &augment.ratio_min,
                                  &augment.ratio_max);
      !s.ok()) {
    return Fail(s);
  }
  if (absl::Status s = loader_options.Validate(); !s.ok()) return Fail(s);
  const int epochs = absl::GetFlag(FLAGS_epochs);
  if (epochs < 1) return Fail(absl::InvalidArgumentError("--epochs must be at least 1"));

  sophon::ClientOptions client_options;
  client_options.address = absl::GetFlag(FLAGS_server);
  client_options.connect_timeout = absl::GetFlag(FLAGS_connect_timeout);
  absl::StatusOr<std::unique_ptr<sophon::SampleClient>> client =
      sophon::SampleClient::Connect(client_options);
  if (!client.ok()) return Fail(client.status());
  const sophon::v1::Manifest& manifest = (*client)->manifest();
  spdlog::info("connected to {}: dataset '{}', {} samples, {} classes, server prep workers {}",
               client_options.address, manifest.dataset_name(), manifest.num_samples(),
               manifest.class_names_size(), manifest.prep_workers());

  sophon::TrainerOptions trainer_options;
  trainer_options.arch = absl::GetFlag(FLAGS_arch);
  trainer_options.num_classes = std::max(1, manifest.class_names_size());
  trainer_options.lr = absl::GetFlag(FLAGS_lr);
  trainer_options.momentum = absl::GetFlag(FLAGS_momentum);
  trainer_options.weight_decay = absl::GetFlag(FLAGS_weight_decay);
  trainer_options.device = absl::GetFlag(FLAGS_device);
  trainer_options.seed = absl::GetFlag(FLAGS_seed);
  trainer_options.threads = absl::GetFlag(FLAGS_torch_threads);
  absl::StatusOr<std::unique_ptr<sophon::Trainer>> trainer =
      sophon::Trainer::Create(trainer_options);
  if (!trainer.ok()) return Fail(trainer.status());

  sophon::FixedPlanner planner(*mode);
  absl::StatusOr<std::unique_ptr<sophon::Loader>> loader =
      sophon::Loader::Create(client->get(), loader_options, &planner);
  if (!loader.ok()) return Fail(loader.status());

  sophon::TrainLoopOptions loop_options;
  loop_options.epochs = epochs;
  loop_options.max_batches = absl::GetFlag(FLAGS_max_batches);
  loop_options.mode_name = sophon::ModeName(*mode);
  loop_options.arch = trainer_options.arch;
  loop_options.progress = absl::GetFlag(FLAGS_progress);
  loop_options.report_json = absl::GetFlag(FLAGS_report_json);
  spdlog::info("training {} on {} in mode {}, batch {}, {} local workers", loop_options.arch,
               (*trainer)->DeviceName(), loop_options.mode_name, loader_options.batch_size,
               loader_options.workers);
  absl::StatusOr<std::vector<sophon::EpochReport>> reports =
      sophon::RunTraining(client->get(), loader->get(), trainer->get(), loop_options);
  if (!reports.ok()) return Fail(reports.status());
  return 0;
}
