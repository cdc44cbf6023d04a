#include "client/torch/torch_step.h"

#include <ATen/autocast_mode.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include <cstdint>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/torch/device_ops.h"
#include "model/models.h"

namespace sophon {

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

absl::Status ValidateBatch(const Batch& batch, const std::string& arch, int num_classes,
                           bool features) {
  const std::string where = absl::StrCat("batch ", batch.index, ": ");
  if (batch.n <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(where, "n must be > 0, got ", batch.n));
  }
  const bool crops = batch.stage == Stage::kFlipped || batch.stage == Stage::kCropped;
  if (features != (batch.stage == Stage::kFeatures) ||
      (!features && batch.stage != Stage::kTensor && !crops)) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, features ? "fine-tuning trains on " : "training takes ",
        features ? StageName(Stage::kFeatures) : "TENSOR, CROPPED or FLIPPED", " batches, got ",
        StageName(batch.stage)));
  }
  if (batch.stage == Stage::kCropped && batch.flips.size() != static_cast<size_t>(batch.n)) {
    return absl::InvalidArgumentError(absl::StrCat(where, "a CROPPED batch needs a flip flag per "
                                                   "sample: flips holds ",
                                                   batch.flips.size(), ", expected n = ", batch.n));
  }
  if (features) {
    if (batch.c != ModelFeatureSize(arch) || batch.h != 1 || batch.w != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, arch, "'s head takes ", ModelFeatureSize(arch),
                       " features per sample, got a batch of ", batch.c, "x", batch.h, "x",
                       batch.w, " values per sample"));
    }
  } else if (batch.c != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, "models take 3-channel images, got c=", batch.c));
  }
  const int min_side = features ? 1 : ModelMinInputSize(arch);
  if (batch.h < min_side || batch.w < min_side) {
    return absl::InvalidArgumentError(absl::StrCat(where, arch, " needs images of at least ",
                                                   min_side, "x", min_side, ", got ", batch.h, "x",
                                                   batch.w));
  }
  // images.size() (pixels.size() for uint8 crops) == n*c*h*w, checked by
  // division so that it cannot overflow (every factor is positive here).
  uint64_t rest = crops ? batch.pixels.size() : batch.images.size();
  bool sizes_match = true;
  for (const int dim : {batch.n, batch.c, batch.h}) {
    sizes_match = sizes_match && rest % dim == 0;
    rest /= dim;
  }
  if (!sizes_match || rest != static_cast<uint64_t>(batch.w)) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, crops ? "pixels holds " : "images holds ",
        crops ? batch.pixels.size() : batch.images.size(), crops ? " bytes" : " floats",
        ", expected n*c*h*w = ", batch.n, "*", batch.c, "*", batch.h, "*", batch.w));
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

BatchTensors ToTensors(const Batch& batch, const torch::Device& device, bool channels_last) {
  // Views of the batch's buffers, no copy; nothing writes to them (.to()
  // copies when the device is not the CPU and is a no-op otherwise).
  BatchTensors tensors;
  if (batch.stage == Stage::kFlipped || batch.stage == Stage::kCropped) {
    // uint8 crops cross to the device (a quarter of float32's bytes) and are
    // flipped (CROPPED) and normalised there.
    torch::Tensor flips;
    if (batch.stage == Stage::kCropped) {
      flips = torch::from_blob(const_cast<uint8_t*>(batch.flips.data()), {batch.n}, torch::kUInt8)
                  .to(device)
                  .to(torch::kBool);
    }
    tensors.images = FinishOnDevice(
        torch::from_blob(const_cast<uint8_t*>(batch.pixels.data()),
                         {batch.n, batch.h, batch.w, batch.c}, torch::kUInt8)
            .to(device),
        flips);
  } else {
    tensors.images = torch::from_blob(const_cast<float*>(batch.images.data()),
                                      {batch.n, batch.c, batch.h, batch.w}, torch::kFloat32)
                         .to(device);
  }
  if (channels_last && batch.stage != Stage::kFeatures) {
    tensors.images = tensors.images.contiguous(at::MemoryFormat::ChannelsLast);
  }
  tensors.labels =
      torch::from_blob(const_cast<int64_t*>(batch.labels.data()), {batch.n}, torch::kInt64)
          .to(device);
  return tensors;
}

void ToChannelsLast(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  for (torch::Tensor& p : module.parameters()) {
    if (p.dim() == 4) p.set_data(p.contiguous(at::MemoryFormat::ChannelsLast));
  }
  for (torch::Tensor& b : module.buffers()) {
    if (b.dim() == 4) b.set_data(b.contiguous(at::MemoryFormat::ChannelsLast));
  }
}

namespace {

// Autocast's state per device type: LibTorch 2.4 replaced the per-device
// functions (set_enabled, set_cpu_enabled, ...) by ones that take the type.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
bool AutocastEnabled(bool cuda) {
  return at::autocast::is_autocast_enabled(cuda ? at::kCUDA : at::kCPU);
}
void SetAutocast(bool cuda, bool enabled) {
  at::autocast::set_autocast_enabled(cuda ? at::kCUDA : at::kCPU, enabled);
}
void SetAutocastType(bool cuda, at::ScalarType type) {
  at::autocast::set_autocast_dtype(cuda ? at::kCUDA : at::kCPU, type);
}
#else
bool AutocastEnabled(bool cuda) {
  return cuda ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
}
void SetAutocast(bool cuda, bool enabled) {
  if (cuda) {
    at::autocast::set_enabled(enabled);
  } else {
    at::autocast::set_cpu_enabled(enabled);
  }
}
void SetAutocastType(bool cuda, at::ScalarType type) {
  if (cuda) {
    at::autocast::set_autocast_gpu_dtype(type);
  } else {
    at::autocast::set_autocast_cpu_dtype(type);
  }
}
#endif

}  // namespace

AutocastScope::AutocastScope(const std::string& amp, const torch::Device& device)
    : on_(amp != "off"), cuda_(device.is_cuda()) {
  if (!on_) return;
  const at::ScalarType type = amp == "fp16" ? at::kHalf : at::kBFloat16;
  previous_ = AutocastEnabled(cuda_);
  SetAutocast(cuda_, true);
  SetAutocastType(cuda_, type);
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (!on_) return;
  // The casts of the weights autocast kept for this pass are dropped with it.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  SetAutocast(cuda_, previous_);
}

std::string ExceptionText(const std::exception& e) {
  const auto* torch_error = dynamic_cast<const c10::Error*>(&e);
  return torch_error != nullptr ? torch_error->what_without_backtrace() : e.what();
}

absl::Status StepError(bool train, const Batch& batch, const std::exception& e) {
  return absl::InternalError(absl::StrCat(train ? "training" : "evaluation", " step on batch ",
                                          batch.index, " failed: ", ExceptionText(e)));
}

}  // namespace sophon
