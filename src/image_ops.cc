#include "sophon/image_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace sophon {
namespace internal {
namespace {

// Fixed point: weights carry kWeightBits fractional bits and sum to exactly
// 1 << kWeightBits per output; the intermediate rows carry kInterBits.
constexpr int kWeightBits = 14;
constexpr int kInterBits = 7;  // 255 << 7 = 32640 fits int16
constexpr int kHorizontalShift = kWeightBits - kInterBits;
constexpr int kVerticalShift = kWeightBits + kInterBits;

// Area weights of every output index along one axis, quantized to int16, with
// the same number of taps `k` per output (even, so SIMD can take them in
// pairs). Each window [first, first + k) lies inside [0, src_len) whenever
// src_len >= k; extra taps have weight 0.
struct Taps {
  int k = 0;
  std::vector<int> first;
  std::vector<int16_t> weights;  // out * k
};

Taps ComputeTaps(double lo, double hi, int out, int src_len) {
  const double step = (hi - lo) / out;
  std::vector<int> k0s(out), k1s(out);
  int max_count = 1;
  for (int o = 0; o < out; ++o) {
    const double a = lo + o * step;
    const double b = (o + 1 == out) ? hi : lo + (o + 1) * step;
    k0s[o] = std::clamp(static_cast<int>(std::floor(a)), 0, src_len - 1);
    k1s[o] = std::clamp(static_cast<int>(std::ceil(b)), k0s[o] + 1, src_len);
    max_count = std::max(max_count, k1s[o] - k0s[o]);
  }
  Taps t;
  t.k = std::min(max_count + (max_count & 1), std::max(src_len, max_count));
  t.first.resize(out);
  t.weights.assign(static_cast<size_t>(out) * t.k, 0);
  std::vector<double> w;
  for (int o = 0; o < out; ++o) {
    const double a = lo + o * step;
    const double b = (o + 1 == out) ? hi : lo + (o + 1) * step;
    const int k0 = k0s[o], k1 = k1s[o];
    const int first = std::max(0, std::min(k0, src_len - t.k));
    t.first[o] = first;
    w.assign(k1 - k0, 0.0);
    double total = 0;
    for (int k = k0; k < k1; ++k) {
      w[k - k0] = std::max(0.0, std::min(b, k + 1.0) - std::max(a, static_cast<double>(k)));
      total += w[k - k0];
    }
    int16_t* q = t.weights.data() + static_cast<size_t>(o) * t.k + (k0 - first);
    int sum = 0, largest = 0;
    for (int j = 0; j < k1 - k0; ++j) {
      const double f = total > 0 ? w[j] / total : 1.0 / (k1 - k0);
      q[j] = static_cast<int16_t>(std::lround(f * (1 << kWeightBits)));
      sum += q[j];
      if (q[j] > q[largest]) largest = j;
    }
    q[largest] = static_cast<int16_t>(q[largest] + ((1 << kWeightBits) - sum));
  }
  return t;
}

// Per-thread buffers, reused so that steady-state resizes allocate nothing.
struct Scratch {
  std::vector<int16_t> rows;  // horizontal pass output, 4 lanes per pixel
  std::vector<uint8_t> line;  // one RGBX output row
};
Scratch& ThreadScratch() {
  thread_local Scratch scratch;
  return scratch;
}

// One source row -> out_w pixels of 4 int16 lanes (RGB << kInterBits; lane 3
// is unused and not read back).
void HorizontalScalar(const uint8_t* row, int channels, const Taps& t, int out_w, int16_t* dst) {
  for (int o = 0; o < out_w; ++o) {
    const uint8_t* p = row + static_cast<size_t>(channels) * t.first[o];
    const int16_t* w = t.weights.data() + static_cast<size_t>(o) * t.k;
    int32_t r = 0, g = 0, b = 0;
    for (int j = 0; j < t.k; ++j, p += channels) {
      r += w[j] * p[0];
      g += w[j] * p[1];
      b += w[j] * p[2];
    }
    constexpr int32_t kRound = 1 << (kHorizontalShift - 1);
    dst[4 * o] = static_cast<int16_t>((r + kRound) >> kHorizontalShift);
    dst[4 * o + 1] = static_cast<int16_t>((g + kRound) >> kHorizontalShift);
    dst[4 * o + 2] = static_cast<int16_t>((b + kRound) >> kHorizontalShift);
    dst[4 * o + 3] = 0;
  }
}

// out_lanes int16 lanes of rows[first .. first + t.k) weighted by output row o.
// `base` is the first of the output row's source rows.
void VerticalScalar(const int16_t* base, size_t row_lanes, const Taps& t, int o, int out_lanes,
                    uint8_t* dst) {
  const int16_t* w = t.weights.data() + static_cast<size_t>(o) * t.k;
  for (int i = 0; i < out_lanes; ++i) {
    int32_t acc = 0;
    for (int j = 0; j < t.k; ++j) acc += w[j] * base[j * row_lanes + i];
    acc = (acc + (1 << (kVerticalShift - 1))) >> kVerticalShift;
    dst[i] = static_cast<uint8_t>(std::clamp(acc, 0, 255));
  }
}

#if defined(__SSE2__)
// Same arithmetic as HorizontalScalar for RGBX input, two taps per madd.
// REQUIRES: every window lies inside the row (src_w >= t.k), t.k even.
void HorizontalSse2(const uint8_t* row, const Taps& t, int out_w, int16_t* dst) {
  const __m128i zero = _mm_setzero_si128();
  const __m128i round = _mm_set1_epi32(1 << (kHorizontalShift - 1));
  for (int o = 0; o < out_w; ++o) {
    const uint8_t* p = row + 4 * static_cast<size_t>(t.first[o]);
    const int16_t* w = t.weights.data() + static_cast<size_t>(o) * t.k;
    __m128i acc = _mm_setzero_si128();
    for (int j = 0; j < t.k; j += 2, p += 8) {
      // [r0 g0 b0 x0 r1 g1 b1 x1] -> [r0 r1 g0 g1 b0 b1 x0 x1] as int16
      const __m128i two = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
      const __m128i pairs = _mm_unpacklo_epi8(_mm_unpacklo_epi8(two, _mm_srli_si128(two, 4)), zero);
      int32_t wpair;
      std::memcpy(&wpair, w + j, sizeof(wpair));
      acc = _mm_add_epi32(acc, _mm_madd_epi16(pairs, _mm_set1_epi32(wpair)));
    }
    acc = _mm_srai_epi32(_mm_add_epi32(acc, round), kHorizontalShift);
    acc = _mm_packs_epi32(acc, acc);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(dst + 4 * o), acc);  // lane 3 unused
  }
}

// Same arithmetic as VerticalScalar, eight lanes at a time, two rows per madd.
// REQUIRES: out_lanes a multiple of 8 and t.k even.
void VerticalSse2(const int16_t* base, size_t row_lanes, const Taps& t, int o, int out_lanes,
                  uint8_t* dst) {
  const int16_t* w = t.weights.data() + static_cast<size_t>(o) * t.k;
  const __m128i round = _mm_set1_epi32(1 << (kVerticalShift - 1));
  for (int i = 0; i < out_lanes; i += 8) {
    __m128i lo = _mm_setzero_si128(), hi = _mm_setzero_si128();
    for (int j = 0; j < t.k; j += 2) {
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(base + j * row_lanes + i));
      const __m128i b =
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(base + (j + 1) * row_lanes + i));
      int32_t wpair;
      std::memcpy(&wpair, w + j, sizeof(wpair));
      const __m128i wv = _mm_set1_epi32(wpair);
      lo = _mm_add_epi32(lo, _mm_madd_epi16(_mm_unpacklo_epi16(a, b), wv));
      hi = _mm_add_epi32(hi, _mm_madd_epi16(_mm_unpackhi_epi16(a, b), wv));
    }
    lo = _mm_srai_epi32(_mm_add_epi32(lo, round), kVerticalShift);
    hi = _mm_srai_epi32(_mm_add_epi32(hi, round), kVerticalShift);
    const __m128i v16 = _mm_packs_epi32(lo, hi);
    _mm_storel_epi64(reinterpret_cast<__m128i*>(dst + i), _mm_packus_epi16(v16, v16));
  }
}
#endif

}  // namespace

