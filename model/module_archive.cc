#include "model/module_archive.h"

#include <torch/serialize.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <fstream>
#include <limits>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "model/checkpoint_file.h"

namespace sophon {
namespace {

constexpr char kArchKey[] = "sophon_arch";
constexpr char kClassesKey[] = "sophon_num_classes";

// As torch::nn::Module::save, with CPU copies of tensors on another device:
// the same archive, and the live module stays where it is.
void SaveOnCpu(const torch::nn::Module& module, torch::serialize::OutputArchive& archive) {
  for (const auto& p : module.named_parameters(/*recurse=*/false)) {
    archive.write(p.key(), p.value().detach().to(torch::kCPU));
  }
  for (const auto& b : module.named_buffers(/*recurse=*/false)) {
    archive.write(b.key(), b.value().detach().to(torch::kCPU), /*is_buffer=*/true);
  }
  for (const auto& child : module.named_children()) {
    torch::serialize::OutputArchive child_archive(archive.compilation_unit());
    SaveOnCpu(*child.value(), child_archive);
    archive.write(child.key(), child_archive);
  }
}

}  // namespace

absl::Status WriteModuleArchive(const Classifier& model, const std::string& arch, int num_classes,
                       const std::string& path) {
  const std::string temp = path + ".tmp";
  try {
    torch::serialize::OutputArchive archive;
    SaveOnCpu(*model, archive);
    archive.write(kArchKey, c10::IValue(arch));
    archive.write(kClassesKey, c10::IValue(static_cast<int64_t>(num_classes)));
    archive.save_to(temp);
  } catch (const c10::Error& e) {
    std::remove(temp.c_str());
    const std::vector<std::string> lines = absl::StrSplit(e.what_without_backtrace(), '\n');
    return absl::UnavailableError(
        absl::StrCat("cannot write the checkpoint '", path, "': ", lines[0]));
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    std::remove(temp.c_str());
    return absl::UnavailableError(absl::StrCat("cannot rename '", temp, "' to '", path, "'"));
  }
  return absl::OkStatus();
}

namespace {

// The architecture and class count `archive` says it holds; nullopt when it
// says nothing (a checkpoint written before they were saved).
absl::StatusOr<std::optional<CheckpointInfo>> SavedInfo(torch::serialize::InputArchive& archive,
                                                        const std::string& where) {
  c10::IValue arch;
  c10::IValue classes;
  if (!archive.try_read(kArchKey, arch) || !archive.try_read(kClassesKey, classes)) {
    return std::nullopt;
  }
  if (!arch.isString() || !classes.isInt() || classes.toInt() < 1 ||
      classes.toInt() > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": malformed ", kArchKey, " or ", kClassesKey));
  }
  return CheckpointInfo{arch.toStringRef(), static_cast<int>(classes.toInt())};
}

// Loads `path` into `archive` (throws c10::Error for a file that is not
// one) and reads what it says it holds.
absl::StatusOr<std::optional<CheckpointInfo>> Open(torch::serialize::InputArchive& archive,
                                                   const std::string& path,
                                                   const std::string& where) {
  archive.load_from(path);
  return SavedInfo(archive, where);
}

}  // namespace

absl::StatusOr<CheckpointInfo> ReadModuleArchiveInfo(const std::string& path) {
  if (!std::ifstream(path)) {
    return absl::NotFoundError(absl::StrCat("cannot open the checkpoint '", path, "'"));
  }
  const std::string where = absl::StrCat("checkpoint '", path, "'");
  try {
    torch::serialize::InputArchive archive;
    absl::StatusOr<std::optional<CheckpointInfo>> saved = Open(archive, path, where);
    if (!saved.ok()) return saved.status();
    if (!saved->has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, " does not say which architecture it holds (not written by sophon-train --save)"));
    }
    CheckpointInfo info = **saved;
    if (absl::Status s = CheckModelName(info.arch); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", s.message()));
    }
    return info;
  } catch (const c10::Error& e) {
    const std::vector<std::string> lines = absl::StrSplit(e.what_without_backtrace(), '\n');
    return absl::InvalidArgumentError(
        absl::StrCat(where, " is not a checkpoint: ", lines[0]));
  }
}

absl::Status LoadModuleArchive(const std::string& path, const std::string& arch,
                               int num_classes, const Classifier& model) {
  if (!std::ifstream(path)) {
    return absl::NotFoundError(absl::StrCat("cannot open the checkpoint '", path, "'"));
  }
  struct Expected {
    std::vector<int64_t> shape;
    c10::ScalarType dtype;
  };
  std::vector<Expected> expected;
  for (const auto& item : model->named_parameters()) {
    expected.push_back({item.value().sizes().vec(), item.value().scalar_type()});
  }
  for (const auto& item : model->named_buffers()) {
    expected.push_back({item.value().sizes().vec(), item.value().scalar_type()});
  }
  const std::string where = absl::StrCat("checkpoint '", path, "'");
  try {
    torch::serialize::InputArchive archive;
    absl::StatusOr<std::optional<CheckpointInfo>> saved = Open(archive, path, where);
    if (!saved.ok()) return saved.status();
    if (saved->has_value() &&
        ((*saved)->arch != arch || (*saved)->num_classes != num_classes)) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " holds ", (*saved)->arch, " with ", (*saved)->num_classes,
                       " classes, not ", arch, " with ", num_classes, " classes"));
    }
    model->load(archive);
  } catch (const c10::Error& e) {
    // LibTorch's first line says what failed ("No such serialized tensor ...").
    const std::vector<std::string> lines = absl::StrSplit(e.what_without_backtrace(), '\n');
    return absl::InvalidArgumentError(absl::StrCat(
        where, " cannot be loaded into ", arch, " with ", num_classes, " classes: ", lines[0]));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(where, " cannot be loaded: ", e.what()));
  }
  // InputArchive replaces each tensor by the saved one: check the shapes and
  // element types.
  std::vector<std::pair<std::string, torch::Tensor>> loaded;
  for (const auto& item : model->named_parameters()) loaded.emplace_back(item.key(), item.value());
  for (const auto& item : model->named_buffers()) loaded.emplace_back(item.key(), item.value());
  for (size_t i = 0; i < loaded.size() && i < expected.size(); ++i) {
    const torch::Tensor& t = loaded[i].second;
    if (t.sizes().vec() != expected[i].shape) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": tensor '", loaded[i].first, "' has shape ", TensorShapeString(t), " where ", arch,
          " with ", num_classes, " classes has [", absl::StrJoin(expected[i].shape, ", "), "]"));
    }
    if (t.scalar_type() != expected[i].dtype) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": tensor '", loaded[i].first, "' holds ",
                       c10::toString(t.scalar_type()), ", the model ",
                       c10::toString(expected[i].dtype)));
    }
  }
  return absl::OkStatus();
}

}  // namespace sophon
