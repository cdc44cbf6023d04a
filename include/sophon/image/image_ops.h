// Image kernels on plain buffers: the caller owns all memory.
#ifndef SOPHON_IMAGE_IMAGE_OPS_H_
#define SOPHON_IMAGE_IMAGE_OPS_H_

#include <cstdint>

namespace sophon {

// ImageNet normalization constants (torchvision's).
inline constexpr float kImageNetMean[3] = {0.485f, 0.456f, 0.406f};
inline constexpr float kImageNetStd[3] = {0.229f, 0.224f, 0.225f};

// Resizes the rectangle [x0, x1) x [y0, y1) (fractional source pixels) of a
// uint8 image with `src_channels` bytes per pixel (3: RGB; 4: RGBX, X ignored)
// to an RGB out_h x out_w image with an area-averaging (box) filter: each
// output pixel is the mean of the source area it covers, so downscaling is
// antialiased. Separable, in fixed point (14-bit weights, a 7-bit fractional
// intermediate): within one level of the exact mean. The vertical pass runs
// first, on SSE2 or (where the CPU has it) AVX2 kernels for any channel count;
// the horizontal pass takes SSE2 kernels for RGBX input. Results are
// bit-identical to the portable kernels.
// `src_stride` is bytes per source row. Uses per-thread scratch memory.
// REQUIRES: 0 <= x0 < x1 <= src_w, 0 <= y0 < y1 <= src_h, dst has out_h*out_w*3 bytes.
void ResizeAreaRgb(const uint8_t* src, int src_h, int src_w, int src_stride, int src_channels,
                   double x0, double y0, double x1, double y1, int out_h, int out_w,
                   uint8_t* dst);

namespace internal {
// ResizeAreaRgb with the SIMD kernels switched off when !allow_simd (tests).
void ResizeArea(const uint8_t* src, int src_h, int src_w, int src_stride, int src_channels,
                double x0, double y0, double x1, double y1, int out_h, int out_w, uint8_t* dst,
                bool allow_simd);
}  // namespace internal

// Mirrors an RGB uint8 HWC image left-right in place.
void FlipHorizontalRgb(uint8_t* pixels, int height, int width);

// uint8 HWC RGB -> float32 CHW, x / 255 then (x - mean) / std per channel.
// With `mirror`, reads each row right to left: the same floats as
// FlipHorizontalRgb then ToTensorNormalize, in one pass.
// `dst` has 3 * height * width floats.
void ToTensorNormalize(const uint8_t* hwc, int height, int width, float* dst,
                       bool mirror = false);

}  // namespace sophon

#endif  // SOPHON_IMAGE_IMAGE_OPS_H_
