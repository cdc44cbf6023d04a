#include "client/train/backbone.h"

#include <torch/utils.h>

#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/train/models.h"

namespace sophon {

struct Backbone::Model {
  Classifier net;
};

absl::Status BackboneOptions::Validate() const {
  if (checkpoint.empty()) {
    return absl::InvalidArgumentError("BackboneOptions.checkpoint is required");
  }
  if (threads < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("BackboneOptions.threads must be >= 0, got ", threads));
  }
  return absl::OkStatus();
}

Backbone::~Backbone() = default;

namespace {

// FNV-1a over the name, shape and bytes of the parameters and buffers of
// `net` inside its head (`head`) or outside it.
uint64_t TensorsFingerprint(const Classifier& net, const std::string& arch, bool head) {
  uint64_t hash = 14695981039346656037ull;  // FNV-1a, 64 bits
  const auto add = [&hash](const void* data, size_t bytes) {
    const auto* p = static_cast<const unsigned char*>(data);
    for (size_t i = 0; i < bytes; ++i) hash = (hash ^ p[i]) * 1099511628211ull;
  };
  const std::string prefix = ModelHeadName(arch) + ".";
  const auto add_all = [&](const torch::OrderedDict<std::string, torch::Tensor>& tensors) {
    for (const auto& item : tensors) {
      if (absl::StartsWith(item.key(), prefix) != head) continue;
      add(item.key().data(), item.key().size() + 1);
      const torch::Tensor t = item.value().detach().to(torch::kCPU).contiguous();
      for (int64_t d : t.sizes()) add(&d, sizeof(d));
      add(t.data_ptr(), t.numel() * t.element_size());
    }
  };
  add_all(net->named_parameters());
  add_all(net->named_buffers());
  return hash;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Backbone>> Backbone::Load(const BackboneOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  absl::StatusOr<FrozenModel> frozen = LoadFrozenModel(options.checkpoint);
  if (!frozen.ok()) return frozen.status();
  const CheckpointInfo* info = &frozen->info;
  if (options.threads > 0) torch::set_num_threads(options.threads);
  std::unique_ptr<Backbone> backbone(new Backbone());
  backbone->model_ = std::make_unique<Model>(Model{frozen->net});
  backbone->arch_ = info->arch;
  backbone->num_classes_ = info->num_classes;
  backbone->feature_size_ = ModelFeatureSize(info->arch);
  backbone->fingerprint_ = TensorsFingerprint(frozen->net, info->arch, /*head=*/false);
  backbone->head_fingerprint_ = TensorsFingerprint(frozen->net, info->arch, /*head=*/true);
  backbone->min_input_size_ = ModelMinInputSize(info->arch);
  backbone->description_ = absl::StrCat(info->arch, " (", info->num_classes, " classes) from ",
                                        options.checkpoint);
  return backbone;
}

absl::Status Backbone::Extract(const float* images, int n, int s, float* out) const {
  if (n < 0) return absl::InvalidArgumentError(absl::StrCat("negative image count ", n));
  if (n == 0) return absl::OkStatus();
  if (s < min_input_size_) {
    return absl::InvalidArgumentError(absl::StrCat("images of ", s, " x ", s, " are too small for ",
                                                   arch_, " (at least ", min_input_size_, ")"));
  }
  // from_blob does not copy; the forward pass only reads its input.
  const torch::Tensor input =
      torch::from_blob(const_cast<float*>(images), {n, 3, s, s}, torch::kFloat32);
  std::lock_guard<std::mutex> lock(mu_);
  torch::NoGradGuard no_grad;
  torch::Tensor features;
  try {
    features = model_->net->features(input).contiguous();
  } catch (const c10::Error& e) {  // never thrown across the library boundary
    const std::string what = e.what_without_backtrace();
    return absl::InternalError(absl::StrCat(arch_, " forward pass on ", n, " images of ", s,
                                            " x ", s, " failed: ", what.substr(0, what.find('\n'))));
  }
  if (features.dim() != 2 || features.size(0) != n || features.size(1) != feature_size_) {
    return absl::InternalError(absl::StrCat(arch_, " features have shape [",
                                            absl::StrJoin(features.sizes(), ", "), "], expected [",
                                            n, ", ", feature_size_, "]"));
  }
  std::memcpy(out, features.data_ptr<float>(), sizeof(float) * n * feature_size_);
  return absl::OkStatus();
}

absl::Status Backbone::Classify(const float* features, int n, float* out) const {
  if (n < 0) return absl::InvalidArgumentError(absl::StrCat("negative feature count ", n));
  if (n == 0) return absl::OkStatus();
  const torch::Tensor input =
      torch::from_blob(const_cast<float*>(features), {n, feature_size_}, torch::kFloat32);
  std::lock_guard<std::mutex> lock(mu_);
  torch::NoGradGuard no_grad;
  torch::Tensor logits;
  try {
    logits = model_->net->head(input).contiguous();
  } catch (const c10::Error& e) {  // never thrown across the library boundary
    const std::string what = e.what_without_backtrace();
    return absl::InternalError(absl::StrCat(arch_, " head on ", n, " feature vectors failed: ",
                                            what.substr(0, what.find('\n'))));
  }
  if (logits.dim() != 2 || logits.size(0) != n || logits.size(1) != num_classes_) {
    return absl::InternalError(absl::StrCat(arch_, " logits have shape [",
                                            absl::StrJoin(logits.sizes(), ", "), "], expected [",
                                            n, ", ", num_classes_, "]"));
  }
  std::memcpy(out, logits.data_ptr<float>(), sizeof(float) * n * num_classes_);
  return absl::OkStatus();
}

}  // namespace sophon
