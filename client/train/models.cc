#include "client/train/models.h"

#include <torch/serialize.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <cstdint>
#include <exception>
#include <functional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace sophon {
namespace {

namespace nn = torch::nn;

nn::Conv2d Conv(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t padding,
                bool bias) {
  return nn::Conv2d(
      nn::Conv2dOptions(in, out, kernel).stride(stride).padding(padding).bias(bias));
}

nn::ReLU Relu() { return nn::ReLU(nn::ReLUOptions().inplace(true)); }

nn::MaxPool2d MaxPool(int64_t kernel, int64_t stride, int64_t padding = 0) {
  return nn::MaxPool2d(nn::MaxPool2dOptions(kernel).stride(stride).padding(padding));
}

// torchvision's ResNet initialisation: kaiming_normal_(fan_out, relu) for every
// convolution, weight 1 and bias 0 for every batch norm. Linear layers keep
// LibTorch's default init, which is PyTorch's.
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

// torchvision.models.AlexNet (the "one weird trick" variant torchvision ships).
// Keeps LibTorch's default init, as torchvision keeps PyTorch's.
class AlexNetImpl final : public ClassifierImpl {
 public:
  AlexNetImpl(int num_classes, double dropout) {
    features_ = register_module(
        "features", nn::Sequential(Conv(3, 64, 11, 4, 2, true), Relu(), MaxPool(3, 2),
                                   Conv(64, 192, 5, 1, 2, true), Relu(), MaxPool(3, 2),
                                   Conv(192, 384, 3, 1, 1, true), Relu(),
                                   Conv(384, 256, 3, 1, 1, true), Relu(),
                                   Conv(256, 256, 3, 1, 1, true), Relu(), MaxPool(3, 2)));
    avgpool_ = register_module("avgpool",
                               nn::AdaptiveAvgPool2d(nn::AdaptiveAvgPool2dOptions({6, 6})));
    classifier_ = register_module(
        "classifier",
        nn::Sequential(nn::Dropout(dropout), nn::Linear(256 * 6 * 6, 4096), Relu(),
                       nn::Dropout(dropout), nn::Linear(4096, 4096), Relu(),
                       nn::Linear(4096, num_classes)));
  }

  torch::Tensor forward(torch::Tensor x) override {
    x = avgpool_->forward(features_->forward(x));
    return classifier_->forward(torch::flatten(x, 1));
  }

 private:
  nn::Sequential features_{nullptr};
  nn::AdaptiveAvgPool2d avgpool_{nullptr};
  nn::Sequential classifier_{nullptr};
};

// torchvision.models.resnet.BasicBlock (ResNet-18/34).
class BasicBlockImpl final : public nn::Module {
 public:
  static constexpr int64_t kExpansion = 1;

  // `downsample` may be empty (nullptr) when the shortcut is the identity.
  BasicBlockImpl(int64_t inplanes, int64_t planes, int64_t stride, nn::Sequential downsample) {
    conv1_ = register_module("conv1", Conv(inplanes, planes, 3, stride, 1, false));
    bn1_ = register_module("bn1", nn::BatchNorm2d(planes));
    conv2_ = register_module("conv2", Conv(planes, planes, 3, 1, 1, false));
    bn2_ = register_module("bn2", nn::BatchNorm2d(planes));
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
  nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  nn::BatchNorm2d bn1_{nullptr}, bn2_{nullptr};
  nn::Sequential downsample_{nullptr};
};

// torchvision.models.resnet.Bottleneck (ResNet V1.5: the stride sits on the
// 3x3 convolution). groups = 1, base_width = 64.
class BottleneckImpl final : public nn::Module {
 public:
  static constexpr int64_t kExpansion = 4;

  BottleneckImpl(int64_t inplanes, int64_t planes, int64_t stride, nn::Sequential downsample) {
    const int64_t width = planes;
    conv1_ = register_module("conv1", Conv(inplanes, width, 1, 1, 0, false));
    bn1_ = register_module("bn1", nn::BatchNorm2d(width));
    conv2_ = register_module("conv2", Conv(width, width, 3, stride, 1, false));
    bn2_ = register_module("bn2", nn::BatchNorm2d(width));
    conv3_ = register_module("conv3", Conv(width, planes * kExpansion, 1, 1, 0, false));
    bn3_ = register_module("bn3", nn::BatchNorm2d(planes * kExpansion));
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
  nn::Conv2d conv1_{nullptr}, conv2_{nullptr}, conv3_{nullptr};
  nn::BatchNorm2d bn1_{nullptr}, bn2_{nullptr}, bn3_{nullptr};
  nn::Sequential downsample_{nullptr};
};

// torchvision.models.ResNet with zero_init_residual = false.
template <typename BlockImpl>
class ResNetImpl final : public ClassifierImpl {
 public:
  ResNetImpl(const std::array<int, 4>& layers, int num_classes) {
    conv1_ = register_module("conv1", Conv(3, 64, 7, 2, 3, false));
    bn1_ = register_module("bn1", nn::BatchNorm2d(64));
    maxpool_ = register_module("maxpool", MaxPool(3, 2, 1));
    layer1_ = register_module("layer1", MakeLayer(64, layers[0], 1));
    layer2_ = register_module("layer2", MakeLayer(128, layers[1], 2));
    layer3_ = register_module("layer3", MakeLayer(256, layers[2], 2));
    layer4_ = register_module("layer4", MakeLayer(512, layers[3], 2));
    avgpool_ = register_module("avgpool",
                               nn::AdaptiveAvgPool2d(nn::AdaptiveAvgPool2dOptions({1, 1})));
    fc_ = register_module("fc", nn::Linear(512 * BlockImpl::kExpansion, num_classes));
  }

