#include "sophon/image/image_ops.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define SOPHON_HAVE_AVX2_KERNELS 1  // compiled for AVX2, used only where the CPU has it
#endif

namespace sophon {
namespace {

#if defined(SOPHON_HAVE_AVX2_KERNELS)
bool CpuHasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}
#endif

}  // namespace

namespace internal {
namespace {

// Fixed point: weights carry kWeightBits fractional bits and sum to exactly
// 1 << kWeightBits per output; the intermediate row carries kInterBits.
constexpr int kWeightBits = 14;
constexpr int kInterBits = 7;  // 255 << 7 = 32640 fits int16
constexpr int kVerticalBits = kWeightBits - kInterBits;    // shift after the first pass
constexpr int kHorizontalBits = kWeightBits + kInterBits;  // shift after the second

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

// Per-thread buffer, reused so that steady-state resizes allocate nothing.
std::vector<int16_t>& ThreadLine() {
  thread_local std::vector<int16_t> line;
  return line;
}

constexpr int32_t kVerticalRound = 1 << (kVerticalBits - 1);
constexpr int32_t kHorizontalRound = 1 << (kHorizontalBits - 1);

// The vertical pass, channel-blind: bytes [0, n) of the k rows at `src`
// (`stride` apart) weighted by `w` -> n int16 lanes with kInterBits fraction.
void VerticalScalar(const uint8_t* src, size_t stride, const int16_t* w, int k, size_t n,
                    int16_t* line) {
  for (size_t i = 0; i < n; ++i) {
    int32_t acc = 0;
    for (int j = 0; j < k; ++j) acc += w[j] * src[j * stride + i];
    line[i] = static_cast<int16_t>((acc + kVerticalRound) >> kVerticalBits);
  }
}

// The horizontal pass: output pixels [o_begin, o_end) of the int16 line
// (`channels` lanes per pixel; the line starts at source pixel `px0`) -> RGB
// bytes of the output row `dst`.
void HorizontalScalar(const int16_t* line, int channels, int px0, const Taps& t, int o_begin,
                      int o_end, uint8_t* dst) {
  for (int o = o_begin; o < o_end; ++o) {
    const int16_t* p = line + static_cast<size_t>(channels) * (t.first[o] - px0);
    const int16_t* w = t.weights.data() + static_cast<size_t>(o) * t.k;
    for (int c = 0; c < 3; ++c) {
      int32_t acc = 0;
      for (int j = 0; j < t.k; ++j) acc += w[j] * p[j * channels + c];
      dst[3 * o + c] =
          static_cast<uint8_t>(std::clamp((acc + kHorizontalRound) >> kHorizontalBits, 0, 255));
    }
  }
}

#if defined(__SSE2__)
// VerticalScalar, 16 bytes at a time, two rows per madd, with the K weights
// held in registers; the scalar loop takes the tail.
template <int K>
void VerticalSse2Fixed(const uint8_t* src, size_t stride, const int16_t* w, size_t n,
                       int16_t* line) {
  static_assert(K % 2 == 0 && K >= 2);
  const __m128i zero = _mm_setzero_si128();
  const __m128i round = _mm_set1_epi32(kVerticalRound);
  __m128i wv[K / 2];
  for (int j = 0; j < K; j += 2) {
    int32_t wpair;
    std::memcpy(&wpair, w + j, sizeof(wpair));
    wv[j / 2] = _mm_set1_epi32(wpair);
  }
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m128i acc0 = round, acc1 = round, acc2 = round, acc3 = round;
    for (int j = 0; j < K; j += 2) {
      const uint8_t* p = src + j * stride + i;
      const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
      const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + stride));
      const __m128i ab_lo = _mm_unpacklo_epi8(a, b);  // a0 b0 a1 b1 ...
      const __m128i ab_hi = _mm_unpackhi_epi8(a, b);
      acc0 = _mm_add_epi32(acc0, _mm_madd_epi16(_mm_unpacklo_epi8(ab_lo, zero), wv[j / 2]));
      acc1 = _mm_add_epi32(acc1, _mm_madd_epi16(_mm_unpackhi_epi8(ab_lo, zero), wv[j / 2]));
      acc2 = _mm_add_epi32(acc2, _mm_madd_epi16(_mm_unpacklo_epi8(ab_hi, zero), wv[j / 2]));
      acc3 = _mm_add_epi32(acc3, _mm_madd_epi16(_mm_unpackhi_epi8(ab_hi, zero), wv[j / 2]));
    }
    acc0 = _mm_srai_epi32(acc0, kVerticalBits);
    acc1 = _mm_srai_epi32(acc1, kVerticalBits);
    acc2 = _mm_srai_epi32(acc2, kVerticalBits);
    acc3 = _mm_srai_epi32(acc3, kVerticalBits);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(line + i), _mm_packs_epi32(acc0, acc1));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(line + i + 8), _mm_packs_epi32(acc2, acc3));
  }
  VerticalScalar(src + i, stride, w, K, n - i, line + i);
}

