#include "sophon/model/backbone.h"

#include <torch/utils.h>

#include <cstring>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "model/models.h"

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

// Runs `forward` (under the caller's lock, without gradients) and copies its
// [n, cols] float32 result to `out`. `what()` names the pass in errors (built
// only for one).
template <typename Forward, typename What>
absl::Status RunInto(const Forward& forward, int n, int cols, const What& what, float* out) {
  torch::NoGradGuard no_grad;
  torch::Tensor result;
  try {
    result = forward().contiguous();
  } catch (const c10::Error& e) {  // never thrown across the library boundary
    const std::string text = e.what_without_backtrace();
    return absl::InternalError(
        absl::StrCat(what(), " failed: ", text.substr(0, text.find('\n'))));
  }
  if (result.dim() != 2 || result.size(0) != n || result.size(1) != cols) {
    return absl::InternalError(absl::StrCat(what(), " gave shape [",
                                            absl::StrJoin(result.sizes(), ", "), "], expected [",
                                            n, ", ", cols, "]"));
  }
  std::memcpy(out, result.data_ptr<float>(), sizeof(float) * n * cols);
  return absl::OkStatus();
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
  return RunInto([&] { return model_->net->features(input); }, n, feature_size_,
                 [&] {
                   return absl::StrCat(arch_, " forward pass on ", n, " images of ", s, " x ", s);
                 },
                 out);
}

absl::Status Backbone::Classify(const float* features, int n, float* out) const {
  if (n < 0) return absl::InvalidArgumentError(absl::StrCat("negative feature count ", n));
  if (n == 0) return absl::OkStatus();
  const torch::Tensor input =
      torch::from_blob(const_cast<float*>(features), {n, feature_size_}, torch::kFloat32);
  std::lock_guard<std::mutex> lock(mu_);
  return RunInto([&] { return model_->net->head(input); }, n, num_classes_,
                 [&] { return absl::StrCat(arch_, " head on ", n, " feature vectors"); }, out);
}

}  // namespace sophon
