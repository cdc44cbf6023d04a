// IEEE 754 binary16 ("fp16") conversions on plain buffers, for features sent
// as half precision. Rounding to nearest, ties to even, as a CPU's or a
// GPU's conversion does (torch's .to(torch::kHalf)); overflow gives infinity,
// NaN stays NaN.
#ifndef SOPHON_BASE_HALF_H_
#define SOPHON_BASE_HALF_H_

#include <cstddef>
#include <cstdint>

namespace sophon {

uint16_t FloatToHalf(float value);
float HalfToFloat(uint16_t half);

// n values from one buffer to the other.
void FloatsToHalves(const float* in, size_t n, uint16_t* out);
void HalvesToFloats(const uint16_t* in, size_t n, float* out);

}  // namespace sophon

#endif  // SOPHON_BASE_HALF_H_
