// Fused model arrays (HFTA, MLSys'21): B models of one architecture as one
// module, so that one forward/backward pass trains all of them on the same
// batch with the kernels of one bigger model.
//
// Layout. Every parameter and buffer of the fused array has the shape of the
// ordinary model's tensor of the same name with a leading dimension B: slice k
// is model k. Activations of the convolutional body are [N, B*C, H, W]
// (model k owns channels [k*C, (k+1)*C)): convolutions run as one grouped
// convolution (groups = B; the first one reads the shared input with B times
// the output channels and no groups), batch norm normalises B*C channels,
// pooling and ReLU work per channel as they are. The classifier head works on
// [B, N, F]: Linear is one baddbmm, dropout is elementwise. Logits are
// [B, N, classes].
//
// Only sophon_torch's files include this header: it pulls in LibTorch.
#ifndef SOPHON_CLIENT_TORCH_FUSED_MODELS_H_
#define SOPHON_CLIENT_TORCH_FUSED_MODELS_H_

#include <torch/nn.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "model/models.h"

namespace sophon {

// A fused array of classifiers: images [N, 3, H, W] -> logits [B, N, classes].
class FusedClassifierImpl : public torch::nn::Module {
 public:
  explicit FusedClassifierImpl(int64_t num_models) : num_models_(num_models) {}
  virtual torch::Tensor forward(torch::Tensor x) = 0;  // head(features(x))
  // The B classifier heads on features [B, N, F] (model k's in row k) ->
  // logits [B, N, classes].
  virtual torch::Tensor head(torch::Tensor features) = 0;
  int64_t num_models() const { return num_models_; }

 private:
  const int64_t num_models_;
};

using FusedClassifier = std::shared_ptr<FusedClassifierImpl>;

// The architectures with a fused implementation, sorted: every architecture
// of the registry (model/architectures.h), so ModelNames().
const std::vector<std::string>& FusedModelNames();

// OK when `arch` can be fused: CheckModelName's answer.
absl::Status CheckFusable(const std::string& arch);

// Builds an empty fused array of `num_models` >= 1 models of `arch` on the CPU
// (tensors allocated, not initialised: fill every slot with PackModel).
absl::StatusOr<FusedClassifier> MakeFusedModel(const std::string& arch, int num_classes,
                                               int num_models, double dropout = 0.5);

// Copies an ordinary model's parameters and buffers into slot k of `fused`
// (same architecture and class count, same device). InvalidArgument when a
// name or shape does not match.
absl::Status PackModel(const Classifier& model, int k, const FusedClassifier& fused);

// Copies slot k of `fused` into an ordinary model of the same architecture
// (built by MakeModel with the same class count, on the same device).
absl::Status UnpackModel(const FusedClassifier& fused, int k, const Classifier& model);

}  // namespace sophon

#endif  // SOPHON_CLIENT_TORCH_FUSED_MODELS_H_
