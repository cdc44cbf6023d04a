#include "client/torch/state_snapshot.h"

#include <ATen/Context.h>
#include <torch/utils.h>

#include <exception>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "client/torch/torch_step.h"

namespace sophon {
namespace {

torch::Tensor GeneratorState(const torch::Device& device) {
  at::Generator generator = at::globalContext().defaultGenerator(device);
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void SetGeneratorState(const torch::Device& device, const torch::Tensor& state) {
  at::Generator generator = at::globalContext().defaultGenerator(device);
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

int64_t Bytes(const torch::Tensor& t) {
  return t.defined() ? static_cast<int64_t>(t.numel() * t.element_size()) : 0;
}

}  // namespace

absl::StatusOr<ModelStateSnapshot> ModelStateSnapshot::Take(const torch::nn::Module& module,
                                                            const torch::Device& device) {
  ModelStateSnapshot s;
  s.device_ = device;
  try {
    torch::NoGradGuard no_grad;
    for (const torch::Tensor& p : module.parameters()) {
      s.parameters_.push_back(p.detach().clone());
      const torch::Tensor& g = p.grad();
      s.gradients_.push_back(g.defined() ? g.detach().clone() : torch::Tensor());
      s.bytes_ += Bytes(s.parameters_.back()) + Bytes(s.gradients_.back());
    }
    for (const torch::Tensor& b : module.buffers()) {
      s.buffers_.push_back(b.detach().clone());
      s.bytes_ += Bytes(s.buffers_.back());
    }
    s.cpu_rng_ = GeneratorState(torch::kCPU);
    if (device.is_cuda()) s.device_rng_ = GeneratorState(device);
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("copying the model's state failed: ", ExceptionText(e)));
  }
  return s;
}

absl::Status ModelStateSnapshot::Restore(torch::nn::Module& module) const {
  try {
    torch::NoGradGuard no_grad;
    std::vector<torch::Tensor> parameters = module.parameters();
    std::vector<torch::Tensor> buffers = module.buffers();
    if (parameters.size() != parameters_.size() || buffers.size() != buffers_.size()) {
      return absl::InternalError(absl::StrCat(
          "restoring the model's state: it has ", parameters.size(), " parameters and ",
          buffers.size(), " buffers, the copy ", parameters_.size(), " and ", buffers_.size()));
    }
    for (size_t i = 0; i < parameters.size(); ++i) {
      parameters[i].copy_(parameters_[i]);
      torch::Tensor& grad = parameters[i].mutable_grad();
      if (!gradients_[i].defined()) {
        grad.reset();
      } else if (grad.defined()) {
        grad.copy_(gradients_[i]);
      } else {
        grad = gradients_[i].clone();
      }
    }
    for (size_t i = 0; i < buffers.size(); ++i) buffers[i].copy_(buffers_[i]);
    SetGeneratorState(torch::kCPU, cpu_rng_);
    if (device_rng_.defined()) SetGeneratorState(device_, device_rng_);
  } catch (const std::exception& e) {
    return absl::InternalError(
        absl::StrCat("restoring the model's state failed: ", ExceptionText(e)));
  }
  return absl::OkStatus();
}

}  // namespace sophon
