// Image classifiers for sophon-train, written with LibTorch's C++ API.
//
// AlexNet, ResNet-18 and ResNet-50 follow torchvision's definitions layer for
// layer (same shapes, same initialisation, same submodule names, so the
// parameter names match torchvision's state_dict keys). `tinycnn` is a small
// CNN for tests and CPU demos; `tinymlp` a tinier model without BatchNorm, for
// tests that compare data-parallel ranks with one process.
//
// Only the files of sophon_model and sophon_torch include this header: it pulls in LibTorch.
#ifndef SOPHON_MODEL_MODELS_H_
#define SOPHON_MODEL_MODELS_H_

#include <torch/nn.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace sophon {

// A classifier: float32 images [N, 3, H, W] -> logits [N, num_classes].
// Every architecture ends in adaptive average pooling, so H and W may be any
// size >= ModelMinInputSize(arch).
class ClassifierImpl : public torch::nn::Module {
 public:
  virtual torch::Tensor forward(torch::Tensor x) = 0;  // head(features(x))
  // The activations in front of the classifier, pooled and flattened:
  // [N, ModelFeatureSize(arch)] (what a frozen backbone hands a new head).
  virtual torch::Tensor features(torch::Tensor x) = 0;
  // The classifier on features(x).
  virtual torch::Tensor head(torch::Tensor features) = 0;
};

using Classifier = std::shared_ptr<ClassifierImpl>;

// The architecture names MakeModel accepts, sorted.
const std::vector<std::string>& ModelNames();

// OK when `arch` is in ModelNames(); otherwise InvalidArgument naming `arch`
// and listing the valid names. Cheap: builds nothing.
absl::Status CheckModelName(const std::string& arch);

// The smallest image side (H and W) the architecture accepts, or 0 for an
// unknown name. AlexNet's stride-4 stem and three 3x3/2 max-pools need 63;
// the others accept 32 (and smaller, but 32 is the supported floor).
int ModelMinInputSize(const std::string& arch);

// The length of features(x) for the architecture (resnet18: 512, resnet50:
// 2048, alexnet: 9216 = 256 x 6 x 6, tinycnn: 128, tinymlp: 64), or 0 for an
// unknown name.
int ModelFeatureSize(const std::string& arch);

// The submodule that head() runs ("fc"; AlexNet's "classifier"), or "" for
// an unknown name.
std::string ModelHeadName(const std::string& arch);
// The parameters of a model's head (those under ModelHeadName(arch)); a
// fused array's too, whose parameters have the same names.
std::vector<torch::Tensor> HeadParameters(const torch::nn::Module& model, const std::string& arch);

// Builds an architecture from ModelNames() on the CPU, initialised from
// LibTorch's global generator (seed it with torch::manual_seed first).
// `dropout` is AlexNet's dropout probability (the others have none).
// Returns InvalidArgument, naming the valid architectures, for an unknown arch
// or a non-positive num_classes.
absl::StatusOr<Classifier> MakeModel(const std::string& arch, int num_classes,
                                     double dropout = 0.5);

// Model checkpoints: torch.save's format (checkpoint_file.h), a dict with
// the architecture's name ("arch"), its class count ("num_classes") and the
// state_dict under torchvision's names ("model"), so that loading into another
// model fails with a clear error instead of reshaping tensors, and Python
// loads it with torch.load(path)["model"] into torchvision's model.
// Checkpoints of earlier versions (LibTorch's module archive,
// module_archive.h) are read too.
//
// Writes `model` to `path` (the old file or the whole new one): CPU copies of
// its tensors, the model staying on its device.
absl::Status SaveModel(const Classifier& model, const std::string& arch, int num_classes,
                       const std::string& path);
// What a checkpoint says it holds.
struct CheckpointInfo {
  std::string arch;
  int num_classes = 0;
};
// Reads the architecture and class count of a checkpoint written by
// SaveModel, without loading the model into one. NotFound for a missing file;
// InvalidArgument naming the file when it is not such a checkpoint.
absl::StatusOr<CheckpointInfo> ReadCheckpointInfo(const std::string& path);

// Loads `path` into `model` (built for `arch` and `num_classes`, on the CPU).
// NotFound for a missing file; InvalidArgument naming the file when it is not
// a checkpoint, or holds another architecture, class count or tensor shape.
absl::Status LoadModel(const std::string& path, const std::string& arch, int num_classes,
                       const Classifier& model);

// A checkpoint's network for inference or as a frozen backbone: built as the
// checkpoint says (dropout 0), loaded, in evaluation mode, its parameters
// without gradients. Errors as ReadCheckpointInfo and LoadModel.
struct FrozenModel {
  Classifier net;
  CheckpointInfo info;
};
absl::StatusOr<FrozenModel> LoadFrozenModel(const std::string& path);

// The model to fine-tune from checkpoint `path`: `arch` with `num_classes`
// classes, every tensor from the checkpoint; when the checkpoint has another
// class count, a new head: the head's tensors whose shapes differ (its last
// layer) keep their initialisation from LibTorch's generator (seed it first),
// and *new_head (if given) is set. InvalidArgument naming the file for
// another architecture or a bad checkpoint; NotFound for a missing one.
absl::StatusOr<Classifier> LoadForFinetuning(const std::string& path, const std::string& arch,
                                             int num_classes, double dropout,
                                             bool* new_head = nullptr);

}  // namespace sophon

#endif  // SOPHON_MODEL_MODELS_H_
