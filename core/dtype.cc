#include "core/dtype.h"

#include <bit>
#include <cmath>
#include <string>

#include "core/error.h"

namespace tandem {
namespace {

constexpr std::string_view kNames[kNumDTypes] = {
    "float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8", "bool",
};

}  // namespace

std::string_view dtype_name(DType dtype) {
  auto index = static_cast<size_t>(dtype);
  return index < kNumDTypes ? kNames[index] : std::string_view("invalid dtype");
}

DType parse_dtype(std::string_view name) {
  for (int i = 0; i < kNumDTypes; ++i) {
    if (kNames[i] == name) return static_cast<DType>(i);
  }
  TANDEM_CHECK(false, "unknown dtype '", name,
               "'; expected one of float32, float64, float16, bfloat16, int32, int64, uint8, bool");
  return DType::kFloat32;  // Unreachable; TANDEM_CHECK(false) throws.
}

// Rounding float to a 16-bit format: add half of the dropped range (minus one
// when the kept part is even) so ties go to even, as the hardware does.

BFloat16::BFloat16(float value) {
  uint32_t f = std::bit_cast<uint32_t>(value);
  if (std::isnan(value)) {
    bits = static_cast<uint16_t>((f >> 16) | 0x0040);  // Keep it a quiet NaN.
    return;
  }
  uint32_t rounding = 0x7FFF + ((f >> 16) & 1);
  bits = static_cast<uint16_t>((f + rounding) >> 16);
}

BFloat16::operator float() const { return std::bit_cast<float>(uint32_t{bits} << 16); }

Half::Half(float value) {
  uint32_t f = std::bit_cast<uint32_t>(value);
  uint32_t sign = (f >> 16) & 0x8000;
  uint32_t abs = f & 0x7FFFFFFF;
  if (abs > 0x7F800000) {  // NaN
    bits = static_cast<uint16_t>(sign | 0x7E00);
  } else if (abs >= 0x47800000) {  // >= 65536 after rounding: overflow to infinity.
    bits = static_cast<uint16_t>(sign | 0x7C00);
  } else if (abs < 0x38800000) {  // Below the smallest normal half: subnormal or zero.
    // Let the FPU do the rounding: adding 0.5 aligns the half's subnormal
    // step (2^-24) with float's last mantissa bit.
    float shifted = std::bit_cast<float>(abs) + 0.5f;
    bits = static_cast<uint16_t>(sign | (std::bit_cast<uint32_t>(shifted) - 0x3F000000));
  } else {
    uint32_t mantissa_odd = (abs >> 13) & 1;
    abs += 0xC8000FFF + mantissa_odd;  // Rebias exponent (127 -> 15) and round.
    bits = static_cast<uint16_t>(sign | (abs >> 13));
  }
}

Half::operator float() const {
  uint32_t sign = uint32_t{bits & 0x8000u} << 16;
  uint32_t exponent = (bits >> 10) & 0x1F;
  uint32_t mantissa = bits & 0x3FF;
  if (exponent == 0x1F) {  // Inf or NaN.
    return std::bit_cast<float>(sign | 0x7F800000 | (mantissa << 13));
  }
  if (exponent == 0) {  // Zero or subnormal: mantissa * 2^-24.
    float magnitude = std::ldexp(static_cast<float>(mantissa), -24);
    return sign ? -magnitude : magnitude;
  }
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

}  // namespace tandem
