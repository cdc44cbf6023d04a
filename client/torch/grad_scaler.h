// Loss scaling for float16 mixed precision (PyTorch's torch.cuda.amp.GradScaler,
// with its defaults): the loss is multiplied by a scale before backward so
// that small float16 gradients do not flush to zero; the gradients are
// divided by it again before the optimizer step, which is skipped when any
// of them is not finite (the scale was too large). The scale halves after
// such a step and doubles after `growth_interval` finite steps in a row.
//
// The scale lives on the host: checking the gradients reads one flag back,
// so a float16 step waits for its backward pass (as PyTorch's GradScaler.step
// does).
//
// Only sophon_torch's files include this header: it pulls in LibTorch.
#ifndef SOPHON_CLIENT_TORCH_GRAD_SCALER_H_
#define SOPHON_CLIENT_TORCH_GRAD_SCALER_H_

#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "absl/status/status.h"

namespace sophon {

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;  // finite steps in a row before the scale grows
};

// Not thread-safe: the trainer's thread uses it.
class GradScaler {
 public:
  explicit GradScaler(const GradScalerOptions& options = {});

  double scale() const { return scale_; }
  // `loss` times the scale.
  torch::Tensor Scale(const torch::Tensor& loss) const { return loss * scale_; }
  // Divides the gradients of `parameters` (those that have one) by the scale,
  // in place, and returns whether every one of them is finite. Waits for the
  // device to compute them.
  bool Unscale(const std::vector<torch::Tensor>& parameters) const;
  // After a step: backs the scale off if its gradients were not finite (the
  // optimizer step was skipped), else counts a finite step and grows it
  // every growth_interval of them.
  void Update(bool finite);

  // Steps skipped for non-finite gradients.
  int64_t skipped() const { return skipped_; }

  // What a training checkpoint keeps: {scale, finite steps in a row}.
  std::vector<double> State() const;
  // InvalidArgument unless `state` can be what State gave: {finite scale > 0,
  // whole count in [0, 2^53)}.
  static absl::Status CheckState(const std::vector<double>& state);
  // Restores what State gave; CheckState's error, the scaler unchanged, else.
  absl::Status Restore(const std::vector<double>& state);

 private:
  const GradScalerOptions options_;
  double scale_;
  int64_t finite_in_a_row_ = 0;
  int64_t skipped_ = 0;
};

}  // namespace sophon

#endif  // SOPHON_CLIENT_TORCH_GRAD_SCALER_H_
