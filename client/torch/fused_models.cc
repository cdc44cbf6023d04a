#include "client/torch/fused_models.h"

#include <exception>
#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/architectures.h"

namespace sophon {
namespace {

namespace nn = torch::nn;

// B convolutions with the same shape as one: weight [B, out, in, k, k],
// bias [B, out]. Input [N, B*in, H, W] (grouped, groups = B) or, for the
// first layer, the shared input [N, in, H, W] (one convolution with B*out
// output channels: the same result as B convolutions of the same images).
class FusedConv2dImpl final : public nn::Module {
 public:
  FusedConv2dImpl(int64_t models, int64_t in, int64_t out, int64_t kernel, int64_t stride,
                  int64_t padding, bool bias, bool shared_input)
      : models_(models), stride_(stride), padding_(padding), shared_input_(shared_input) {
    weight_ = register_parameter("weight", torch::empty({models, out, in, kernel, kernel}));
    if (bias) bias_ = register_parameter("bias", torch::empty({models, out}));
  }

  torch::Tensor forward(torch::Tensor x) {
    const auto w = weight_.sizes();
    torch::Tensor weight = weight_.view({models_ * w[1], w[2], w[3], w[4]});
    torch::Tensor bias = bias_.defined() ? bias_.view({-1}) : torch::Tensor();
    return torch::conv2d(x, weight, bias, {stride_, stride_}, {padding_, padding_}, {1, 1},
                         shared_input_ ? 1 : models_);
  }

 private:
  const int64_t models_, stride_, padding_;
  const bool shared_input_;
  torch::Tensor weight_, bias_;
};

// B BatchNorm2d layers over [N, B*C, H, W]: weight, bias, running_mean and
// running_var [B, C], num_batches_tracked [B]; momentum 0.1 and eps 1e-5 as
// nn::BatchNorm2d's defaults.
class FusedBatchNorm2dImpl final : public nn::Module {
 public:
  FusedBatchNorm2dImpl(int64_t models, int64_t channels) {
    weight_ = register_parameter("weight", torch::empty({models, channels}));
    bias_ = register_parameter("bias", torch::empty({models, channels}));
    running_mean_ = register_buffer("running_mean", torch::zeros({models, channels}));
    running_var_ = register_buffer("running_var", torch::ones({models, channels}));
    num_batches_tracked_ =
        register_buffer("num_batches_tracked", torch::zeros({models}, torch::kLong));
  }

  torch::Tensor forward(torch::Tensor x) {
    if (is_training()) num_batches_tracked_ += 1;
    // The views share the buffers' storage: batch_norm updates them in place.
    return nn::functional::detail::batch_norm(x, running_mean_.view({-1}), running_var_.view({-1}),
                                              weight_.view({-1}), bias_.view({-1}), is_training(),
                                              /*momentum=*/0.1, /*eps=*/1e-5);
  }

 private:
  torch::Tensor weight_, bias_, running_mean_, running_var_, num_batches_tracked_;
};

// B Linear layers on [B, N, in] -> [B, N, out]: weight [B, out, in], bias
// [B, out], one batched matrix product.
class FusedLinearImpl final : public nn::Module {
 public:
  FusedLinearImpl(int64_t models, int64_t in, int64_t out) {
    weight_ = register_parameter("weight", torch::empty({models, out, in}));
    bias_ = register_parameter("bias", torch::empty({models, out}));
  }

  torch::Tensor forward(torch::Tensor x) {
    return torch::baddbmm(bias_.unsqueeze(1), x, weight_.transpose(1, 2));
  }

 private:
  torch::Tensor weight_, bias_;
};

// Fused layers for the architectures (architectures.h): B models in each.
struct FusedLayers {
  using Base = FusedClassifierImpl;
  int64_t models;

