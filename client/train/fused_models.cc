#include "client/train/fused_models.h"

#include <array>
#include <exception>
#include <functional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

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

std::shared_ptr<FusedConv2dImpl> Conv(int64_t b, int64_t in, int64_t out, int64_t kernel,
                                      int64_t stride, int64_t padding, bool bias,
                                      bool shared_input = false) {
  return std::make_shared<FusedConv2dImpl>(b, in, out, kernel, stride, padding, bias,
                                           shared_input);
}

std::shared_ptr<FusedBatchNorm2dImpl> BatchNorm(int64_t b, int64_t channels) {
  return std::make_shared<FusedBatchNorm2dImpl>(b, channels);
}

std::shared_ptr<FusedLinearImpl> Linear(int64_t b, int64_t in, int64_t out) {
  return std::make_shared<FusedLinearImpl>(b, in, out);
}

nn::ReLU Relu() { return nn::ReLU(nn::ReLUOptions().inplace(true)); }

nn::MaxPool2d MaxPool(int64_t kernel, int64_t stride, int64_t padding = 0) {
  return nn::MaxPool2d(nn::MaxPool2dOptions(kernel).stride(stride).padding(padding));
}

// [N, B*C, h, w] -> [B, N, C*h*w]: each model's features flattened as
// torch::flatten(x, 1) flattens them in the ordinary model.
torch::Tensor ToModelMajor(const torch::Tensor& x, int64_t models) {
  return x.reshape({x.size(0), models, -1}).transpose(0, 1);
}

// The fused torchvision AlexNet (models.cc), with the same submodule indices.
class FusedAlexNetImpl final : public FusedClassifierImpl {
 public:
  FusedAlexNetImpl(int64_t b, int num_classes, double dropout) : FusedClassifierImpl(b) {
    features_ = register_module(
        "features",
        nn::Sequential(Conv(b, 3, 64, 11, 4, 2, true, /*shared_input=*/true), Relu(),
                       MaxPool(3, 2), Conv(b, 64, 192, 5, 1, 2, true), Relu(), MaxPool(3, 2),
                       Conv(b, 192, 384, 3, 1, 1, true), Relu(), Conv(b, 384, 256, 3, 1, 1, true),
                       Relu(), Conv(b, 256, 256, 3, 1, 1, true), Relu(), MaxPool(3, 2)));
    avgpool_ = register_module("avgpool",
                               nn::AdaptiveAvgPool2d(nn::AdaptiveAvgPool2dOptions({6, 6})));
    classifier_ = register_module(
        "classifier",
        nn::Sequential(nn::Dropout(dropout), Linear(b, 256 * 6 * 6, 4096), Relu(),
                       nn::Dropout(dropout), Linear(b, 4096, 4096), Relu(),
                       Linear(b, 4096, num_classes)));
  }

  torch::Tensor forward(torch::Tensor x) override {
    x = avgpool_->forward(features_->forward(x));
    return classifier_->forward(ToModelMajor(x, num_models()));
  }

 private:
  nn::Sequential features_{nullptr};
  nn::AdaptiveAvgPool2d avgpool_{nullptr};
  nn::Sequential classifier_{nullptr};
};

// Fused torchvision BasicBlock.
class FusedBasicBlockImpl final : public nn::Module {
 public:
  static constexpr int64_t kExpansion = 1;

  FusedBasicBlockImpl(int64_t b, int64_t inplanes, int64_t planes, int64_t stride,
                      nn::Sequential downsample) {
    conv1_ = register_module("conv1", Conv(b, inplanes, planes, 3, stride, 1, false));
    bn1_ = register_module("bn1", BatchNorm(b, planes));
    conv2_ = register_module("conv2", Conv(b, planes, planes, 3, 1, 1, false));
    bn2_ = register_module("bn2", BatchNorm(b, planes));
    if (downsample) downsample_ = register_module("downsample", std::move(downsample));
  }

  torch::Tensor forward(torch::Tensor x) {
    torch::Tensor identity = downsample_ ? downsample_->forward(x) : x;
    torch::Tensor out = bn1_->forward(conv1_->forward(x)).relu_();
    out = bn2_->forward(conv2_->forward(out));
    out += identity;
    return out.relu_();
  }

