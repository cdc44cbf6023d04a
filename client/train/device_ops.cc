#include "client/train/device_ops.h"

#include <torch/torch.h>

#include "sophon/image/image_ops.h"

namespace sophon {

torch::Tensor FinishOnDevice(const torch::Tensor& pixels, const torch::Tensor& flip) {
  TORCH_CHECK(pixels.dim() == 4 && pixels.size(3) == 3 && pixels.scalar_type() == torch::kUInt8,
              "FinishOnDevice takes uint8 [n, h, w, 3] crops, got ", pixels.sizes(), " ",
              pixels.scalar_type());
  torch::Tensor x = pixels;
  if (flip.defined()) {
    TORCH_CHECK(flip.dim() == 1 && flip.size(0) == pixels.size(0) &&
                    flip.scalar_type() == torch::kBool,
                "FinishOnDevice's flip mask must be bool [n], got ", flip.sizes());
    // Mirror along w where the mask is set: [n, 1, 1, 1] broadcasts.
    x = torch::where(flip.view({-1, 1, 1, 1}), x.flip({2}), x);
  }
  float a[3], b[3];
  for (int c = 0; c < 3; ++c) {
    a[c] = 1.0f / (255.0f * kImageNetStd[c]);
    b[c] = -kImageNetMean[c] / kImageNetStd[c];
  }
  const auto options = torch::TensorOptions().dtype(torch::kFloat32);
  const torch::Tensor scale = torch::from_blob(a, {1, 3, 1, 1}, options).to(pixels.device());
  const torch::Tensor shift = torch::from_blob(b, {1, 3, 1, 1}, options).to(pixels.device());
  // NHWC -> NCHW, contiguous, then the multiply and the add as two kernels.
  torch::Tensor out = x.permute({0, 3, 1, 2}).to(torch::kFloat32).contiguous();
  out.mul_(scale);
  out.add_(shift);
  return out;
}

}  // namespace sophon