  torch::Tensor forward(torch::Tensor x) override {
    x = maxpool_->forward(bn1_->forward(conv1_->forward(x)).relu_());
    x = layer4_->forward(layer3_->forward(layer2_->forward(layer1_->forward(x))));
    return fc_->forward(torch::flatten(avgpool_->forward(x), 1));
  }

 private:
  // torchvision's ResNet._make_layer; advances inplanes_.
  nn::Sequential MakeLayer(int64_t planes, int blocks, int64_t stride) {
    const int64_t out_planes = planes * BlockImpl::kExpansion;
    nn::Sequential downsample{nullptr};
    if (stride != 1 || inplanes_ != out_planes) {
      downsample = nn::Sequential(Conv(inplanes_, out_planes, 1, stride, 0, false),
                                  nn::BatchNorm2d(out_planes));
    }
    nn::Sequential layer;
    layer->push_back(std::make_shared<BlockImpl>(inplanes_, planes, stride, downsample));
    inplanes_ = out_planes;
    for (int i = 1; i < blocks; ++i) {
      layer->push_back(
          std::make_shared<BlockImpl>(inplanes_, planes, 1, nn::Sequential(nullptr)));
    }
    return layer;
  }

  int64_t inplanes_ = 64;
  nn::Conv2d conv1_{nullptr};
  nn::BatchNorm2d bn1_{nullptr};
  nn::MaxPool2d maxpool_{nullptr};
  nn::Sequential layer1_{nullptr}, layer2_{nullptr}, layer3_{nullptr}, layer4_{nullptr};
  nn::AdaptiveAvgPool2d avgpool_{nullptr};
  nn::Linear fc_{nullptr};
};

// A small fast CNN for tests and CPU demos: three conv-BN-ReLU stages (32, 64,
// 128 channels; 2x2 max-pool after the first two), global average pool, linear.
class TinyCnnImpl final : public ClassifierImpl {
 public:
  explicit TinyCnnImpl(int num_classes) {
    features_ = register_module(
        "features",
        nn::Sequential(Conv(3, 32, 3, 1, 1, false), nn::BatchNorm2d(32), Relu(), MaxPool(2, 2),
                       Conv(32, 64, 3, 1, 1, false), nn::BatchNorm2d(64), Relu(), MaxPool(2, 2),
                       Conv(64, 128, 3, 1, 1, false), nn::BatchNorm2d(128), Relu(),
                       nn::AdaptiveAvgPool2d(nn::AdaptiveAvgPool2dOptions({1, 1}))));
    fc_ = register_module("fc", nn::Linear(128, num_classes));
  }

  torch::Tensor forward(torch::Tensor x) override {
    return fc_->forward(torch::flatten(features_->forward(x), 1));
  }

 private:
  nn::Sequential features_{nullptr};
  nn::Linear fc_{nullptr};
};

struct ModelSpec {
  const char* name;
  int min_input_size;
  std::function<Classifier(int num_classes, double dropout)> build;
};

// Sorted by name.
const std::vector<ModelSpec>& Specs() {
  static const auto* specs = new std::vector<ModelSpec>{
      {"alexnet", 63, [](int n, double dropout) -> Classifier {
         return std::make_shared<AlexNetImpl>(n, dropout);
       }},
      {"resnet18", 32,
       [](int n, double) -> Classifier {
         auto model = std::make_shared<ResNetImpl<BasicBlockImpl>>(
             std::array<int, 4>{2, 2, 2, 2}, n);
         InitConvAndBatchNorm(*model);
         return model;
       }},
      {"resnet50", 32,
       [](int n, double) -> Classifier {
         auto model = std::make_shared<ResNetImpl<BottleneckImpl>>(
             std::array<int, 4>{3, 4, 6, 3}, n);
         InitConvAndBatchNorm(*model);
         return model;
       }},
      {"tinycnn", 32,
       [](int n, double) -> Classifier {
         auto model = std::make_shared<TinyCnnImpl>(n);
         InitConvAndBatchNorm(*model);
         return model;
       }},
  };
  return *specs;
}

const ModelSpec* FindSpec(const std::string& arch) {
  for (const ModelSpec& spec : Specs()) {
    if (arch == spec.name) return &spec;
  }
  return nullptr;
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
    return spec->build(num_classes, dropout);
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

absl::Status SaveModel(const Classifier& model, const std::string& arch, int num_classes,
                       const std::string& path) {
  const std::string temp = path + ".tmp";
  try {
    torch::serialize::OutputArchive archive;
    model->save(archive);
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
    c10::IValue saved_arch;
    c10::IValue saved_classes;
    if (archive.try_read(kArchKey, saved_arch) && archive.try_read(kClassesKey, saved_classes)) {
      if (!saved_arch.isString() || !saved_classes.isInt()) {
        return absl::InvalidArgumentError(absl::StrCat(where, ": malformed ", kArchKey));
      }
      if (saved_arch.toStringRef() != arch || saved_classes.toInt() != num_classes) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, " holds ", saved_arch.toStringRef(), " with ", saved_classes.toInt(),
            " classes, not ", arch, " with ", num_classes, " classes"));
      }
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

}  // namespace sophon
