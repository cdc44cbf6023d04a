#include "sophon/image_ops.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace sophon {
namespace {

// Contributions of source pixels to one output pixel along one axis.
struct AxisWeights {
  std::vector<int> first;      // first source index per output index
  std::vector<int> count;      // number of source indices
  std::vector<int> offset;     // into weights
  std::vector<float> weights;  // normalized, sum to 1 per output index
};

AxisWeights ComputeAxisWeights(double lo, double hi, int out, int src_len) {
  AxisWeights w;
  w.first.resize(out);
  w.count.resize(out);
  w.offset.resize(out);
  const double step = (hi - lo) / out;
  for (int o = 0; o < out; ++o) {
    const double a = lo + o * step;
    const double b = (o + 1 == out) ? hi : lo + (o + 1) * step;
    const int k0 = std::clamp(static_cast<int>(std::floor(a)), 0, src_len - 1);
    const int k1 = std::clamp(static_cast<int>(std::ceil(b)), k0 + 1, src_len);
    w.first[o] = k0;
    w.count[o] = k1 - k0;
    w.offset[o] = static_cast<int>(w.weights.size());
    double total = 0;
    for (int k = k0; k < k1; ++k) {
      const double overlap = std::min(b, k + 1.0) - std::max(a, static_cast<double>(k));
      total += std::max(overlap, 0.0);
    }
    for (int k = k0; k < k1; ++k) {
      const double overlap = std::min(b, k + 1.0) - std::max(a, static_cast<double>(k));
      w.weights.push_back(total > 0 ? static_cast<float>(std::max(overlap, 0.0) / total)
                                    : 1.0f / (k1 - k0));
    }
  }
  return w;
}

}  // namespace

void ResizeAreaRgb(const uint8_t* src, int src_h, int src_w, int src_stride, double x0,
                   double y0, double x1, double y1, int out_h, int out_w, uint8_t* dst) {
  const AxisWeights wx = ComputeAxisWeights(x0, x1, out_w, src_w);
  const AxisWeights wy = ComputeAxisWeights(y0, y1, out_h, src_h);
  const int row_first = wy.first.front();
  const int row_last = wy.first.back() + wy.count.back();  // exclusive
  // Horizontal pass over the source rows the vertical pass needs.
  std::vector<float> horizontal(static_cast<size_t>(row_last - row_first) * out_w * 3);
  for (int y = row_first; y < row_last; ++y) {
    const uint8_t* row = src + static_cast<size_t>(y) * src_stride;
    float* out = horizontal.data() + static_cast<size_t>(y - row_first) * out_w * 3;
    for (int o = 0; o < out_w; ++o) {
      const uint8_t* p = row + 3 * wx.first[o];
      const float* wt = wx.weights.data() + wx.offset[o];
      float r = 0, g = 0, b = 0;
      for (int k = 0; k < wx.count[o]; ++k, p += 3) {
        r += wt[k] * p[0];
        g += wt[k] * p[1];
        b += wt[k] * p[2];
      }
      out[3 * o] = r;
      out[3 * o + 1] = g;
      out[3 * o + 2] = b;
    }
  }
  // Vertical pass.
  std::vector<float> acc(static_cast<size_t>(out_w) * 3);
  for (int o = 0; o < out_h; ++o) {
    std::fill(acc.begin(), acc.end(), 0.0f);
    const float* wt = wy.weights.data() + wy.offset[o];
    for (int k = 0; k < wy.count[o]; ++k) {
      const float* in =
          horizontal.data() + static_cast<size_t>(wy.first[o] + k - row_first) * out_w * 3;
      const float w = wt[k];
      for (int i = 0; i < out_w * 3; ++i) acc[i] += w * in[i];
    }
    uint8_t* out = dst + static_cast<size_t>(o) * out_w * 3;
    for (int i = 0; i < out_w * 3; ++i) {
      out[i] = static_cast<uint8_t>(std::clamp(acc[i] + 0.5f, 0.0f, 255.0f));
    }
  }
}

void FlipHorizontalRgb(uint8_t* pixels, int height, int width) {
  for (int y = 0; y < height; ++y) {
    uint8_t* row = pixels + static_cast<size_t>(y) * width * 3;
    for (int l = 0, r = width - 1; l < r; ++l, --r) {
      std::swap(row[3 * l], row[3 * r]);
      std::swap(row[3 * l + 1], row[3 * r + 1]);
      std::swap(row[3 * l + 2], row[3 * r + 2]);
    }
  }
}

void ToTensorNormalize(const uint8_t* hwc, int height, int width, float* dst) {
  const size_t plane = static_cast<size_t>(height) * width;
  for (int c = 0; c < 3; ++c) {
    // (x / 255 - mean) / std == x * a + b
    const float a = 1.0f / (255.0f * kImageNetStd[c]);
    const float b = -kImageNetMean[c] / kImageNetStd[c];
    float* out = dst + c * plane;
    const uint8_t* in = hwc + c;
    for (size_t i = 0; i < plane; ++i) out[i] = in[3 * i] * a + b;
  }
}

}  // namespace sophon
