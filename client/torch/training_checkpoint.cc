#include "client/torch/training_checkpoint.h"

#include <torch/utils.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/torch/checkpoint_restore.h"
#include "client/torch/torch_step.h"
#include "model/checkpoint_file.h"
#include "sophon/base/status_macros.h"

namespace sophon {
namespace {

constexpr char kTrainingKind[] = "training";

// The model's state_dict; for a fused array one a model (slot k of every
// tensor, copied into a storage of its own: a view would carry the whole
// fused storage into anything that saves one model's state_dict alone).
c10::IValue ModelState(const torch::nn::Module& module, const CheckpointedState::Identity& id) {
  if (!id.fused) return StateDict(module);
  const auto tensors = NamedTensors(module);
  c10::impl::GenericList models(c10::AnyType::get());
  for (int k = 0; k < id.num_models; ++k) {
    c10::impl::GenericDict state(c10::StringType::get(), c10::TensorType::get());
    for (const auto& [name, t] : tensors) {
      state.insert(name, t.detach().select(0, k).to(torch::kCPU).clone());
    }
    models.push_back(state);
  }
  return models;
}

// The saved model state as one state_dict of the module: a fused array's
// list stacked slot by slot.
absl::StatusOr<c10::IValue> StackedModelState(const c10::IValue& saved,
                                              const torch::nn::Module& module,
                                              const CheckpointedState::Identity& id,
                                              const std::string& where) {
  if (!id.fused) return saved;
  if (!saved.isList() || saved.toList().size() != static_cast<size_t>(id.num_models)) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": \"model\" is not a list of ", id.num_models, " state_dicts"));
  }
  const c10::List<c10::IValue> models = saved.toList();
  c10::impl::GenericDict stacked(c10::StringType::get(), c10::TensorType::get());
  for (const auto& [name, unused] : NamedTensors(module)) {
    std::vector<torch::Tensor> slots;
    for (size_t k = 0; k < models.size(); ++k) {
      const c10::IValue model = models.get(k);
      const std::string model_where = absl::StrCat(where, ", model ", k);
      if (!model.isGenericDict()) {
        return absl::InvalidArgumentError(absl::StrCat(model_where, " is not a state_dict"));
      }
      ASSIGN_OR_RETURN(torch::Tensor t, TensorEntry(model.toGenericDict(), name, model_where));
      if (!slots.empty() && (!t.sizes().equals(slots[0].sizes()) ||
                             t.scalar_type() != slots[0].scalar_type())) {
        return absl::InvalidArgumentError(
            absl::StrCat(model_where, ": tensor '", name, "' differs from model 0's in shape"));
      }
      slots.push_back(t);
    }
    stacked.insert(name, torch::stack(slots));
  }
  return stacked;
}

torch::Tensor DoubleTensor(const std::vector<double>& values) {
  return torch::tensor(values, torch::TensorOptions(torch::kDouble));
}

absl::StatusOr<TrainingCursor> ReadCursor(const c10::impl::GenericDict& root,
                                          const std::string& where) {
  TrainingCursor cursor;
  ASSIGN_OR_RETURN(cursor.steps, IntEntry(root, "steps", where));
  const std::string cursor_where = absl::StrCat(where, ", \"cursor\"");
  ASSIGN_OR_RETURN(c10::impl::GenericDict saved, DictEntry(root, "cursor", where));
  ASSIGN_OR_RETURN(cursor.epoch, IntEntry(saved, "epoch", cursor_where));
  ASSIGN_OR_RETURN(cursor.position, IntEntry(saved, "position", cursor_where));
  ASSIGN_OR_RETURN(int64_t world_size, IntEntry(saved, "world_size", cursor_where));
  ASSIGN_OR_RETURN(int64_t batch_size, IntEntry(saved, "batch_size", cursor_where));
  ASSIGN_OR_RETURN(int64_t fingerprint, IntEntry(saved, "dataset_fingerprint", cursor_where));
  ASSIGN_OR_RETURN(int64_t seed, IntEntry(saved, "seed", cursor_where));
  ASSIGN_OR_RETURN(int64_t window, IntEntry(saved, "shuffle_window", cursor_where));
  if (world_size < 1 || world_size > INT32_MAX || batch_size < 0 || batch_size > INT32_MAX ||
      window < 0 || window > INT32_MAX || cursor.epoch < 0 || cursor.position < 0) {
    return absl::InvalidArgumentError(absl::StrCat(cursor_where, " is out of range"));
  }
  cursor.world_size = static_cast<int>(world_size);
  cursor.global_batch = batch_size * world_size;
  cursor.dataset_fingerprint = static_cast<uint64_t>(fingerprint);
  cursor.seed = static_cast<uint64_t>(seed);
  cursor.shuffle_window = static_cast<int>(window);
  return cursor;
}

