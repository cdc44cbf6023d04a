#include "client/train/trainer.h"

#include <torch/cuda.h>
#include <torch/nn.h>
#include <torch/optim/sgd.h>
#include <torch/utils.h>

#include <exception>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/train/models.h"
#include "sophon/base/status_macros.h"
#include "spdlog/spdlog.h"

namespace sophon {
namespace {

// Parses "cpu", "cuda" (= cuda:0) or "cuda:N" and checks that LibTorch can
// run there: InvalidArgument for a malformed name, FailedPrecondition when
// the device is well-formed but not usable here.
absl::StatusOr<torch::Device> ResolveDevice(const std::string& name) {
  if (name == "cpu") return torch::Device(torch::kCPU);
  if (name != "cuda" && !absl::StartsWith(name, "cuda:")) {
    return absl::InvalidArgumentError(
        absl::StrCat("TrainerOptions.device: unknown device '", name, "' (valid: cpu, cuda, cuda:N)"));
  }
  int index = 0;
  if (name != "cuda" && (!absl::SimpleAtoi(name.substr(5), &index) || index < 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("TrainerOptions.device: bad device '", name, "' (expected cuda:N with N >= 0)"));
  }
  if (!torch::cuda::is_available()) {
    return absl::FailedPreconditionError(
        absl::StrCat("TrainerOptions.device is ", name,
                     " but this LibTorch build has no CUDA or no GPU is visible; use cpu"));
  }
  const int count = static_cast<int>(torch::cuda::device_count());
  if (index >= count) {
    return absl::FailedPreconditionError(
        absl::StrCat("TrainerOptions.device is ", name, " but only ", count,
                     " GPU(s) are visible"));
  }
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
}

absl::Status ValidateOptions(const TrainerOptions& options) {
  RETURN_IF_ERROR(CheckModelName(options.arch));
  if (options.num_classes <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_classes must be > 0, got ", options.num_classes));
  }
  if (!(options.lr > 0)) {
    return absl::InvalidArgumentError(absl::StrCat("lr must be > 0, got ", options.lr));
  }
  if (!(options.momentum >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("momentum must be >= 0, got ", options.momentum));
  }
  if (!(options.weight_decay >= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("weight_decay must be >= 0, got ", options.weight_decay));
  }
  if (options.threads < 0) {
    return absl::InvalidArgumentError(absl::StrCat("threads must be >= 0, got ", options.threads));
  }
  return absl::OkStatus();
}

// Checks that the batch is self-consistent and fits the model, so that
// from_blob never reads past a buffer and cross_entropy never sees a bad label.
absl::Status ValidateBatch(const Batch& batch, const std::string& arch, int num_classes) {
  const std::string where = absl::StrCat("batch ", batch.index, ": ");
  if (batch.n <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, "n must be > 0, got ", batch.n));
  }
  if (batch.c != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "models take 3-channel images, got c=", batch.c));
  }
  const int min_side = ModelMinInputSize(arch);
  if (batch.h < min_side || batch.w < min_side) {
    return absl::InvalidArgumentError(absl::StrCat(where, arch, " needs images of at least ",
                                                   min_side, "x", min_side, ", got ", batch.h, "x",
                                                   batch.w));
  }
  // images.size() == n*c*h*w, checked by division so that it cannot overflow
  // (every factor is positive here).
  uint64_t rest = batch.images.size();
  bool sizes_match = true;
  for (const int dim : {batch.n, batch.c, batch.h}) {
    sizes_match = sizes_match && rest % dim == 0;
    rest /= dim;
  }
  if (!sizes_match || rest != static_cast<uint64_t>(batch.w)) {
    return absl::InvalidArgumentError(absl::StrCat(where, "images holds ", batch.images.size(),
                                                   " floats, expected n*c*h*w = ", batch.n, "*",
                                                   batch.c, "*", batch.h, "*", batch.w));
  }
  if (batch.labels.size() != static_cast<size_t>(batch.n)) {
    return absl::InvalidArgumentError(absl::StrCat(where, "labels holds ", batch.labels.size(),
                                                   " values, expected n = ", batch.n));
  }
  for (size_t i = 0; i < batch.labels.size(); ++i) {
    const int64_t label = batch.labels[i];
    if (label < 0 || label >= num_classes) {
      const std::string id =
          i < batch.ids.size() ? absl::StrCat(" (sample id ", batch.ids[i], ")") : "";
      return absl::InvalidArgumentError(absl::StrCat(where, "label ", label, " of position ", i, id,
                                                     " is outside [0, ", num_classes, ")"));
    }
  }
  return absl::OkStatus();
}

