#include "sophon/base/half.h"

#include <cstring>

namespace sophon {

uint16_t FloatToHalf(float value) {
  uint32_t x;
  std::memcpy(&x, &value, sizeof(x));
  const uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t mantissa = x & 0x007fffffu;
  const int32_t exponent = static_cast<int32_t>((x >> 23) & 0xffu);
  if (exponent == 0xff) {  // infinity, or NaN (kept quiet, its top payload bits kept)
    return static_cast<uint16_t>(sign | 0x7c00u | (mantissa != 0 ? 0x0200u | (mantissa >> 13) : 0));
  }
  const int32_t e = exponent - 127 + 15;  // the half's biased exponent
  if (e >= 0x1f) return static_cast<uint16_t>(sign | 0x7c00u);  // too large: infinity
  if (e <= 0) {
    // A subnormal half (or zero): units of 2^-24.
    if (e < -10) return static_cast<uint16_t>(sign);
    mantissa |= 0x00800000u;
    const int shift = 14 - e;
    uint32_t half = mantissa >> shift;
    const uint32_t rest = mantissa & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = sign | (static_cast<uint32_t>(e) << 10) | (mantissa >> 13);
  const uint32_t rest = mantissa & 0x1fffu;
  // A carry out of the mantissa moves to the next exponent (or infinity): right.
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) ++half;
  return static_cast<uint16_t>(half);
}

float HalfToFloat(uint16_t half) {
  const uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  const uint32_t exponent = (half >> 10) & 0x1fu;
  uint32_t mantissa = half & 0x03ffu;
  uint32_t x;
  if (exponent == 0x1f) {
    x = sign | 0x7f800000u | (mantissa << 13);
  } else if (exponent != 0) {
    x = sign | ((exponent - 15 + 127) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    x = sign;
  } else {  // subnormal: normalise
    int32_t e = 127 - 15 + 1;
    while ((mantissa & 0x0400u) == 0) {
      mantissa <<= 1;
      --e;
    }
    x = sign | (static_cast<uint32_t>(e) << 23) | ((mantissa & 0x03ffu) << 13);
  }
  float value;
  std::memcpy(&value, &x, sizeof(value));
  return value;
}

void FloatsToHalves(const float* in, size_t n, uint16_t* out) {
  for (size_t i = 0; i < n; ++i) out[i] = FloatToHalf(in[i]);
}

void HalvesToFloats(const uint16_t* in, size_t n, float* out) {
  for (size_t i = 0; i < n; ++i) out[i] = HalfToFloat(in[i]);
}

}  // namespace sophon