#if defined(SOPHON_HAVE_AVX2_KERNELS)
// VerticalSse2Fixed on 32 bytes at a time. The unpacks and packs work within
// 128-bit lanes, so the two packed results hold bytes [0, 8) + [16, 24) and
// [8, 16) + [24, 32); a 64-bit permute restores the order before storing.
template <int K>
__attribute__((target("avx2"))) void VerticalAvx2Fixed(const uint8_t* src, size_t stride,
                                                       const int16_t* w, size_t n,
                                                       int16_t* line) {
  static_assert(K % 2 == 0 && K >= 2);
  const __m256i zero = _mm256_setzero_si256();
  const __m256i round = _mm256_set1_epi32(kVerticalRound);
  __m256i wv[K / 2];
  for (int j = 0; j < K; j += 2) {
    int32_t wpair;
    std::memcpy(&wpair, w + j, sizeof(wpair));
    wv[j / 2] = _mm256_set1_epi32(wpair);
  }
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i acc0 = round, acc1 = round, acc2 = round, acc3 = round;
    for (int j = 0; j < K; j += 2) {
      const uint8_t* p = src + j * stride + i;
      const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
      const __m256i b = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + stride));
      const __m256i ab_lo = _mm256_unpacklo_epi8(a, b);
      const __m256i ab_hi = _mm256_unpackhi_epi8(a, b);
      acc0 = _mm256_add_epi32(acc0, _mm256_madd_epi16(_mm256_unpacklo_epi8(ab_lo, zero), wv[j / 2]));
      acc1 = _mm256_add_epi32(acc1, _mm256_madd_epi16(_mm256_unpackhi_epi8(ab_lo, zero), wv[j / 2]));
      acc2 = _mm256_add_epi32(acc2, _mm256_madd_epi16(_mm256_unpacklo_epi8(ab_hi, zero), wv[j / 2]));
      acc3 = _mm256_add_epi32(acc3, _mm256_madd_epi16(_mm256_unpackhi_epi8(ab_hi, zero), wv[j / 2]));
    }
    const __m256i v01 = _mm256_packs_epi32(_mm256_srai_epi32(acc0, kVerticalBits),
                                           _mm256_srai_epi32(acc1, kVerticalBits));
    const __m256i v23 = _mm256_packs_epi32(_mm256_srai_epi32(acc2, kVerticalBits),
                                           _mm256_srai_epi32(acc3, kVerticalBits));
    // v01 = [0..7 | 16..23], v23 = [8..15 | 24..31] (int16 lanes)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(line + i),
                        _mm256_permute2x128_si256(v01, v23, 0x20));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(line + i + 16),
                        _mm256_permute2x128_si256(v01, v23, 0x31));
  }
  VerticalSse2Fixed<K>(src + i, stride, w, n - i, line + i);
}
#endif

// REQUIRES: k even. Area downscales by less than 2x (every decode here) have
// k = 2 or 4; other k take the scalar kernel.
void VerticalSse2(const uint8_t* src, size_t stride, const int16_t* w, int k, size_t n,
                  int16_t* line) {
#if defined(SOPHON_HAVE_AVX2_KERNELS)
  if (CpuHasAvx2()) {
    switch (k) {
      case 2: return VerticalAvx2Fixed<2>(src, stride, w, n, line);
      case 4: return VerticalAvx2Fixed<4>(src, stride, w, n, line);
      default: break;
    }
  }
#endif
  switch (k) {
    case 2: return VerticalSse2Fixed<2>(src, stride, w, n, line);
    case 4: return VerticalSse2Fixed<4>(src, stride, w, n, line);
    case 6: return VerticalSse2Fixed<6>(src, stride, w, n, line);
    case 8: return VerticalSse2Fixed<8>(src, stride, w, n, line);
    default: return VerticalScalar(src, stride, w, k, n, line);
  }
}

// HorizontalScalar for RGBX lines, two taps per madd, K taps unrolled, with
// the weight pairs broadcast once per resize (`wv`: K / 2 vectors per output).
// Each pixel is stored as 4 bytes whose last one the next pixel overwrites;
// the last pixel goes through the scalar kernel.
// REQUIRES: windows inside the line.
using WeightPair4 = std::array<int32_t, 4>;  // one weight pair, broadcast

