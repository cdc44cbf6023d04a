#include "client/torch/device_ops.h"

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
  // NHWC -> NCHW, contiguous, then per channel the multiply and the add
  // with float scalars (kernel arguments: no copy from the host, which on a
  // GPU would make the host wait for the device).
  torch::Tensor out = x.permute({0, 3, 1, 2}).to(torch::kFloat32).contiguous();
  for (int c = 0; c < 3; ++c) {
    const float a = 1.0f / (255.0f * kImageNetStd[c]);
    const float b = -kImageNetMean[c] / kImageNetStd[c];
    out.select(1, c).mul_(a).add_(b);
  }
  return out;
}

}  // namespace sophon