void ResizeArea(const uint8_t* src, int src_h, int src_w, int src_stride, int src_channels,
                double x0, double y0, double x1, double y1, int out_h, int out_w, uint8_t* dst,
                bool allow_simd) {
  const Taps tx = ComputeTaps(x0, x1, out_w, src_w);
  const Taps ty = ComputeTaps(y0, y1, out_h, src_h);
#if defined(__SSE2__)
  const bool simd = allow_simd;
#else
  const bool simd = false;
  (void)allow_simd;
#endif
  const bool simd_x = simd && src_channels == 4 && src_w >= tx.k && tx.k % 2 == 0;
  const bool simd_y = simd && src_h >= ty.k && ty.k % 2 == 0;
  int row_first = src_h, row_last = 0;
  for (int o = 0; o < out_h; ++o) {
    row_first = std::min(row_first, ty.first[o]);
    row_last = std::max(row_last, ty.first[o] + ty.k);
  }
  // Lanes per intermediate row: 4 per pixel, padded to whole 8-lane vectors.
  const size_t row_lanes = (static_cast<size_t>(out_w) * 4 + 7) / 8 * 8;
  Scratch& s = ThreadScratch();
  s.rows.resize(std::max(s.rows.size(), static_cast<size_t>(row_last - row_first) * row_lanes));
  s.line.resize(std::max(s.line.size(), row_lanes));
  for (int y = row_first; y < row_last; ++y) {
    const uint8_t* row = src + static_cast<size_t>(y) * src_stride;
    int16_t* out = s.rows.data() + static_cast<size_t>(y - row_first) * row_lanes;
#if defined(__SSE2__)
    if (simd_x) {
      HorizontalSse2(row, tx, out_w, out);
    } else {
      HorizontalScalar(row, src_channels, tx, out_w, out);
    }
#else
    HorizontalScalar(row, src_channels, tx, out_w, out);
#endif
    std::fill(out + 4 * out_w, out + row_lanes, 0);
  }
  for (int o = 0; o < out_h; ++o) {
    const int16_t* base = s.rows.data() + static_cast<size_t>(ty.first[o] - row_first) * row_lanes;
#if defined(__SSE2__)
    if (simd_y) {
      VerticalSse2(base, row_lanes, ty, o, static_cast<int>(row_lanes), s.line.data());
    } else {
      VerticalScalar(base, row_lanes, ty, o, 4 * out_w, s.line.data());
    }
#else
    VerticalScalar(base, row_lanes, ty, o, 4 * out_w, s.line.data());
#endif
    uint8_t* out = dst + static_cast<size_t>(o) * out_w * 3;
    for (int x = 0; x < out_w; ++x) {
      out[3 * x] = s.line[4 * x];
      out[3 * x + 1] = s.line[4 * x + 1];
      out[3 * x + 2] = s.line[4 * x + 2];
    }
  }
}

}  // namespace internal