template <int K>
void HorizontalSse2Fixed(const int16_t* line, int px0, const Taps& t, const WeightPair4* wv,
                         int out_w, uint8_t* dst) {
  const __m128i round = _mm_set1_epi32(kHorizontalRound);
  for (int o = 0; o + 1 < out_w; ++o, wv += K / 2) {
    const int16_t* p = line + 4 * static_cast<size_t>(t.first[o] - px0);
    __m128i acc = round;
    for (int j = 0; j < K; j += 2) {
      // [r0 g0 b0 x0 r1 g1 b1 x1] -> [r0 r1 g0 g1 b0 b1 x0 x1]
      const __m128i two = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 4 * j));
      const __m128i pairs = _mm_unpacklo_epi16(two, _mm_srli_si128(two, 8));
      const __m128i w = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wv[j / 2].data()));
      acc = _mm_add_epi32(acc, _mm_madd_epi16(pairs, w));
    }
    acc = _mm_srai_epi32(acc, kHorizontalBits);
    const __m128i v16 = _mm_packs_epi32(acc, acc);
    const int32_t rgbx = _mm_cvtsi128_si32(_mm_packus_epi16(v16, v16));
    std::memcpy(dst + 3 * o, &rgbx, sizeof(rgbx));
  }
}

// Weight pairs of every output, broadcast: t.k / 2 vectors per output.
void BroadcastPairs(const Taps& t, int out_w, std::vector<WeightPair4>* wv) {
  wv->resize(static_cast<size_t>(out_w) * (t.k / 2));
  for (size_t i = 0; i < wv->size(); ++i) {
    int32_t wpair;
    std::memcpy(&wpair, t.weights.data() + 2 * i, sizeof(wpair));
    (*wv)[i].fill(wpair);
  }
}

// REQUIRES: t.k in {2, 4, 6, 8}, windows inside the line.
void HorizontalSse2(const int16_t* line, int px0, const Taps& t, const WeightPair4* wv, int out_w,
                    uint8_t* dst) {
  switch (t.k) {
    case 2: HorizontalSse2Fixed<2>(line, px0, t, wv, out_w, dst); break;
    case 4: HorizontalSse2Fixed<4>(line, px0, t, wv, out_w, dst); break;
    case 6: HorizontalSse2Fixed<6>(line, px0, t, wv, out_w, dst); break;
    default: HorizontalSse2Fixed<8>(line, px0, t, wv, out_w, dst); break;
  }
  if (out_w > 0) HorizontalScalar(line, 4, px0, t, out_w - 1, out_w, dst);
}
#endif

}  // namespace

// Vertical pass first, over only the columns the horizontal taps read, then
// the horizontal pass on out_h rows: the (costlier) horizontal kernel runs
// once per output row, not once per source row.
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
  const bool simd_x = simd && src_channels == 4 && src_w >= tx.k && tx.k % 2 == 0 && tx.k <= 8;
  const bool simd_y = simd && src_h >= ty.k && ty.k % 2 == 0;
  int px0 = src_w, px1 = 0;
  for (int o = 0; o < out_w; ++o) {
    px0 = std::min(px0, tx.first[o]);
    px1 = std::max(px1, tx.first[o] + tx.k);
  }
  const size_t lanes = static_cast<size_t>(px1 - px0) * src_channels;
  std::vector<int16_t>& line = ThreadLine();
  if (line.size() < lanes) line.resize(lanes);
#if defined(__SSE2__)
  thread_local std::vector<WeightPair4> wv;
  if (simd_x) BroadcastPairs(tx, out_w, &wv);