 private:
  std::shared_ptr<FusedConv2dImpl> conv1_, conv2_;
  std::shared_ptr<FusedBatchNorm2dImpl> bn1_, bn2_;
  nn::Sequential downsample_{nullptr};
};

// Fused torchvision Bottleneck (ResNet V1.5).
class FusedBottleneckImpl final : public nn::Module {
 public:
  static constexpr int64_t kExpansion = 4;

  FusedBottleneckImpl(int64_t b, int64_t inplanes, int64_t planes, int64_t stride,
                      nn::Sequential downsample) {
    conv1_ = register_module("conv1", Conv(b, inplanes, planes, 1, 1, 0, false));
    bn1_ = register_module("bn1", BatchNorm(b, planes));
    conv2_ = register_module("conv2", Conv(b, planes, planes, 3, stride, 1, false));
    bn2_ = register_module("bn2", BatchNorm(b, planes));
    conv3_ = register_module("conv3", Conv(b, planes, planes * kExpansion, 1, 1, 0, false));
    bn3_ = register_module("bn3", BatchNorm(b, planes * kExpansion));
    if (downsample) downsample_ = register_module("downsample", std::move(downsample));
  }

  torch::Tensor forward(torch::Tensor x) {
    torch::Tensor identity = downsample_ ? downsample_->forward(x) : x;
    torch::Tensor out = bn1_->forward(conv1_->forward(x)).relu_();
    out = bn2_->forward(conv2_->forward(out)).relu_();
    out = bn3_->forward(conv3_->forward(out));
    out += identity;
    return out.relu_();
  }

 private:
  std::shared_ptr<FusedConv2dImpl> conv1_, conv2_, conv3_;
  std::shared_ptr<FusedBatchNorm2dImpl> bn1_, bn2_, bn3_;
  nn::Sequential downsample_{nullptr};
};

// Fused torchvision ResNet.
template <typename BlockImpl>
class FusedResNetImpl final : public FusedClassifierImpl {
 public:
  FusedResNetImpl(int64_t b, const std::array<int, 4>& layers, int num_classes)
      : FusedClassifierImpl(b) {
    conv1_ = register_module("conv1", Conv(b, 3, 64, 7, 2, 3, false, /*shared_input=*/true));
    bn1_ = register_module("bn1", BatchNorm(b, 64));
    maxpool_ = register_module("maxpool", MaxPool(3, 2, 1));
    layer1_ = register_module("layer1", MakeLayer(64, layers[0], 1));
    layer2_ = register_module("layer2", MakeLayer(128, layers[1], 2));
    layer3_ = register_module("layer3", MakeLayer(256, layers[2], 2));
    layer4_ = register_module("layer4", MakeLayer(512, layers[3], 2));
    avgpool_ = register_module("avgpool",
                               nn::AdaptiveAvgPool2d(nn::AdaptiveAvgPool2dOptions({1, 1})));
    fc_ = register_module("fc", Linear(b, 512 * BlockImpl::kExpansion, num_classes));
  }

  torch::Tensor forward(torch::Tensor x) override {
    x = maxpool_->forward(bn1_->forward(conv1_->forward(x)).relu_());
    x = layer4_->forward(layer3_->forward(layer2_->forward(layer1_->forward(x))));
    return fc_->forward(ToModelMajor(avgpool_->forward(x), num_models()));
  }

 private:
  nn::Sequential MakeLayer(int64_t planes, int blocks, int64_t stride) {
    const int64_t b = num_models();
    const int64_t out_planes = planes * BlockImpl::kExpansion;
    nn::Sequential downsample{nullptr};
    if (stride != 1 || inplanes_ != out_planes) {
      downsample =
          nn::Sequential(Conv(b, inplanes_, out_planes, 1, stride, 0, false), BatchNorm(b, out_planes));
    }
    nn::Sequential layer;
    layer->push_back(std::make_shared<BlockImpl>(b, inplanes_, planes, stride, downsample));
    inplanes_ = out_planes;
    for (int i = 1; i < blocks; ++i) {
      layer->push_back(
          std::make_shared<BlockImpl>(b, inplanes_, planes, 1, nn::Sequential(nullptr)));
    }
    return layer;
  }

