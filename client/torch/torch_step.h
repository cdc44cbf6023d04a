// What the LibTorch trainers (torch_trainer.cc, fused_trainer.cc) share: the
// device by name, the checks of a batch before LibTorch sees it, the batch as
// tensors, and LibTorch's errors as text (their common step is in
// torch_trainer_base.h).
//
// Only sophon_torch's files include this header: it pulls in LibTorch.
#ifndef SOPHON_CLIENT_TORCH_TORCH_STEP_H_
#define SOPHON_CLIENT_TORCH_TORCH_STEP_H_

#include <torch/nn/module.h>
#include <torch/types.h>

#include <exception>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/train/trainer.h"
#include "sophon/data/batch.h"

namespace sophon {

// Parses "cpu", "cuda" (= cuda:0) or "cuda:N" and checks that LibTorch can
// run there: InvalidArgument for a malformed name, FailedPrecondition when
// the device is well-formed but not usable here.
absl::StatusOr<torch::Device> ResolveDevice(const std::string& name);

// Checks that the batch is self-consistent and fits the model, so that
// from_blob never reads past a buffer and cross_entropy never sees a bad label.
// With `features` the batch must hold the architecture's features
// (FEATURES: c = ModelFeatureSize(arch), h = w = 1), otherwise images
// (TENSOR, float32) or uint8 crops (FLIPPED, normalised on the device; or
// CROPPED with a flip flag per sample, flipped and normalised there).
absl::Status ValidateBatch(const Batch& batch, const std::string& arch, int num_classes,
                           bool features = false);

// The batch's images [n, c, h, w] float32 and labels [n] int64 on `device`
// (views of the batch's buffers on the CPU, copies elsewhere). A FLIPPED
// batch's uint8 NHWC pixels are copied as they are and normalised on the
// device (FinishOnDevice), to the floats the TENSOR op would have made; a
// CROPPED batch's are also flipped there where its `flips` say.
struct BatchTensors {
  torch::Tensor images;
  torch::Tensor labels;
};
// With `channels_last` the images come in channels-last memory order.
BatchTensors ToTensors(const Batch& batch, const torch::Device& device,
                       bool channels_last = false);

// Puts `module`'s 4-D parameters and buffers (convolution weights) in
// channels-last memory order, in place (the values do not change).
void ToChannelsLast(torch::nn::Module& module);

// Autocast on `device`'s kind (cpu or cuda) while it lives, to the type `amp`
// names (TrainerOptions.amp: "bf16", "fp16"; "off": none); the previous
// state comes back when it ends. Thread-local, as LibTorch's autocast state is.
class AutocastScope {
 public:
  AutocastScope(const std::string& amp, const torch::Device& device);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  const bool on_;
  const bool cuda_;
  bool previous_ = false;
};

// An exception's text: LibTorch's message without its C++ backtrace.
std::string ExceptionText(const std::exception& e);

// Internal error for an exception thrown by LibTorch in a step on `batch`.
absl::Status StepError(bool train, const Batch& batch, const std::exception& e);

}  // namespace sophon

#endif  // SOPHON_CLIENT_TORCH_TORCH_STEP_H_