#endif
  for (int o = 0; o < out_h; ++o) {
    const uint8_t* rows = src + static_cast<size_t>(ty.first[o]) * src_stride +
                          static_cast<size_t>(px0) * src_channels;
    const int16_t* w = ty.weights.data() + static_cast<size_t>(o) * ty.k;
    uint8_t* out = dst + static_cast<size_t>(o) * out_w * 3;
#if defined(__SSE2__)
    if (simd_y) {
      VerticalSse2(rows, src_stride, w, ty.k, lanes, line.data());
    } else {
      VerticalScalar(rows, src_stride, w, ty.k, lanes, line.data());
    }
    if (simd_x) {
      HorizontalSse2(line.data(), px0, tx, wv.data(), out_w, out);
    } else {
      HorizontalScalar(line.data(), src_channels, px0, tx, 0, out_w, out);
    }
#else
    VerticalScalar(rows, src_stride, w, ty.k, lanes, line.data());
    HorizontalScalar(line.data(), src_channels, px0, tx, 0, out_w, out);
#endif
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

namespace {

// (x / 255 - mean) / std == x * a + b per channel: a float multiply, then an
// add (no fused multiply-add, so every kernel gives the same bits).
struct NormalizeCoefficients {
  float a[3], b[3];
  float table[3][256];  // x * a + b for the 256 values of x
  NormalizeCoefficients() {
    for (int c = 0; c < 3; ++c) {
      a[c] = 1.0f / (255.0f * kImageNetStd[c]);
      b[c] = -kImageNetMean[c] / kImageNetStd[c];
      for (int x = 0; x < 256; ++x) table[c][x] = static_cast<float>(x) * a[c] + b[c];
    }
  }
};
const NormalizeCoefficients& Coefficients() {
  static const NormalizeCoefficients k;
  return k;
}

// Output pixels [x0, x1) of one row: source pixel x (or width - 1 - x).
void TensorRowScalar(const uint8_t* row, int width, bool mirror, int x0, int x1, float* r,
                     float* g, float* b) {
  const NormalizeCoefficients& k = Coefficients();
  for (int x = x0; x < x1; ++x) {
    const uint8_t* px = row + 3 * static_cast<size_t>(mirror ? width - 1 - x : x);
    r[x] = k.table[0][px[0]];
    g[x] = k.table[1][px[1]];
    b[x] = k.table[2][px[2]];
  }
}

#if defined(SOPHON_HAVE_AVX2_KERNELS)
// Eight pixels per step: two 16-byte loads of four RGB pixels each, shuffled
// to [r r r r g g g g b b b b], widened to int32, converted, a * x + b.
// Returns the first output pixel it did not write (the caller finishes the
// row). Loads read 4 bytes past the 4 pixels they use, so a step runs only
// when those bytes lie inside the row's buffer (`row_end`).
__attribute__((target("avx2"))) int TensorRowAvx2(const uint8_t* row, const uint8_t* row_end,
                                                  int width, bool mirror, float* r, float* g,
                                                  float* b) {
  const NormalizeCoefficients& k = Coefficients();
  const __m256 a_r = _mm256_set1_ps(k.a[0]), a_g = _mm256_set1_ps(k.a[1]),
               a_b = _mm256_set1_ps(k.a[2]);
  const __m256 b_r = _mm256_set1_ps(k.b[0]), b_g = _mm256_set1_ps(k.b[1]),
               b_b = _mm256_set1_ps(k.b[2]);
  // Forward: pixels 0..3 -> channel planes. Mirrored: pixels 3..0.
  const __m128i forward = _mm_setr_epi8(0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11, -1, -1, -1, -1);
  const __m128i backward = _mm_setr_epi8(9, 6, 3, 0, 10, 7, 4, 1, 11, 8, 5, 2, -1, -1, -1, -1);
  const __m128i shuffle = mirror ? backward : forward;
  int x = 0;
  for (; x + 8 <= width; x += 8) {
    // Source pixels of outputs x..x+7: s..s+7 (mirrored: width-8-x .. width-1-x).
    const int s = mirror ? width - 8 - x : x;
    const uint8_t* p = row + 3 * static_cast<size_t>(s);
    if (p + 12 + 16 > row_end) break;
    const __m128i first = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)),
                                           shuffle);
    const __m128i second = _mm_shuffle_epi8(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 12)), shuffle);
    // Outputs x..x+3 come from `first` (forward) or `second` (mirrored).
    const __m128i lo = mirror ? second : first;
    const __m128i hi = mirror ? first : second;
    const __m128i rg = _mm_unpacklo_epi32(lo, hi);  // r0-3 r4-7 g0-3 g4-7
    const __m128i bx = _mm_unpackhi_epi32(lo, hi);  // b0-3 b4-7 ...
    const __m256 vr = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(rg));
    const __m256 vg = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(rg, 8)));
    const __m256 vb = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(bx));
    _mm256_storeu_ps(r + x, _mm256_add_ps(_mm256_mul_ps(vr, a_r), b_r));
    _mm256_storeu_ps(g + x, _mm256_add_ps(_mm256_mul_ps(vg, a_g), b_g));
    _mm256_storeu_ps(b + x, _mm256_add_ps(_mm256_mul_ps(vb, a_b), b_b));
  }
  return x;
}
#endif

}  // namespace

void ToTensorNormalize(const uint8_t* hwc, int height, int width, float* dst, bool mirror) {
  const size_t plane = static_cast<size_t>(height) * width;
  const uint8_t* end = hwc + 3 * plane;
  for (int y = 0; y < height; ++y) {
    const uint8_t* row = hwc + 3 * static_cast<size_t>(y) * width;
    float* r = dst + static_cast<size_t>(y) * width;
    float* g = r + plane;
    float* b = g + plane;
    int done = 0;
#if defined(SOPHON_HAVE_AVX2_KERNELS)
    if (CpuHasAvx2()) done = TensorRowAvx2(row, end, width, mirror, r, g, b);
#endif
    TensorRowScalar(row, width, mirror, done, width, r, g, b);
  }
}

}  // namespace sophon
