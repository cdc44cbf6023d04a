#include "client/torch/training_checkpoint.h"

#include <ATen/CPUGeneratorImpl.h>
#include <sys/stat.h>
#include <torch/serialize/archive.h>
#include <torch/utils.h>

#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/torch/grad_scaler.h"
#include "client/torch/torch_step.h"
#include "sophon/base/atomic_file.h"
#include "sophon/base/status_macros.h"

namespace sophon {
namespace {

constexpr int64_t kFormatVersion = 1;
constexpr char kVersionKey[] = "sophon_training_checkpoint";

using torch::serialize::InputArchive;
using torch::serialize::OutputArchive;

// The module's parameters, then its buffers, by name.
std::vector<std::pair<std::string, torch::Tensor>> NamedTensors(const torch::nn::Module& module) {
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (const auto& item : module.named_parameters()) tensors.emplace_back(item.key(), item.value());
  for (const auto& item : module.named_buffers()) tensors.emplace_back(item.key(), item.value());
  return tensors;
}

std::string ShapeString(const torch::Tensor& t) {
  return absl::StrCat("[", absl::StrJoin(t.sizes(), ", "), "]");
}

std::string DescribeModels(bool fused, int64_t num_models) {
  return absl::StrCat(num_models, fused ? " (fused)" : " (unfused)");
}

torch::Tensor CpuRngState() {
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void SetCpuRngState(const torch::Tensor& state) {
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

// Reads an integer entry; throws (c10::Error) when it is missing or not an int.
int64_t ReadInt(InputArchive& archive, const std::string& key) {
  c10::IValue value;
  archive.read(key, value);
  return value.toInt();
}

}  // namespace

absl::Status WriteTrainingCheckpoint(const std::string& path, const CheckpointedState& state,
                                     const TrainingCursor& cursor) {
  const CheckpointedState::Identity id = state.identity();
  ASSIGN_OR_RETURN(std::unique_ptr<AtomicFileWriter> file, AtomicFileWriter::Open(path));
  absl::Status written;
  try {
    torch::NoGradGuard no_grad;
    OutputArchive archive;
    archive.write(kVersionKey, c10::IValue(kFormatVersion));
    archive.write("arch", c10::IValue(id.arch));
    archive.write("num_classes", c10::IValue(static_cast<int64_t>(id.num_classes)));
    archive.write("optimizer_kind", c10::IValue(std::string(OptimizerName(id.optimizer))));
    archive.write("fused", c10::IValue(id.fused));
    archive.write("num_models", c10::IValue(static_cast<int64_t>(id.num_models)));
    archive.write("finetune", c10::IValue(id.finetune));

    OutputArchive model(archive.compilation_unit());
    const auto tensors = NamedTensors(state.module());
    std::vector<std::string> names;
    for (size_t i = 0; i < tensors.size(); ++i) {
      names.push_back(tensors[i].first);
      model.write(std::to_string(i), tensors[i].second.detach().to(torch::kCPU),
                  /*is_buffer=*/true);
    }
    model.write("names", c10::IValue(absl::StrJoin(names, "\n")));
    archive.write("model", model);

    OutputArchive optimizer(archive.compilation_unit());
    state.SaveOptimizer(optimizer);
    archive.write("optimizer_state", optimizer);
    archive.write("learning_rates",
                  torch::tensor(state.LearningRates(), torch::TensorOptions(torch::kDouble)),
                  /*is_buffer=*/true);
    archive.write("rng_cpu", CpuRngState(), /*is_buffer=*/true);
    if (const std::vector<double> scaler = state.LossScalerState(); !scaler.empty()) {
      archive.write("loss_scaler", torch::tensor(scaler, torch::TensorOptions(torch::kDouble)),
                    /*is_buffer=*/true);
    }

    OutputArchive saved_cursor(archive.compilation_unit());
    saved_cursor.write("epoch", c10::IValue(cursor.epoch));
    saved_cursor.write("position", c10::IValue(cursor.position));
    saved_cursor.write("steps", c10::IValue(cursor.steps));
    saved_cursor.write("global_batch", c10::IValue(cursor.global_batch));
    saved_cursor.write("world_size", c10::IValue(static_cast<int64_t>(cursor.world_size)));
    saved_cursor.write("dataset_fingerprint",
                       c10::IValue(static_cast<int64_t>(cursor.dataset_fingerprint)));
    saved_cursor.write("seed", c10::IValue(static_cast<int64_t>(cursor.seed)));
    saved_cursor.write("shuffle_window", c10::IValue(static_cast<int64_t>(cursor.shuffle_window)));
    archive.write("cursor", saved_cursor);

    archive.save_to([&](const void* data, size_t size) -> size_t {
      if (!written.ok()) return 0;
      written = file->Append(data, size);
      return written.ok() ? size : 0;
    });
  } catch (const std::exception& e) {
    if (written.ok()) {
      return absl::InternalError(
          absl::StrCat("writing the training checkpoint '", path, "': ", ExceptionText(e)));
    }
  }
  if (!written.ok()) {
    return absl::Status(written.code(), absl::StrCat("writing the training checkpoint '", path,
                                                     "': ", written.message()));
  }
  return file->Commit();
}

absl::StatusOr<TrainingCursor> ReadTrainingCheckpoint(const std::string& path,
                                                      CheckpointedState& state) {
  const std::string where = absl::StrCat("training checkpoint '", path, "'");
  struct stat info;
  if (stat(path.c_str(), &info) != 0) {
    return absl::NotFoundError(absl::StrCat("cannot open the ", where));
  }
  const CheckpointedState::Identity id = state.identity();
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
    if (!version.isInt() || version.toInt() != kFormatVersion) {
      return absl::InvalidArgumentError(absl::StrCat(where, " has format version ",
                                                     version.isInt() ? version.toInt() : -1,
                                                     ", this program reads ", kFormatVersion));
    }
    const auto differs = [&](const std::string& what, const std::string& saved,
                             const std::string& ours) {
      return absl::InvalidArgumentError(absl::StrCat(where, " was written by a trainer with ",
                                                     what, " ", saved, "; this trainer has ",
                                                     what, " ", ours));
    };
    c10::IValue arch, optimizer, fused;
    archive.read("arch", arch);
    archive.read("optimizer_kind", optimizer);
    archive.read("fused", fused);
    const int64_t num_classes = ReadInt(archive, "num_classes");
    const int64_t num_models = ReadInt(archive, "num_models");
    if (arch.toStringRef() != id.arch) return differs("arch", arch.toStringRef(), id.arch);
    if (num_classes != id.num_classes) {
      return differs("num_classes", std::to_string(num_classes), std::to_string(id.num_classes));
    }
    if (optimizer.toStringRef() != OptimizerName(id.optimizer)) {
      return differs("optimizer", optimizer.toStringRef(), OptimizerName(id.optimizer));
    }
    if (fused.toBool() != id.fused || num_models != id.num_models) {
      return differs("model count", DescribeModels(fused.toBool(), num_models),
                     DescribeModels(id.fused, id.num_models));
    }
    // Absent in a checkpoint from before fine-tuning: the whole network trained.
    c10::IValue finetune;
    const bool saved_finetune = archive.try_read("finetune", finetune) && finetune.toBool();
    if (saved_finetune != id.finetune) {
      const auto describe = [](bool head) {
        return std::string(head ? "on (the head only)" : "off (the whole network)");
      };
      return differs("finetune", describe(saved_finetune), describe(id.finetune));
    }

    // Everything is read and checked before anything changes.
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
    std::vector<torch::Tensor> saved(live.size());
    for (size_t i = 0; i < live.size(); ++i) {
      model.read(std::to_string(i), saved[i], /*is_buffer=*/true);
      const torch::Tensor& ours = live[i].second;
      if (names[i] != live[i].first || !saved[i].sizes().equals(ours.sizes()) ||
          saved[i].scalar_type() != ours.scalar_type()) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": model tensor ", i, " is '", names[i], "' ", ShapeString(saved[i]), " ",
            c10::toString(saved[i].scalar_type()), ", this model's is '", live[i].first, "' ",
            ShapeString(ours), " ", c10::toString(ours.scalar_type())));
      }
    }
    torch::Tensor lrs_tensor;
    archive.read("learning_rates", lrs_tensor, /*is_buffer=*/true);
    const size_t num_lrs = state.LearningRates().size();
    if (lrs_tensor.dim() != 1 || static_cast<size_t>(lrs_tensor.numel()) != num_lrs) {
      return absl::InvalidArgumentError(absl::StrCat(where, " holds ", lrs_tensor.numel(),
                                                     " learning rates, this trainer has ",
                                                     num_lrs));
    }
    const torch::Tensor lrs_double = lrs_tensor.to(torch::kDouble).contiguous();
    const std::vector<double> lrs(lrs_double.data_ptr<double>(),
                                  lrs_double.data_ptr<double>() + num_lrs);
    torch::Tensor rng;
    archive.read("rng_cpu", rng, /*is_buffer=*/true);
    // Absent unless written under amp fp16: a scaler then starts afresh.
    std::vector<double> scaler;
    if (torch::Tensor saved_scaler; archive.try_read("loss_scaler", saved_scaler, /*is_buffer=*/true)) {
      const torch::Tensor values = saved_scaler.to(torch::kDouble).contiguous().view({-1});
      scaler.assign(values.data_ptr<double>(), values.data_ptr<double>() + values.numel());
      if (absl::Status s = GradScaler::CheckState(scaler); !s.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": ", s.message()));
      }
    }
    InputArchive saved_cursor;
    archive.read("cursor", saved_cursor);
    TrainingCursor cursor;
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
    InputArchive optimizer_state;
    archive.read("optimizer_state", optimizer_state);

    // The generator checks the state's size: nothing has changed if it throws.
    const torch::Tensor previous_rng = CpuRngState();
    try {
      SetCpuRngState(rng);
    } catch (const std::exception& e) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": bad CPU generator state: ", ExceptionText(e)));
    }
    const auto half_way = [&](absl::string_view why) {
      return absl::InternalError(absl::StrCat(where, ": restoring failed half-way (", why,
                                              "); the trainer's state is undefined"));
    };
    absl::Status optimizer_loaded;
    try {
      optimizer_loaded = state.LoadOptimizer(optimizer_state);
    } catch (const std::exception& e) {
      return half_way(ExceptionText(e));
    }
    if (!optimizer_loaded.ok()) {  // the optimizer is unchanged: so is the rest
      SetCpuRngState(previous_rng);
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": optimizer state: ", optimizer_loaded.message()));
    }
    try {
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < live.size(); ++i) live[i].second.copy_(saved[i]);
      state.SetLearningRates(lrs);
    } catch (const std::exception& e) {
      return half_way(ExceptionText(e));
    }
    if (!scaler.empty()) {
      if (absl::Status s = state.RestoreLossScaler(scaler); !s.ok()) return half_way(s.message());
    }
    return cursor;
  } catch (const std::exception& e) {
    const std::vector<std::string> lines = absl::StrSplit(ExceptionText(e), '\n');
    return absl::InvalidArgumentError(absl::StrCat(where, " is malformed: ", lines[0]));
  }
}

}  // namespace sophon
