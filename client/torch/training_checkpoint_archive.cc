// Training checkpoints of earlier versions: LibTorch archives holding
//   sophon_training_checkpoint  format version (1)
//   arch, num_classes, optimizer_kind ("sgd" | "adam"), fused, num_models[, finetune]
//   model             names: the module's parameter then buffer names, one a
//                     line; "0", "1", ...: those tensors, in that order
//   optimizer_state   the optimizer's own archive
//   learning_rates    float64 [num_models]
//   rng_cpu           LibTorch's CPU generator state
//   loss_scaler       float64 {scale, finite steps in a row} (optional)
//   cursor            epoch, position, steps, global_batch, world_size,
//                     dataset_fingerprint, seed (bit-cast to int64)[, shuffle_window]
// Read so that a run can resume from them; never written.
#include <torch/serialize/archive.h>

#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/torch/checkpoint_restore.h"
#include "client/torch/torch_step.h"
#include "model/checkpoint_file.h"

namespace sophon {
namespace {

constexpr int64_t kArchiveVersion = 1;
constexpr char kVersionKey[] = "sophon_training_checkpoint";

using torch::serialize::InputArchive;

// Reads an integer entry; throws (c10::Error) when it is missing or not an int.
int64_t ReadInt(InputArchive& archive, const std::string& key) {
  c10::IValue value;
  archive.read(key, value);
  return value.toInt();
}

}  // namespace

absl::StatusOr<TrainingCursor> ReadArchivedTrainingCheckpoint(const std::string& path,
                                                              CheckpointedState& state) {
  const std::string where = absl::StrCat("training checkpoint '", path, "'");
  try {
    InputArchive archive;
    try {
      archive.load_from(path);
    } catch (const std::exception& e) {
      const std::vector<std::string> lines = absl::StrSplit(ExceptionText(e), '\n');
      return absl::InvalidArgumentError(
          absl::StrCat("'", path, "' cannot be read as a training checkpoint: ", lines[0]));
    }
    c10::IValue version;
    if (!archive.try_read(kVersionKey, version)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", path, "' is not a training checkpoint (no ", kVersionKey,
          " entry); a model checkpoint written by Trainer::Save loads with "
          "TrainerOptions.init_checkpoint"));
    }
    if (!version.isInt() || version.toInt() != kArchiveVersion) {
      return absl::InvalidArgumentError(absl::StrCat(where, " has format version ",
                                                     version.isInt() ? version.toInt() : -1,
                                                     ", this program reads ", kArchiveVersion));
    }
    CheckpointedState::Identity saved_id;
    c10::IValue arch, optimizer, fused;
    archive.read("arch", arch);
    archive.read("optimizer_kind", optimizer);
    archive.read("fused", fused);
    saved_id.arch = arch.toStringRef();
    saved_id.num_classes = static_cast<int>(ReadInt(archive, "num_classes"));
    saved_id.num_models = static_cast<int>(ReadInt(archive, "num_models"));
    absl::StatusOr<OptimizerKind> kind = ParseSavedOptimizer(optimizer.toStringRef(), where);
    if (!kind.ok()) return kind.status();
    saved_id.optimizer = *kind;
    saved_id.fused = fused.toBool();
    // Absent in a checkpoint from before fine-tuning: the whole network trained.
    c10::IValue finetune;
    saved_id.finetune = archive.try_read("finetune", finetune) && finetune.toBool();
    const CheckpointedState::Identity id = state.identity();
    if (absl::Status s = CheckIdentity(saved_id, id, where); !s.ok()) return s;

    CheckpointRestore restore;
    InputArchive model;
    archive.read("model", model);
    c10::IValue names_value;
    model.read("names", names_value);
    const std::vector<std::string> names = absl::StrSplit(names_value.toStringRef(), '\n');
    const auto live = NamedTensors(state.module());
    if (names.size() != live.size()) {
      return absl::InvalidArgumentError(absl::StrCat(where, " holds ", names.size(),
                                                     " model tensors, this model has ",
                                                     live.size()));
    }
    for (size_t i = 0; i < live.size(); ++i) {
      torch::Tensor saved;
      model.read(std::to_string(i), saved, /*is_buffer=*/true);
      const torch::Tensor& ours = live[i].second;
      if (names[i] != live[i].first || !saved.sizes().equals(ours.sizes()) ||
          saved.scalar_type() != ours.scalar_type()) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": model tensor ", i, " is '", names[i], "' ", TensorShapeString(saved), " ",
            c10::toString(saved.scalar_type()), ", this model's is '", live[i].first, "' ",
            TensorShapeString(ours), " ", c10::toString(ours.scalar_type())));
      }
      restore.model.emplace_back(ours, saved);
    }
    torch::Tensor lrs;
    archive.read("learning_rates", lrs, /*is_buffer=*/true);
    absl::StatusOr<std::vector<double>> checked_lrs = CheckLearningRates(lrs, state, where);
    if (!checked_lrs.ok()) return checked_lrs.status();
    restore.learning_rates = *std::move(checked_lrs);
    archive.read("rng_cpu", restore.rng_cpu, /*is_buffer=*/true);
    if (torch::Tensor scaler; archive.try_read("loss_scaler", scaler, /*is_buffer=*/true)) {
      absl::StatusOr<std::vector<double>> checked = CheckLossScaler(scaler, where);
      if (!checked.ok()) return checked.status();
      restore.loss_scaler = *std::move(checked);
    }
    InputArchive saved_cursor;
    archive.read("cursor", saved_cursor);
    TrainingCursor& cursor = restore.cursor;
    cursor.epoch = ReadInt(saved_cursor, "epoch");
    cursor.position = ReadInt(saved_cursor, "position");
    cursor.steps = ReadInt(saved_cursor, "steps");
    cursor.global_batch = ReadInt(saved_cursor, "global_batch");
    cursor.world_size = static_cast<int>(ReadInt(saved_cursor, "world_size"));
    cursor.dataset_fingerprint = static_cast<uint64_t>(ReadInt(saved_cursor, "dataset_fingerprint"));
    cursor.seed = static_cast<uint64_t>(ReadInt(saved_cursor, "seed"));
    // Absent in checkpoints from before the group-aware order: a full shuffle.
    c10::IValue window;
    if (saved_cursor.try_read("shuffle_window", window)) {
      cursor.shuffle_window = static_cast<int>(window.toInt());
    }
    auto optimizer_state = std::make_shared<InputArchive>();
    archive.read("optimizer_state", *optimizer_state);
    restore.load_optimizer = [&state, optimizer_state] {
      return state.LoadArchivedOptimizer(*optimizer_state);
    };
    return ApplyRestore(restore, state, where);
  } catch (const std::exception& e) {
    const std::vector<std::string> lines = absl::StrSplit(ExceptionText(e), '\n');
    return absl::InvalidArgumentError(absl::StrCat(where, " is malformed: ", lines[0]));
  }
}

}  // namespace sophon
