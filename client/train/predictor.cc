#include "client/train/predictor.h"

#include <algorithm>

#include <torch/nn/functional.h>
#include <torch/utils.h>

#include "absl/strings/str_cat.h"
#include "client/train/models.h"
#include "client/train/torch_step.h"

namespace sophon {

struct Predictor::Model {
  Classifier net;
};

absl::Status PredictorOptions::Validate() const {
  if (checkpoint.empty()) {
    return absl::InvalidArgumentError("PredictorOptions.checkpoint is required");
  }
  if (top_k < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("PredictorOptions.top_k must be >= 1, got ", top_k));
  }
  return absl::OkStatus();
}

Predictor::~Predictor() = default;

absl::StatusOr<std::unique_ptr<Predictor>> Predictor::Load(const PredictorOptions& options) {
  if (absl::Status s = options.Validate(); !s.ok()) return s;
  absl::StatusOr<FrozenModel> frozen = LoadFrozenModel(options.checkpoint);
  if (!frozen.ok()) return frozen.status();
  const CheckpointInfo* info = &frozen->info;
  std::unique_ptr<Predictor> predictor(new Predictor());
  predictor->model_ = std::make_unique<Model>(Model{frozen->net});
  predictor->arch_ = info->arch;
  predictor->num_classes_ = info->num_classes;
  predictor->top_k_ = std::min(options.top_k, info->num_classes);
  return predictor;
}

absl::StatusOr<std::vector<Prediction>> Predictor::Predict(const Batch& batch) const {
  const bool features = batch.stage == Stage::kFeatures;
  if (!features && batch.stage != Stage::kTensor) {
    return absl::InvalidArgumentError(absl::StrCat("batch ", batch.index, ": predictions take ",
                                                   StageName(Stage::kTensor), " or ",
                                                   StageName(Stage::kFeatures), " batches, got ",
                                                   StageName(batch.stage)));
  }
  if (batch.n == 0) return std::vector<Prediction>();
  // The shape checks of ValidateBatch without its labels (those of another
  // dataset may be anything).
  const bool shape_ok =
      batch.n > 0 && batch.h >= 1 && batch.w >= 1 &&
      (features ? batch.c == ModelFeatureSize(arch_) && batch.h == 1 && batch.w == 1
                : batch.c == 3 && batch.h >= ModelMinInputSize(arch_) &&
                      batch.w >= ModelMinInputSize(arch_)) &&
      batch.images.size() == static_cast<uint64_t>(batch.n) * batch.c * batch.h * batch.w;
  if (!shape_ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "batch ", batch.index, ": ", batch.n, " samples of ", batch.c, "x", batch.h, "x", batch.w,
        " in ", batch.images.size(), " floats do not fit ", arch_, " (",
        features ? absl::StrCat(ModelFeatureSize(arch_), " features")
                 : absl::StrCat("3-channel images of at least ", ModelMinInputSize(arch_)),
        ")"));
  }
  torch::NoGradGuard no_grad;
  try {
    const torch::Tensor x = torch::from_blob(const_cast<float*>(batch.images.data()),
                                             {batch.n, batch.c, batch.h, batch.w}, torch::kFloat32);
    const torch::Tensor logits =
        features ? model_->net->head(x.reshape({batch.n, -1})) : model_->net->forward(x);
    const auto [probs, labels] = torch::softmax(logits, 1).topk(top_k_, 1);
    const torch::Tensor p = probs.contiguous(), l = labels.to(torch::kLong).contiguous();
    std::vector<Prediction> out(static_cast<size_t>(batch.n));
    for (int i = 0; i < batch.n; ++i) {
      for (int k = 0; k < top_k_; ++k) {
        out[i].labels.push_back(static_cast<int>(l[i][k].item<int64_t>()));
        out[i].probabilities.push_back(p[i][k].item<float>());
      }
    }
    return out;
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("predicting batch ", batch.index, " with ", arch_,
                                            ": ", ExceptionText(e)));
  }
}

}  // namespace sophon
