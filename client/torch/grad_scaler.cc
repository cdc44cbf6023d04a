#include "client/torch/grad_scaler.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace sophon {

GradScaler::GradScaler(const GradScalerOptions& options)
    : options_(options), scale_(options.init_scale) {}

bool GradScaler::Unscale(const std::vector<torch::Tensor>& parameters) const {
  std::vector<torch::Tensor> grads;
  for (const torch::Tensor& p : parameters) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  if (grads.empty()) return true;
  // In float32, as PyTorch's unscale: the reciprocal of a power of two is exact.
  const double inverse = static_cast<double>(static_cast<float>(1.0 / scale_));
  if (grads.front().is_cuda()) {
    // PyTorch's multi-tensor kernel: a few launches for every gradient.
    const torch::TensorOptions on_device =
        torch::TensorOptions().dtype(torch::kFloat32).device(grads.front().device());
    torch::Tensor found_inf = torch::zeros({1}, on_device);
    at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf,
                                                   torch::full({1}, inverse, on_device));
    return found_inf.item<float>() == 0.0f;
  }
  std::vector<torch::Tensor> finite;
  finite.reserve(grads.size());
  for (torch::Tensor& g : grads) {
    g.mul_(inverse);
    finite.push_back(torch::isfinite(g).all());
  }
  // One read of one flag: the only wait for the device.
  return torch::stack(finite).all().item<bool>();
}

void GradScaler::Update(bool finite) {
  if (!finite) {
    scale_ *= options_.backoff_factor;
    finite_in_a_row_ = 0;
    ++skipped_;
    return;
  }
  if (++finite_in_a_row_ >= options_.growth_interval) {
    scale_ *= options_.growth_factor;
    finite_in_a_row_ = 0;
  }
}

std::vector<double> GradScaler::State() const {
  return {scale_, static_cast<double>(finite_in_a_row_)};
}

absl::Status GradScaler::CheckState(const std::vector<double>& state) {
  if (state.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a loss scaler's state is 2 values {scale, finite steps}, got ", state.size()));
  }
  if (!(state[0] > 0) || !std::isfinite(state[0]) || !(state[1] >= 0 && state[1] < 0x1p53) ||
      state[1] != std::floor(state[1])) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a loss scaler's state is {finite scale > 0, whole finite steps >= 0}, got {", state[0],
        ", ", state[1], "}"));
  }
  return absl::OkStatus();
}

absl::Status GradScaler::Restore(const std::vector<double>& state) {
  if (absl::Status s = CheckState(state); !s.ok()) return s;
  scale_ = state[0];
  finite_in_a_row_ = static_cast<int64_t>(state[1]);
  return absl::OkStatus();
}

}  // namespace sophon
