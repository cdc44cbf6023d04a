// The training node's last ops on the device that trains: uint8 crops (the
// loader's CROPPED or FLIPPED stage, NHWC) flipped where asked and turned
// into the float32 NCHW tensor the TENSOR op makes on a CPU, as LibTorch ops
// on whatever device the crops are on. Sending uint8 over PCIe is a quarter
// of float32's bytes, and the training node's CPUs do no normalisation.
//
// Only sophon_torch's files include this header: it pulls in LibTorch.
#ifndef SOPHON_CLIENT_TORCH_DEVICE_OPS_H_
#define SOPHON_CLIENT_TORCH_DEVICE_OPS_H_

#include <torch/types.h>

namespace sophon {

// `pixels`: uint8 [n, h, w, 3] (RGB, HWC per sample) on any device; `flip`:
// bool [n] on the same device (sample i mirrored left-right when set), or an
// undefined tensor for none. Returns float32 [n, 3, h, w] on that device:
// x * a + b per channel with a = 1 / (255 std) and b = -mean / std
// (ImageNet's), a multiply then an add as the CPU kernels compute it, so the
// values equal ToTensorNormalize's (sophon/image/image_ops.h).
torch::Tensor FinishOnDevice(const torch::Tensor& pixels, const torch::Tensor& flip = {});

}  // namespace sophon

#endif  // SOPHON_CLIENT_TORCH_DEVICE_OPS_H_
