// The architectures of sophon-train, written once over a layer kind `L`, and
// their registry (Architectures<L>(), at the end): each architecture declared
// once, with its facts and its builder. models.cc builds them from ordinary
// LibTorch layers (PlainLayers), and client/torch/fused_models.cc from fused
// layers that hold B models (FusedLayers), with the same submodule and
// parameter names, so that slot k of a fused array is an ordinary model tensor
// for tensor.
//
// A layer kind provides:
//   using Base = ...;                      // the module's base class, constructed from `models`
//   int64_t models;                        // B (1 for ordinary layers)
//   Conv(in, out, kernel, stride, padding, bias, first) -> conv module
//       (`first`: the layer reads the images, [N, 3, H, W], rather than activations)
//   Norm(channels) -> BatchNorm2d-like module
//   Linear(in, out) -> linear module on what Flatten returns
//   Flatten(x) -> the input of the classifier head from [N, B*C, h, w]
// Modules are a ModuleHolder or a shared_ptr of a module with forward(Tensor).
//
// Only the files of sophon_model and sophon_torch include this header: it pulls in LibTorch.
#ifndef SOPHON_MODEL_ARCHITECTURES_H_
#define SOPHON_MODEL_ARCHITECTURES_H_

#include <torch/nn.h>

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace sophon::architectures {

namespace nn = torch::nn;

inline nn::ReLU Relu() { return nn::ReLU(nn::ReLUOptions().inplace(true)); }

inline nn::MaxPool2d MaxPool(int64_t kernel, int64_t stride, int64_t padding = 0) {
  return nn::MaxPool2d(nn::MaxPool2dOptions(kernel).stride(stride).padding(padding));
}

template <typename L>
using ConvOf = decltype(std::declval<const L&>().Conv(0, 0, 0, 0, 0, false, false));
template <typename L>
using NormOf = decltype(std::declval<const L&>().Norm(0));
template <typename L>
using LinearOf = decltype(std::declval<const L&>().Linear(0, 0));

// torchvision.models.AlexNet (the "one weird trick" variant torchvision ships).
template <typename L>
class AlexNet final : public L::Base {
 public:
  AlexNet(const L& l, int num_classes, double dropout) : L::Base(l.models), layers_(l) {
    features_ = this->register_module(
        "features",
        nn::Sequential(l.Conv(3, 64, 11, 4, 2, true, /*first=*/true), Relu(), MaxPool(3, 2),
                       l.Conv(64, 192, 5, 1, 2, true, false), Relu(), MaxPool(3, 2),
                       l.Conv(192, 384, 3, 1, 1, true, false), Relu(),
                       l.Conv(384, 256, 3, 1, 1, true, false), Relu(),
                       l.Conv(256, 256, 3, 1, 1, true, false), Relu(), MaxPool(3, 2)));
    avgpool_ = this->register_module(
        "avgpool", nn::AdaptiveAvgPool2d(nn::AdaptiveAvgPool2dOptions({6, 6})));
    classifier_ = this->register_module(
        "classifier",
        nn::Sequential(nn::Dropout(dropout), l.Linear(256 * 6 * 6, 4096), Relu(),
                       nn::Dropout(dropout), l.Linear(4096, 4096), Relu(),
                       l.Linear(4096, num_classes)));
  }

  torch::Tensor forward(torch::Tensor x) override { return head(features(x)); }
  // The flattened pooled activations in front of the classifier (256 x 6 x 6).
  torch::Tensor features(torch::Tensor x) {
    return layers_.Flatten(avgpool_->forward(features_->forward(x)));
  }
  torch::Tensor head(torch::Tensor f) { return classifier_->forward(f); }

 private:
  const L layers_;
  nn::Sequential features_{nullptr};
  nn::AdaptiveAvgPool2d avgpool_{nullptr};
  nn::Sequential classifier_{nullptr};
};

// torchvision.models.resnet.BasicBlock (ResNet-18/34).
template <typename L>
class BasicBlock final : public nn::Module {
 public:
  static constexpr int64_t kExpansion = 1;

  // `downsample` may be empty (nullptr) when the shortcut is the identity.
  BasicBlock(const L& l, int64_t inplanes, int64_t planes, int64_t stride,
             nn::Sequential downsample) {
    conv1_ = register_module("conv1", l.Conv(inplanes, planes, 3, stride, 1, false, false));
    bn1_ = register_module("bn1", l.Norm(planes));
    conv2_ = register_module("conv2", l.Conv(planes, planes, 3, 1, 1, false, false));
    bn2_ = register_module("bn2", l.Norm(planes));
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
  ConvOf<L> conv1_{nullptr}, conv2_{nullptr};
  NormOf<L> bn1_{nullptr}, bn2_{nullptr};
  nn::Sequential downsample_{nullptr};
};

// torchvision.models.resnet.Bottleneck (ResNet V1.5: the stride sits on the
// 3x3 convolution). groups = 1, base_width = 64.
template <typename L>
class Bottleneck final : public nn::Module {
 public:
  static constexpr int64_t kExpansion = 4;

  Bottleneck(const L& l, int64_t inplanes, int64_t planes, int64_t stride,
             nn::Sequential downsample) {
    const int64_t width = planes;
    conv1_ = register_module("conv1", l.Conv(inplanes, width, 1, 1, 0, false, false));
    bn1_ = register_module("bn1", l.Norm(width));
    conv2_ = register_module("conv2", l.Conv(width, width, 3, stride, 1, false, false));
    bn2_ = register_module("bn2", l.Norm(width));
    conv3_ = register_module("conv3", l.Conv(width, planes * kExpansion, 1, 1, 0, false, false));
    bn3_ = register_module("bn3", l.Norm(planes * kExpansion));
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
  ConvOf<L> conv1_{nullptr}, conv2_{nullptr}, conv3_{nullptr};
  NormOf<L> bn1_{nullptr}, bn2_{nullptr}, bn3_{nullptr};
  nn::Sequential downsample_{nullptr};
};

// torchvision.models.ResNet with zero_init_residual = false.
template <typename L, template <typename> class Block>
class ResNet final : public L::Base {
 public:
  ResNet(const L& l, const std::array<int, 4>& layers, int num_classes)
      : L::Base(l.models), layers_(l) {
    conv1_ = this->register_module("conv1", l.Conv(3, 64, 7, 2, 3, false, /*first=*/true));
    bn1_ = this->register_module("bn1", l.Norm(64));
    maxpool_ = this->register_module("maxpool", MaxPool(3, 2, 1));
    layer1_ = this->register_module("layer1", MakeLayer(64, layers[0], 1));
    layer2_ = this->register_module("layer2", MakeLayer(128, layers[1], 2));
    layer3_ = this->register_module("layer3", MakeLayer(256, layers[2], 2));
    layer4_ = this->register_module("layer4", MakeLayer(512, layers[3], 2));
    avgpool_ = this->register_module(
        "avgpool", nn::AdaptiveAvgPool2d(nn::AdaptiveAvgPool2dOptions({1, 1})));
    fc_ = this->register_module("fc", l.Linear(512 * Block<L>::kExpansion, num_classes));
  }

  torch::Tensor forward(torch::Tensor x) override { return head(features(x)); }
  // The pooled activations in front of fc (512 x expansion).
  torch::Tensor features(torch::Tensor x) {
    x = maxpool_->forward(bn1_->forward(conv1_->forward(x)).relu_());
    x = layer4_->forward(layer3_->forward(layer2_->forward(layer1_->forward(x))));
    return layers_.Flatten(avgpool_->forward(x));
  }
  torch::Tensor head(torch::Tensor f) { return fc_->forward(f); }

 private:
  // torchvision's ResNet._make_layer; advances inplanes_.
  nn::Sequential MakeLayer(int64_t planes, int blocks, int64_t stride) {
    const int64_t out_planes = planes * Block<L>::kExpansion;
    nn::Sequential downsample{nullptr};
    if (stride != 1 || inplanes_ != out_planes) {
      downsample = nn::Sequential(layers_.Conv(inplanes_, out_planes, 1, stride, 0, false, false),
                                  layers_.Norm(out_planes));
    }
    nn::Sequential layer;
    layer->push_back(std::make_shared<Block<L>>(layers_, inplanes_, planes, stride, downsample));
    inplanes_ = out_planes;
    for (int i = 1; i < blocks; ++i) {
      layer->push_back(
          std::make_shared<Block<L>>(layers_, inplanes_, planes, 1, nn::Sequential(nullptr)));
    }
    return layer;
  }

  const L layers_;
  int64_t inplanes_ = 64;
  ConvOf<L> conv1_{nullptr};
  NormOf<L> bn1_{nullptr};
  nn::MaxPool2d maxpool_{nullptr};
  nn::Sequential layer1_{nullptr}, layer2_{nullptr}, layer3_{nullptr}, layer4_{nullptr};
  nn::AdaptiveAvgPool2d avgpool_{nullptr};
  LinearOf<L> fc_{nullptr};
};

// A small fast CNN for tests and CPU demos: three conv-BN-ReLU stages (32, 64,
// 128 channels; 2x2 max-pool after the first two), global average pool, linear.
template <typename L>
class TinyCnn final : public L::Base {
 public:
  TinyCnn(const L& l, int num_classes) : L::Base(l.models), layers_(l) {
    features_ = this->register_module(
        "features",
        nn::Sequential(l.Conv(3, 32, 3, 1, 1, false, /*first=*/true), l.Norm(32), Relu(),
                       MaxPool(2, 2), l.Conv(32, 64, 3, 1, 1, false, false), l.Norm(64), Relu(),
                       MaxPool(2, 2), l.Conv(64, 128, 3, 1, 1, false, false), l.Norm(128),
                       Relu(), nn::AdaptiveAvgPool2d(nn::AdaptiveAvgPool2dOptions({1, 1}))));
    fc_ = this->register_module("fc", l.Linear(128, num_classes));
  }

  torch::Tensor forward(torch::Tensor x) override { return head(features(x)); }
  torch::Tensor features(torch::Tensor x) { return layers_.Flatten(features_->forward(x)); }
  torch::Tensor head(torch::Tensor f) { return fc_->forward(f); }

 private:
  const L layers_;
  nn::Sequential features_{nullptr};
  LinearOf<L> fc_{nullptr};
};

// A tiny model without normalisation layers, for tests and demos that compare
// data-parallel ranks with one process trained on their combined batches
// (BatchNorm's batch statistics would differ): the image average-pooled to
// 4x4, then a two-layer perceptron 48 -> 64 (ReLU) -> classes. Its first
// layer is written as a 4x4 convolution over the 4x4 image (the same affine
// map as a linear layer on the flattened pixels), so that a fused array reads
// the shared images as every other architecture does.
template <typename L>
class TinyMlp final : public L::Base {
 public:
  TinyMlp(const L& l, int num_classes) : L::Base(l.models), layers_(l) {
    pool_ = this->register_module("pool",
                                  nn::AdaptiveAvgPool2d(nn::AdaptiveAvgPool2dOptions({4, 4})));
    hidden_ = this->register_module("hidden", l.Conv(3, 64, 4, 4, 0, true, /*first=*/true));
    fc_ = this->register_module("fc", l.Linear(64, num_classes));
  }

  torch::Tensor forward(torch::Tensor x) override { return head(features(x)); }
  torch::Tensor features(torch::Tensor x) {
    return layers_.Flatten(hidden_->forward(pool_->forward(x)).relu_());
  }
  torch::Tensor head(torch::Tensor f) { return fc_->forward(f); }

 private:
  const L layers_;
  nn::AdaptiveAvgPool2d pool_{nullptr};
  ConvOf<L> hidden_{nullptr};
  LinearOf<L> fc_{nullptr};
};

// How an ordinary model is initialised once its layers are built (a fused
// array is not: its slots are filled from ordinary models).
enum class Init {
  kLayerDefaults,  // LibTorch's defaults, which are PyTorch's
  // torchvision's ResNet initialisation: kaiming_normal_(fan_out, relu) for
  // every convolution, weight 1 and bias 0 for every batch norm (linear
  // layers keep the defaults).
  kKaimingConvUnitNorm,
};

// One architecture as the registry declares it.
template <typename L>
struct Architecture {
  const char* name;
  int min_input_size;  // the smallest image side (H and W) it accepts
  int feature_size;    // the length of features(x) per image
  const char* head;    // the submodule head() runs
  Init init;
  // Builds it over `layers` (before `init`); `dropout` is AlexNet's (the
  // others have none).
  std::shared_ptr<typename L::Base> (*build)(const L& layers, int num_classes, double dropout);
};

// The registry: every architecture, sorted by name, declared once here and
// read over either layer kind (the same rows, so the ordinary and the fused
// forms have the same names by construction). To add an architecture, write
// its template above and add its row.
template <typename L>
const std::vector<Architecture<L>>& Architectures() {
  using Built = std::shared_ptr<typename L::Base>;
  static const auto* table = new std::vector<Architecture<L>>{
      {"alexnet", 63, 256 * 6 * 6, "classifier", Init::kLayerDefaults,
       [](const L& l, int n, double dropout) -> Built {
         return std::make_shared<AlexNet<L>>(l, n, dropout);
       }},
      {"resnet18", 32, 512, "fc", Init::kKaimingConvUnitNorm,
       [](const L& l, int n, double) -> Built {
         return std::make_shared<ResNet<L, BasicBlock>>(l, std::array<int, 4>{2, 2, 2, 2}, n);
       }},
      {"resnet50", 32, 2048, "fc", Init::kKaimingConvUnitNorm,
       [](const L& l, int n, double) -> Built {
         return std::make_shared<ResNet<L, Bottleneck>>(l, std::array<int, 4>{3, 4, 6, 3}, n);
       }},
      {"tinycnn", 32, 128, "fc", Init::kKaimingConvUnitNorm,
       [](const L& l, int n, double) -> Built { return std::make_shared<TinyCnn<L>>(l, n); }},
      // The defaults: no normalisation to compensate for kaiming's fan_out.
      {"tinymlp", 32, 64, "fc", Init::kLayerDefaults,
       [](const L& l, int n, double) -> Built { return std::make_shared<TinyMlp<L>>(l, n); }},
  };
  return *table;
}

// The row of `name`, or nullptr for an unknown name.
template <typename L>
const Architecture<L>* FindArchitecture(const std::string& name) {
  for (const Architecture<L>& architecture : Architectures<L>()) {
    if (name == architecture.name) return &architecture;
  }
  return nullptr;
}

}  // namespace sophon::architectures

#endif  // SOPHON_MODEL_ARCHITECTURES_H_
