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

}  // namespace sophon
