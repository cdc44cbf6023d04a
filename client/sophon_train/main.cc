// sophon-train: trains a LibTorch model on samples served by storage nodes,
// with each sample's preprocessing split between the two nodes by --mode.
// main() parses the flags into the job's options, assembles the job
// (client/job/job.h) and runs the train loop over it.
#include <algorithm>
#include <cstdlib>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/job/job.h"
#include "client/sophon_train/train_flags.h"
#include "client/train/train_loop.h"
#include "sophon/base/allocator.h"
#include "sophon/cli/cli.h"
#include "sophon/cli/log_level.h"
#include "spdlog/spdlog.h"

namespace tc = sophon::train_cli;

int main(int argc, char** argv) {
  // LibTorch's OpenMP threads share the cores with the loader's prep threads;
  // spinning while they wait starves the loader (set before LibTorch starts).
  setenv("OMP_WAIT_POLICY", "PASSIVE", /*overwrite=*/0);
  sophon::ConfigureAllocatorForLargeBuffers();
  // accepts --batch-size and --batch_size
  sophon::ParseProgramFlags(
      argc, argv,
      "Sophon training node.\nUsage: sophon-train --server=HOST:PORT --mode=nooff|resizeoff|"
      "alloff|smartoff --arch=resnet18 [--epochs=1] [--workers=N]");
  if (absl::Status s = sophon::ApplyLogLevelFlag(); !s.ok()) return tc::Fail(s);

  // Every option checked before any server is reached.
  int epochs = 0;
  absl::StatusOr<sophon::JobSpec> spec = tc::JobSpecFromFlags(&epochs);
  if (!spec.ok()) return tc::Fail(spec.status());
  if (tc::SyntheticData()) return tc::RunSynthetic(spec->loader, epochs);

  // 1. The servers, their datasets checked, this node's cache.
  absl::StatusOr<std::unique_ptr<sophon::Job>> connected = sophon::Job::Connect(*std::move(spec));
  if (!connected.ok()) return tc::Fail(connected.status());
  sophon::Job& job = **connected;
  tc::LogRanks(job);
  // The job's last stage: features to fine-tune a head, uint8 crops for a
  // device that finishes them, else tensors.
  absl::StatusOr<std::unique_ptr<sophon::Backbone>> backbone = tc::SetTarget(&job);
  if (!backbone.ok()) return tc::Fail(backbone.status());

  // The model, and the data position to resume from.
  const int classes = static_cast<int>(job.servers()->manifest().class_names().size());
  const absl::StatusOr<sophon::TrainerOptions> trainer_options =
      tc::TrainerOptionsFromFlags(std::max(1, classes), backbone->get());
  if (!trainer_options.ok()) return tc::Fail(trainer_options.status());
  absl::StatusOr<std::unique_ptr<sophon::Trainer>> trainer =
      tc::CreateTrainer(*trainer_options, job.spec().loader.batch_size);
  if (!trainer.ok()) return tc::Fail(trainer.status());
  absl::StatusOr<sophon::TrainLoopOptions> loop =
      tc::LoopOptionsFromFlags(job, epochs, *trainer_options, trainer->get());
  if (!loop.ok()) return tc::Fail(loop.status());

  // 2. The plan (smartoff: with the training step's time), 3. the loader.
  if (absl::Status s = tc::PrepareToPlan(&job, trainer->get(), *trainer_options, backbone->get());
      !s.ok()) {
    return tc::Fail(s);
  }
  if (absl::Status s = job.Plan(); !s.ok()) return tc::Fail(s);
  if (absl::Status s = job.Start(); !s.ok()) return tc::Fail(s);

  loop->mode_name = job.policy()->name();
  const sophon::LoaderOptions& loader = job.spec().loader;
  spdlog::info("training {}{} on {} in mode {}, batch {}, {} local workers",
               trainer_options->fused
                   ? absl::StrCat("a fused array of ", trainer_options->num_models(), " x ")
                   : "",
               loop->arch, (*trainer)->DeviceName(), loop->mode_name, loader.batch_size,
               loader.workers);
  absl::StatusOr<std::vector<sophon::EpochReport>> reports =
      sophon::RunTraining(job.loader(), trainer->get(), *loop);
  if (!reports.ok()) return tc::Fail(reports.status());
  if (loader.rank == 0) {
    if (absl::Status s = tc::SaveModels(trainer->get(), *trainer_options); !s.ok()) {
      return tc::Fail(s);
    }
  }
  return 0;
}