absl::StatusOr<TrainingCursor> ReadPickled(const std::string& path, CheckpointedState& state) {
  const std::string where = absl::StrCat("training checkpoint '", path, "'");
  ASSIGN_OR_RETURN(c10::impl::GenericDict root, ReadCheckpointFile(path, kTrainingKind));
  CheckpointedState::Identity saved_id;
  ASSIGN_OR_RETURN(saved_id.arch, StringEntry(root, "arch", where));
  ASSIGN_OR_RETURN(int64_t num_classes, IntEntry(root, "num_classes", where));
  ASSIGN_OR_RETURN(int64_t num_models, IntEntry(root, "num_models", where));
  ASSIGN_OR_RETURN(std::string optimizer, StringEntry(root, "optimizer_kind", where));
  ASSIGN_OR_RETURN(saved_id.optimizer, ParseSavedOptimizer(optimizer, where));
  ASSIGN_OR_RETURN(saved_id.fused, BoolEntry(root, "fused", where));
  ASSIGN_OR_RETURN(saved_id.finetune, BoolEntry(root, "finetune", where));
  saved_id.num_classes = static_cast<int>(num_classes);
  saved_id.num_models = static_cast<int>(num_models);
  if (num_classes != saved_id.num_classes || num_models != saved_id.num_models) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": class or model count out of range"));
  }
  const CheckpointedState::Identity id = state.identity();
  RETURN_IF_ERROR(CheckIdentity(saved_id, id, where));

  // Everything is read and checked before anything changes.
  CheckpointRestore restore;
  ASSIGN_OR_RETURN(c10::IValue saved_model, Entry(root, "model", where));
  ASSIGN_OR_RETURN(c10::IValue model, StackedModelState(saved_model, state.module(), id, where));
  ASSIGN_OR_RETURN(restore.model, MatchStateDict(model, state.module(), where));
  ASSIGN_OR_RETURN(torch::Tensor lrs, TensorEntry(root, "learning_rates", where));
  ASSIGN_OR_RETURN(restore.learning_rates, CheckLearningRates(lrs, state, where));
  ASSIGN_OR_RETURN(restore.rng_cpu, TensorEntry(root, "rng_cpu", where));
  if (root.contains("loss_scaler")) {
    ASSIGN_OR_RETURN(torch::Tensor scaler, TensorEntry(root, "loss_scaler", where));
    ASSIGN_OR_RETURN(restore.loss_scaler, CheckLossScaler(scaler, where));
  }
  ASSIGN_OR_RETURN(restore.cursor, ReadCursor(root, where));
  ASSIGN_OR_RETURN(c10::impl::GenericDict optimizer_state, DictEntry(root, "optimizer", where));
  restore.load_optimizer = [&state, optimizer_state] {
    return state.LoadOptimizerState(optimizer_state);
  };
  return ApplyRestore(restore, state, where);
}

}  // namespace

absl::Status WriteTrainingCheckpoint(const std::string& path, const CheckpointedState& state,
                                     const TrainingCursor& cursor) {
  const CheckpointedState::Identity id = state.identity();
  c10::impl::GenericDict root = NewCheckpointRoot(kTrainingKind);
  try {
    torch::NoGradGuard no_grad;
    root.insert("arch", id.arch);
    root.insert("num_classes", static_cast<int64_t>(id.num_classes));
    root.insert("optimizer_kind", std::string(OptimizerName(id.optimizer)));
    root.insert("fused", id.fused);
    root.insert("num_models", static_cast<int64_t>(id.num_models));
    root.insert("finetune", id.finetune);
    root.insert("model", ModelState(state.module(), id));
    root.insert("optimizer", state.OptimizerState());
    root.insert("learning_rates", DoubleTensor(state.LearningRates()));
    root.insert("rng_cpu", CpuRngState());
    if (const std::vector<double> scaler = state.LossScalerState(); !scaler.empty()) {
      root.insert("loss_scaler", DoubleTensor(scaler));
    }
    root.insert("steps", cursor.steps);
    c10::impl::GenericDict saved_cursor = NewCheckpointDict();
    saved_cursor.insert("epoch", cursor.epoch);
    saved_cursor.insert("position", cursor.position);
    saved_cursor.insert("seed", static_cast<int64_t>(cursor.seed));
    saved_cursor.insert("world_size", static_cast<int64_t>(cursor.world_size));
    saved_cursor.insert("batch_size", cursor.global_batch / std::max(cursor.world_size, 1));
    saved_cursor.insert("shuffle_window", static_cast<int64_t>(cursor.shuffle_window));
    saved_cursor.insert("dataset_fingerprint", static_cast<int64_t>(cursor.dataset_fingerprint));
    root.insert("cursor", saved_cursor);
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("writing the training checkpoint '", path, "': ", ExceptionText(e)));
  }
  return WriteCheckpointFile(path, root);
}

absl::StatusOr<TrainingCursor> ReadTrainingCheckpoint(const std::string& path,
                                                      CheckpointedState& state) {
  ASSIGN_OR_RETURN(CheckpointFormat format, DetectCheckpointFormat(path));
  if (format == CheckpointFormat::kModuleArchive) {
    return ReadArchivedTrainingCheckpoint(path, state);
  }
  try {
    return ReadPickled(path, state);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("training checkpoint '", path,
                                                   "' is malformed: ", ExceptionText(e)));
  }
}

}  // namespace sophon