  std::shared_ptr<FusedConv2dImpl> Conv(int64_t in, int64_t out, int64_t kernel, int64_t stride,
                                        int64_t padding, bool bias, bool first) const {
    return std::make_shared<FusedConv2dImpl>(models, in, out, kernel, stride, padding, bias,
                                             /*shared_input=*/first);
  }
  std::shared_ptr<FusedBatchNorm2dImpl> Norm(int64_t channels) const {
    return std::make_shared<FusedBatchNorm2dImpl>(models, channels);
  }
  std::shared_ptr<FusedLinearImpl> Linear(int64_t in, int64_t out) const {
    return std::make_shared<FusedLinearImpl>(models, in, out);
  }
  // [N, B*C, h, w] -> [B, N, C*h*w]: each model's features flattened as
  // torch::flatten(x, 1) flattens them in the ordinary model.
  torch::Tensor Flatten(const torch::Tensor& x) const {
    return x.reshape({x.size(0), models, -1}).transpose(0, 1);
  }
};

// Every parameter, then every buffer, by name.
std::vector<std::pair<std::string, torch::Tensor>> NamedTensors(const nn::Module& module) {
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  for (const auto& item : module.named_parameters()) tensors.emplace_back(item.key(), item.value());
  for (const auto& item : module.named_buffers()) tensors.emplace_back(item.key(), item.value());
  return tensors;
}

// Calls copy(fused slot k, model tensor) for each pair of tensors of the same
// name, after checking that the two modules have the same names and shapes.
absl::Status ForEachSlot(const FusedClassifier& fused, int k, const Classifier& model,
                         const std::function<void(torch::Tensor, torch::Tensor)>& copy) {
  if (k < 0 || k >= fused->num_models()) {
    return absl::InvalidArgumentError(absl::StrCat("model index ", k, " is outside the fused array of ",
                                                   fused->num_models()));
  }
  const auto fused_tensors = NamedTensors(*fused);
  const auto model_tensors = NamedTensors(*model);
  if (fused_tensors.size() != model_tensors.size()) {
    return absl::InvalidArgumentError(absl::StrCat("the fused array has ", fused_tensors.size(),
                                                   " tensors, the model ", model_tensors.size()));
  }
  for (size_t i = 0; i < fused_tensors.size(); ++i) {
    const auto& [fused_name, fused_tensor] = fused_tensors[i];
    const auto& [model_name, model_tensor] = model_tensors[i];
    if (fused_name != model_name || fused_tensor.dim() != model_tensor.dim() + 1 ||
        !fused_tensor.sizes().slice(1).equals(model_tensor.sizes())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "fused tensor '", fused_name, "' [", absl::StrJoin(fused_tensor.sizes(), ", "),
          "] does not match the model's '", model_name, "' [",
          absl::StrJoin(model_tensor.sizes(), ", "), "]"));
    }
  }
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < fused_tensors.size(); ++i) {
    copy(fused_tensors[i].second[k], model_tensors[i].second);
  }
  return absl::OkStatus();
}

}  // namespace

// Every architecture of the registry has a fused form.
const std::vector<std::string>& FusedModelNames() { return ModelNames(); }

absl::Status CheckFusable(const std::string& arch) { return CheckModelName(arch); }

absl::StatusOr<FusedClassifier> MakeFusedModel(const std::string& arch, int num_classes,
                                               int num_models, double dropout) {
  if (absl::Status status = CheckFusable(arch); !status.ok()) return status;
  if (num_classes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_classes must be > 0 for ", arch, ", got ", num_classes));
  }
  if (num_models < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("a fused array holds at least 1 model, got ", num_models));
  }
  try {
    // The registry's row (model/architectures.h) over fused layers.
    return architectures::FindArchitecture<FusedLayers>(arch)->build(FusedLayers{num_models},
                                                                      num_classes, dropout);
  } catch (const std::exception& e) {  // c10::Error derives from std::exception.
    return absl::InternalError(
        absl::StrCat("building a fused array of ", num_models, " ", arch, " failed: ", e.what()));
  }
}

absl::Status PackModel(const Classifier& model, int k, const FusedClassifier& fused) {
  return ForEachSlot(fused, k, model,
                     [](torch::Tensor slot, torch::Tensor t) { slot.copy_(t); });
}

absl::Status UnpackModel(const FusedClassifier& fused, int k, const Classifier& model) {
  return ForEachSlot(fused, k, model,
                     [](torch::Tensor slot, torch::Tensor t) { t.copy_(slot); });
}

}  // namespace sophon