  int64_t inplanes_ = 64;
  std::shared_ptr<FusedConv2dImpl> conv1_;
  std::shared_ptr<FusedBatchNorm2dImpl> bn1_;
  nn::MaxPool2d maxpool_{nullptr};
  nn::Sequential layer1_{nullptr}, layer2_{nullptr}, layer3_{nullptr}, layer4_{nullptr};
  nn::AdaptiveAvgPool2d avgpool_{nullptr};
  std::shared_ptr<FusedLinearImpl> fc_;
};

// Fused tinycnn.
class FusedTinyCnnImpl final : public FusedClassifierImpl {
 public:
  FusedTinyCnnImpl(int64_t b, int num_classes) : FusedClassifierImpl(b) {
    features_ = register_module(
        "features",
        nn::Sequential(Conv(b, 3, 32, 3, 1, 1, false, /*shared_input=*/true), BatchNorm(b, 32),
                       Relu(), MaxPool(2, 2), Conv(b, 32, 64, 3, 1, 1, false), BatchNorm(b, 64),
                       Relu(), MaxPool(2, 2), Conv(b, 64, 128, 3, 1, 1, false),
                       BatchNorm(b, 128), Relu(),
                       nn::AdaptiveAvgPool2d(nn::AdaptiveAvgPool2dOptions({1, 1}))));
    fc_ = register_module("fc", Linear(b, 128, num_classes));
  }

  torch::Tensor forward(torch::Tensor x) override {
    return fc_->forward(ToModelMajor(features_->forward(x), num_models()));
  }

 private:
  nn::Sequential features_{nullptr};
  std::shared_ptr<FusedLinearImpl> fc_;
};

struct FusedSpec {
  const char* name;
  std::function<FusedClassifier(int64_t models, int num_classes, double dropout)> build;
};

// Sorted by name. An architecture of ModelNames() missing here cannot be fused.
const std::vector<FusedSpec>& FusedSpecs() {
  static const auto* specs = new std::vector<FusedSpec>{
      {"alexnet",
       [](int64_t b, int n, double dropout) -> FusedClassifier {
         return std::make_shared<FusedAlexNetImpl>(b, n, dropout);
       }},
      {"resnet18",
       [](int64_t b, int n, double) -> FusedClassifier {
         return std::make_shared<FusedResNetImpl<FusedBasicBlockImpl>>(
             b, std::array<int, 4>{2, 2, 2, 2}, n);
       }},
      {"resnet50",
       [](int64_t b, int n, double) -> FusedClassifier {
         return std::make_shared<FusedResNetImpl<FusedBottleneckImpl>>(
             b, std::array<int, 4>{3, 4, 6, 3}, n);
       }},
      {"tinycnn",
       [](int64_t b, int n, double) -> FusedClassifier {
         return std::make_shared<FusedTinyCnnImpl>(b, n);
       }},
  };
  return *specs;
}

const FusedSpec* FindFusedSpec(const std::string& arch) {
  for (const FusedSpec& spec : FusedSpecs()) {
    if (arch == spec.name) return &spec;
  }
  return nullptr;
}

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

const std::vector<std::string>& FusedModelNames() {
  static const auto* names = [] {
    auto* result = new std::vector<std::string>;
    for (const FusedSpec& spec : FusedSpecs()) result->push_back(spec.name);
    return result;
  }();
  return *names;
}

absl::Status CheckFusable(const std::string& arch) {
  if (absl::Status status = CheckModelName(arch); !status.ok()) return status;
  if (FindFusedSpec(arch) != nullptr) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("model architecture '", arch,
                                                 "' has no fused implementation; fusable: ",
                                                 absl::StrJoin(FusedModelNames(), ", ")));
}

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
    return FindFusedSpec(arch)->build(num_models, num_classes, dropout);
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