class TorchTrainer final : public Trainer {
 public:
  // REQUIRES: model already lives on `device`.
  TorchTrainer(const TrainerOptions& options, Classifier model, torch::Device device)
      : options_(options),
        device_(device),
        model_(std::move(model)),
        optimizer_(model_->parameters(), torch::optim::SGDOptions(options.lr)
                                             .momentum(options.momentum)
                                             .weight_decay(options.weight_decay)) {}

  absl::StatusOr<StepResult> Step(const Batch& batch) override {
    return Run(batch, /*train=*/true);
  }

  absl::StatusOr<StepResult> Evaluate(const Batch& batch) override {
    return Run(batch, /*train=*/false);
  }

  std::string DeviceName() const override { return device_.str(); }

 private:
  absl::StatusOr<StepResult> Run(const Batch& batch, bool train);

  // Constant after construction.
  const TrainerOptions options_;
  const torch::Device device_;
  const Classifier model_;
  // Mutated by every Step().
  torch::optim::SGD optimizer_;
};

absl::StatusOr<StepResult> TorchTrainer::Run(const Batch& batch, bool train) {
  RETURN_IF_ERROR(ValidateBatch(batch, options_.arch, options_.num_classes));
  try {
    // Views of the batch's buffers, no copy; nothing below writes to them
    // (.to() copies when the device is not the CPU and is a no-op otherwise).
    torch::Tensor images = torch::from_blob(const_cast<float*>(batch.images.data()),
                                            {batch.n, batch.c, batch.h, batch.w}, torch::kFloat32)
                               .to(device_);
    torch::Tensor labels =
        torch::from_blob(const_cast<int64_t*>(batch.labels.data()), {batch.n}, torch::kInt64)
            .to(device_);
    torch::Tensor logits;
    torch::Tensor loss;
    if (train) {
      model_->train();
      optimizer_.zero_grad();
      logits = model_->forward(images);
      loss = torch::nn::functional::cross_entropy(logits, labels);
      loss.backward();
      optimizer_.step();
    } else {
      torch::NoGradGuard no_grad;
      model_->eval();
      logits = model_->forward(images);
      loss = torch::nn::functional::cross_entropy(logits, labels);
    }
    StepResult result;
    result.loss = loss.item<double>();
    result.correct = logits.argmax(1).eq(labels).sum().item<int64_t>();
    result.count = batch.n;
    return result;
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat(train ? "training" : "evaluation", " step on batch ",
                                            batch.index,
                                            " failed in LibTorch: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(train ? "training" : "evaluation", " step on batch ",
                                            batch.index, " failed: ", e.what()));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(const TrainerOptions& options) {
  RETURN_IF_ERROR(ValidateOptions(options));
  try {
    ASSIGN_OR_RETURN(const torch::Device device, ResolveDevice(options.device));
    // Both settings are process-wide in LibTorch.
    if (options.threads > 0) torch::set_num_threads(options.threads);
    torch::manual_seed(options.seed);
    ASSIGN_OR_RETURN(Classifier model, MakeModel(options.arch, options.num_classes));
    model->to(device);
    int64_t num_params = 0;
    for (const torch::Tensor& p : model->parameters()) num_params += p.numel();
    spdlog::info(
        "trainer: {} ({} classes, {:.1f}M parameters) on {}, SGD lr={} momentum={} "
        "weight_decay={}, {} intra-op threads",
        options.arch, options.num_classes, num_params / 1e6, device.str(), options.lr,
        options.momentum, options.weight_decay, torch::get_num_threads());
    return std::unique_ptr<Trainer>(new TorchTrainer(options, std::move(model), device));
  } catch (const c10::Error& e) {
    return absl::InternalError(absl::StrCat("creating the ", options.arch, " trainer on ",
                                            options.device,
                                            " failed in LibTorch: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("creating the ", options.arch, " trainer on ",
                                            options.device, " failed: ", e.what()));
  }
}

}  // namespace sophon