void ResizeAreaRgb(const uint8_t* src, int src_h, int src_w, int src_stride, int src_channels,
                   double x0, double y0, double x1, double y1, int out_h, int out_w,
                   uint8_t* dst) {
  internal::ResizeArea(src, src_h, src_w, src_stride, src_channels, x0, y0, x1, y1, out_h, out_w,
                       dst, /*allow_simd=*/true);
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
  // (x / 255 - mean) / std == x * a + b, tabulated for the 256 values of x:
  // one pass over the pixels, three contiguous planes out.
  struct Table {
    float v[3][256];
    Table() {
      for (int c = 0; c < 3; ++c) {
        const float a = 1.0f / (255.0f * kImageNetStd[c]);
        const float b = -kImageNetMean[c] / kImageNetStd[c];
        for (int x = 0; x < 256; ++x) v[c][x] = static_cast<float>(x) * a + b;
      }
    }
  };
  static const Table table;
  const size_t plane = static_cast<size_t>(height) * width;
  float* r = dst;
  float* g = dst + plane;
  float* b = dst + 2 * plane;
  for (size_t i = 0; i < plane; ++i, hwc += 3) {
    r[i] = table.v[0][hwc[0]];
    g[i] = table.v[1][hwc[1]];
    b[i] = table.v[2][hwc[2]];
  }
}

}  // namespace sophon
