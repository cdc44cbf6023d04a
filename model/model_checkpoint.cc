// Model checkpoints (models.h): torch.save's format (checkpoint_file.h),
//   "kind": "model", "arch": str, "num_classes": int,
//   "model": the state_dict (torchvision's names; CPU tensors)
// and the module archives of earlier versions (module_archive.h), read.
#include <torch/torch.h>

#include <exception>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "model/checkpoint_file.h"
#include "model/models.h"
#include "model/module_archive.h"

namespace sophon {
namespace {

constexpr char kModelKind[] = "model";

std::string Where(const std::string& path) { return absl::StrCat("checkpoint '", path, "'"); }

absl::StatusOr<CheckpointInfo> InfoOf(const c10::impl::GenericDict& root,
                                      const std::string& path) {
  const std::string where = Where(path);
  absl::StatusOr<std::string> arch = StringEntry(root, "arch", where);
  if (!arch.ok()) return arch.status();
  absl::StatusOr<int64_t> classes = IntEntry(root, "num_classes", where);
  if (!classes.ok()) return classes.status();
  if (absl::Status s = CheckModelName(*arch); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", s.message()));
  }
  if (*classes < 1 || *classes > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": num_classes ", *classes, " is out of range"));
  }
  return CheckpointInfo{*arch, static_cast<int>(*classes)};
}

}  // namespace

absl::Status SaveModel(const Classifier& model, const std::string& arch, int num_classes,
                       const std::string& path) {
  try {
    c10::impl::GenericDict root = NewCheckpointRoot(kModelKind);
    root.insert("arch", arch);
    root.insert("num_classes", static_cast<int64_t>(num_classes));
    root.insert("model", StateDict(*model));
    return WriteCheckpointFile(path, root);
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("writing the checkpoint '", path, "': ", e.what()));
  }
}

absl::StatusOr<CheckpointInfo> ReadCheckpointInfo(const std::string& path) {
  absl::StatusOr<CheckpointFormat> format = DetectCheckpointFormat(path);
  if (!format.ok()) return format.status();
  if (*format == CheckpointFormat::kModuleArchive) return ReadModuleArchiveInfo(path);
  try {
    absl::StatusOr<c10::impl::GenericDict> root = ReadCheckpointFile(path, kModelKind);
    if (!root.ok()) return root.status();
    return InfoOf(*root, path);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(Where(path), " is malformed: ", e.what()));
  }
}

absl::Status LoadModel(const std::string& path, const std::string& arch, int num_classes,
                       const Classifier& model) {
  absl::StatusOr<CheckpointFormat> format = DetectCheckpointFormat(path);
  if (!format.ok()) return format.status();
  if (*format == CheckpointFormat::kModuleArchive) {
    return LoadModuleArchive(path, arch, num_classes, model);
  }
  const std::string where = Where(path);
  try {
    absl::StatusOr<c10::impl::GenericDict> root = ReadCheckpointFile(path, kModelKind);
    if (!root.ok()) return root.status();
    absl::StatusOr<CheckpointInfo> info = InfoOf(*root, path);
    if (!info.ok()) return info.status();
    if (info->arch != arch || info->num_classes != num_classes) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " holds ", info->arch, " with ", info->num_classes,
                       " classes, not ", arch, " with ", num_classes, " classes"));
    }
    absl::StatusOr<c10::IValue> state = Entry(*root, "model", where);
    if (!state.ok()) return state.status();
    return LoadStateDict(*state, *model, where);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(where, " is malformed: ", e.what()));
  }
}

absl::StatusOr<FrozenModel> LoadFrozenModel(const std::string& path) {
  absl::StatusOr<CheckpointInfo> info = ReadCheckpointInfo(path);
  if (!info.ok()) return info.status();
  absl::StatusOr<Classifier> net = MakeModel(info->arch, info->num_classes, /*dropout=*/0);
  if (!net.ok()) return net.status();
  if (absl::Status s = LoadModel(path, info->arch, info->num_classes, *net); !s.ok()) return s;
  (*net)->eval();
  for (torch::Tensor& p : (*net)->parameters()) p.set_requires_grad(false);
  return FrozenModel{*std::move(net), *std::move(info)};
}

absl::StatusOr<Classifier> LoadForFinetuning(const std::string& path, const std::string& arch,
                                             int num_classes, double dropout, bool* new_head) {
  absl::StatusOr<CheckpointInfo> info = ReadCheckpointInfo(path);
  if (!info.ok()) return info.status();
  if (info->arch != arch) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint '", path, "' holds ", info->arch,
                                                   ", not ", arch));
  }
  absl::StatusOr<Classifier> loaded = MakeModel(arch, info->num_classes, dropout);
  if (!loaded.ok()) return loaded.status();
  if (absl::Status s = LoadModel(path, arch, info->num_classes, *loaded); !s.ok()) return s;
  if (new_head != nullptr) *new_head = info->num_classes != num_classes;
  if (info->num_classes == num_classes) return loaded;
  // Another class count: a fresh model (initialised from the caller's seed)
  // takes every tensor of the checkpoint's that has its name and shape, which
  // is all but the head's last layer.
  absl::StatusOr<Classifier> model = MakeModel(arch, num_classes, dropout);
  if (!model.ok()) return model.status();
  torch::NoGradGuard no_grad;
  const auto copy = [](const torch::OrderedDict<std::string, torch::Tensor>& from,
                       torch::OrderedDict<std::string, torch::Tensor> to) {
    for (const auto& item : to) {
      const torch::Tensor* source = from.find(item.key());
      if (source != nullptr && source->sizes() == item.value().sizes()) {
        item.value().copy_(*source);
      }
    }
  };
  copy((*loaded)->named_parameters(), (*model)->named_parameters());
  copy((*loaded)->named_buffers(), (*model)->named_buffers());
  return model;
}

}  // namespace sophon
