#include "model/models.h"

#include <torch/serialize.h>

#include <cstdio>
#include <fstream>
#include <limits>
#include <optional>
#include <cstdint>
#include <exception>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "model/architectures.h"

namespace sophon {
namespace {

namespace nn = torch::nn;

// Ordinary LibTorch layers for the architectures (architectures.h).
struct PlainLayers {
  // The classifier base; `models` is always 1.
  class Base : public ClassifierImpl {
   public:
    explicit Base(int64_t /*models*/) {}
  };
  int64_t models = 1;

  nn::Conv2d Conv(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding,
                  bool bias, bool /*first*/) const {
    return nn::Conv2d(
        nn::Conv2dOptions(in, out, kernel).stride(stride).padding(padding).bias(bias));
  }
  nn::BatchNorm2d Norm(int64_t channels) const { return nn::BatchNorm2d(channels); }
  nn::Linear Linear(int64_t in, int64_t out) const { return nn::Linear(in, out); }
  torch::Tensor Flatten(const torch::Tensor& x) const { return torch::flatten(x, 1); }
};

// architectures::Init::kKaimingConvUnitNorm, torchvision's ResNet initialisation:
// kaiming_normal_(fan_out, relu) for every convolution, weight 1 and bias 0 for
// every batch norm. Linear layers keep LibTorch's default init, which is PyTorch's.
void InitConvAndBatchNorm(nn::Module& model) {
  for (const auto& module : model.modules(/*include_self=*/false)) {
    if (auto* conv = module->as<nn::Conv2d>()) {
      nn::init::kaiming_normal_(conv->weight, /*a=*/0, torch::kFanOut, torch::kReLU);
    } else if (auto* bn = module->as<nn::BatchNorm2d>()) {
      nn::init::constant_(bn->weight, 1);
      nn::init::constant_(bn->bias, 0);
    }
  }
}

using ModelSpec = architectures::Architecture<PlainLayers>;

// The registry's rows over ordinary layers.
const std::vector<ModelSpec>& Specs() { return architectures::Architectures<PlainLayers>(); }

const ModelSpec* FindSpec(const std::string& arch) {
  return architectures::FindArchitecture<PlainLayers>(arch);
}

}  // namespace

const std::vector<std::string>& ModelNames() {
  static const auto* names = [] {
    auto* result = new std::vector<std::string>;
    for (const ModelSpec& spec : Specs()) result->push_back(spec.name);
    return result;
  }();
  return *names;
}

int ModelMinInputSize(const std::string& arch) {
  const ModelSpec* spec = FindSpec(arch);
  return spec == nullptr ? 0 : spec->min_input_size;
}

int ModelFeatureSize(const std::string& arch) {
  const ModelSpec* spec = FindSpec(arch);
  return spec == nullptr ? 0 : spec->feature_size;
}

std::string ModelHeadName(const std::string& arch) {
  const ModelSpec* spec = FindSpec(arch);
  return spec == nullptr ? std::string() : spec->head;
}

std::vector<torch::Tensor> HeadParameters(const torch::nn::Module& model, const std::string& arch) {
  const std::string prefix = ModelHeadName(arch) + ".";
  std::vector<torch::Tensor> head;
  for (const auto& item : model.named_parameters()) {
    if (absl::StartsWith(item.key(), prefix)) head.push_back(item.value());
  }
  return head;
}

absl::Status CheckModelName(const std::string& arch) {
  if (FindSpec(arch) != nullptr) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("unknown model architecture '", arch,
                                                 "'; valid: ", absl::StrJoin(ModelNames(), ", ")));
}

absl::StatusOr<Classifier> MakeModel(const std::string& arch, int num_classes, double dropout) {
  if (absl::Status status = CheckModelName(arch); !status.ok()) return status;
  const ModelSpec* spec = FindSpec(arch);
  if (num_classes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_classes must be > 0 for ", arch, ", got ", num_classes));
  }
  try {
    Classifier model = spec->build(PlainLayers{}, num_classes, dropout);
    if (spec->init == architectures::Init::kKaimingConvUnitNorm) InitConvAndBatchNorm(*model);
    return model;
  } catch (const std::exception& e) {  // c10::Error derives from std::exception.
    return absl::InternalError(absl::StrCat("building ", arch, " failed: ", e.what()));
  }
}

namespace {

constexpr char kArchKey[] = "sophon_arch";
constexpr char kClassesKey[] = "sophon_num_classes";

std::string ShapeString(const torch::Tensor& t) {
  return absl::StrCat("[", absl::StrJoin(t.sizes(), ", "), "]");
}

}  // namespace

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

absl::Status SaveModel(const Classifier& model, const std::string& arch, int num_classes,
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

}  // namespace

absl::StatusOr<CheckpointInfo> ReadCheckpointInfo(const std::string& path) {
  if (!std::ifstream(path)) {
    return absl::NotFoundError(absl::StrCat("cannot open the checkpoint '", path, "'"));
  }
  const std::string where = absl::StrCat("checkpoint '", path, "'");
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(path);
    absl::StatusOr<std::optional<CheckpointInfo>> saved = SavedInfo(archive, where);
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

absl::Status LoadModel(const std::string& path, const std::string& arch, int num_classes,
                       const Classifier& model) {
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
    archive.load_from(path);
    absl::StatusOr<std::optional<CheckpointInfo>> saved = SavedInfo(archive, where);
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
          where, ": tensor '", loaded[i].first, "' has shape ", ShapeString(t), " where ", arch,
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
