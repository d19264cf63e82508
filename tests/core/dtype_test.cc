#include "core/dtype.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/error.h"

namespace tandem {
namespace {

// The compiler's own binary16 type is the reference for Half: GCC converts
// float to _Float16 with round-to-nearest-even.
__extension__ typedef _Float16 ReferenceHalf;

uint16_t reference_half_bits(float value) {
  return std::bit_cast<uint16_t>(static_cast<ReferenceHalf>(value));
}

float reference_half_to_float(uint16_t bits) {
  return static_cast<float>(std::bit_cast<ReferenceHalf>(bits));
}

float float_of(uint32_t bits) { return std::bit_cast<float>(bits); }
uint32_t bits_of(float value) { return std::bit_cast<uint32_t>(value); }

struct DTypeRow {
  DType dtype;
  size_t size;
  const char* name;
  bool floating;
};

constexpr DTypeRow kDTypes[] = {
    {DType::kFloat32, 4, "float32", true}, {DType::kFloat64, 8, "float64", true},
    {DType::kFloat16, 2, "float16", true}, {DType::kBFloat16, 2, "bfloat16", true},
    {DType::kInt32, 4, "int32", false},    {DType::kInt64, 8, "int64", false},
    {DType::kUInt8, 1, "uint8", false},    {DType::kBool, 1, "bool", false},
};
static_assert(std::size(kDTypes) == kNumDTypes);

// Verifies that size, name, parse and is_floating_point agree with the table for every dtype.
TEST(DTypeTest, SizeNameAndParseRoundTrip) {
  for (const DTypeRow& row : kDTypes) {
    SCOPED_TRACE(row.name);
    EXPECT_EQ(dtype_size(row.dtype), row.size);
    EXPECT_EQ(dtype_name(row.dtype), row.name);
    EXPECT_EQ(parse_dtype(row.name), row.dtype);
    EXPECT_EQ(parse_dtype(dtype_name(row.dtype)), row.dtype);
    EXPECT_EQ(is_floating_point(row.dtype), row.floating);
  }
}

// Verifies that an unknown dtype name throws a tandem::Error quoting the bad text.
TEST(DTypeTest, ParseUnknownNameThrowsNamingIt) {
  for (const char* bad : {"float128", "Float32", "", "int32 ", "half"}) {
    SCOPED_TRACE(bad);
    try {
      parse_dtype(bad);
      FAIL() << "parse_dtype accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("'") + bad + "'"), std::string::npos)
          << e.what();
    }
  }
}

// Verifies that dtype_of maps each C++ element type to its DType (and its size).
TEST(DTypeTest, DTypeOfMatchesElementTypes) {
  static_assert(dtype_of<float>() == DType::kFloat32);
  static_assert(dtype_of<double>() == DType::kFloat64);
  static_assert(dtype_of<Half>() == DType::kFloat16);
  static_assert(dtype_of<BFloat16>() == DType::kBFloat16);
  static_assert(dtype_of<int32_t>() == DType::kInt32);
  static_assert(dtype_of<int64_t>() == DType::kInt64);
  static_assert(dtype_of<uint8_t>() == DType::kUInt8);
  static_assert(dtype_of<bool>() == DType::kBool);
  EXPECT_EQ(dtype_size(dtype_of<Half>()), sizeof(Half));
  EXPECT_EQ(dtype_size(dtype_of<BFloat16>()), sizeof(BFloat16));
  EXPECT_EQ(dtype_size(dtype_of<bool>()), sizeof(bool));
}

// --- Half ---------------------------------------------------------------------------------

// Compares Half(f) with the reference; NaN only needs to stay NaN (with its sign).
void expect_half_matches_reference(float value) {
  uint16_t expected = reference_half_bits(value);
  uint16_t actual = Half(value).bits;
  if (std::isnan(value)) {
    EXPECT_TRUE((actual & 0x7C00) == 0x7C00 && (actual & 0x3FF) != 0)
        << "NaN became 0x" << std::hex << actual;
    EXPECT_EQ(actual & 0x8000, expected & 0x8000) << "sign of NaN 0x" << std::hex << bits_of(value);
    return;
  }
  EXPECT_EQ(actual, expected) << std::hex << "float 0x" << bits_of(value) << " (" << value
                              << "): got 0x" << actual << ", expected 0x" << expected;
}

// Verifies that Half(float) rounds like _Float16 over a sweep of all float bit patterns.
TEST(HalfTest, FromFloatMatchesCompilerOverBitPatternSweep) {
  // An odd stride visits every exponent and a spread of mantissas, both signs.
  constexpr uint64_t kStride = 4099;
  int mismatches = 0;
  for (uint64_t bits = 0; bits <= 0xFFFFFFFFu && mismatches < 10; bits += kStride) {
    float value = float_of(static_cast<uint32_t>(bits));
    uint16_t before = Half(value).bits;
    expect_half_matches_reference(value);
    if (!std::isnan(value) && before != reference_half_bits(value)) ++mismatches;
  }
}

// Verifies that every half value, the midpoints between neighbours (ties) and the floats just
// either side of each midpoint round like _Float16: this covers every rounding boundary,
// subnormals and the overflow to infinity above 65504.
TEST(HalfTest, FromFloatMatchesCompilerAtEveryRoundingBoundary) {
  int mismatches = 0;
  for (uint32_t h = 0; h < 0x7C00 && mismatches < 10; ++h) {
    float low = reference_half_to_float(static_cast<uint16_t>(h));
    // The next half up; past the largest finite one it is 65536, where rounding overflows.
    float high = h + 1 < 0x7C00 ? reference_half_to_float(static_cast<uint16_t>(h + 1)) : 65536.0f;
    float mid = low + (high - low) / 2;  // Exact: a half has 11 significant bits, a float 24.
    for (float value : {low, mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
      for (float signed_value : {value, -value}) {
        uint16_t expected = reference_half_bits(signed_value);
        if (Half(signed_value).bits != expected) ++mismatches;
        expect_half_matches_reference(signed_value);
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
}

struct HalfRow {
  float value;
  uint16_t bits;
  const char* what;
};

// Verifies hand-picked conversions, independent of any library.
TEST(HalfTest, FromFloatKnownValues) {
  const HalfRow rows[] = {
      {0.0f, 0x0000, "zero"},
      {-0.0f, 0x8000, "negative zero keeps its sign"},
      {1.0f, 0x3C00, "one"},
      {-2.0f, 0xC000, "minus two"},
      {65504.0f, 0x7BFF, "largest finite"},
      {65519.996f, 0x7BFF, "just below the overflow tie"},
      {65520.0f, 0x7C00, "tie above 65504 rounds to even: infinity"},
      {1e6f, 0x7C00, "overflow"},
      {-1e6f, 0xFC00, "negative overflow"},
      {std::numeric_limits<float>::infinity(), 0x7C00, "infinity"},
      {std::ldexp(1.0f, -14), 0x0400, "smallest normal"},
      {std::ldexp(1.0f, -24), 0x0001, "smallest subnormal"},
      {std::ldexp(1.0f, -25), 0x0000, "half the smallest subnormal ties to even zero"},
      {std::ldexp(3.0f, -25), 0x0002, "1.5 subnormal steps ties to even 2"},
      {std::ldexp(1.0f, -26), 0x0000, "underflow"},
      {1.0f + std::ldexp(1.0f, -11), 0x3C00, "tie between 1 and 1+2^-10 goes to even 1"},
      {1.0f + 3 * std::ldexp(1.0f, -11), 0x3C02, "tie goes up to the even mantissa"},
  };
  for (const HalfRow& row : rows) {
    EXPECT_EQ(Half(row.value).bits, row.bits) << row.what;
  }
}

// Verifies that NaN stays NaN, whatever its payload and sign.
TEST(HalfTest, NaNStaysNaN) {
  for (uint32_t bits : {0x7FC00000u, 0x7F800001u, 0x7FFFFFFFu, 0xFFC00000u, 0xFF800001u}) {
    Half h(float_of(bits));
    EXPECT_TRUE(std::isnan(static_cast<float>(h))) << std::hex << bits;
    EXPECT_EQ(h.bits & 0x8000, (bits >> 16) & 0x8000) << std::hex << bits;
  }
}

// Verifies that float(Half) is exact for all 65536 bit patterns, and that converting back
// gives the same bits.
TEST(HalfTest, ToFloatIsExactForEveryBitPattern) {
  for (uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    Half h;
    h.bits = static_cast<uint16_t>(bits);
    float actual = static_cast<float>(h);
    float expected = reference_half_to_float(h.bits);
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(actual)) << std::hex << bits;
      continue;
    }
    ASSERT_EQ(bits_of(actual), bits_of(expected)) << std::hex << "half 0x" << bits;
    ASSERT_EQ(Half(actual).bits, h.bits) << std::hex << "half 0x" << bits;
  }
}

// --- BFloat16 -----------------------------------------------------------------------------

// The value of the bfloat16 pattern `bits`, decoded by hand into a double. The pattern just
// past the largest finite value counts as 2^128, as round-to-nearest-even with an unbounded
// exponent sees it.
double bf16_value(uint32_t bits) {
  uint32_t exponent = (bits >> 7) & 0xFF;
  uint32_t mantissa = bits & 0x7F;
  double magnitude = exponent == 0 ? std::ldexp(static_cast<double>(mantissa), -133)
                                   : std::ldexp(static_cast<double>(128 + mantissa),
                                                static_cast<int>(exponent) - 134);
  return (bits & 0x8000) ? -magnitude : magnitude;
}

// The nearest-even bfloat16 of a finite or infinite float, chosen between the two neighbours
// by exact double arithmetic.
uint16_t reference_bf16_bits(float value) {
  uint32_t f = bits_of(value);
  if (std::isinf(value)) return static_cast<uint16_t>(f >> 16);
  uint32_t low = f >> 16;   // Truncation: the neighbour towards zero.
  uint32_t high = low + 1;  // The neighbour away from zero (may be infinity).
  double distance_low = std::fabs(static_cast<double>(value) - bf16_value(low));
  double distance_high = std::fabs(static_cast<double>(value) - bf16_value(high));
  if (distance_low < distance_high) return static_cast<uint16_t>(low);
  if (distance_high < distance_low) return static_cast<uint16_t>(high);
  return static_cast<uint16_t>((low & 1) == 0 ? low : high);
}

void expect_bf16_matches_reference(float value) {
  uint16_t actual = BFloat16(value).bits;
  if (std::isnan(value)) {
    EXPECT_TRUE(std::isnan(static_cast<float>(BFloat16(value)))) << std::hex << bits_of(value);
    EXPECT_EQ(actual & 0x8000, (bits_of(value) >> 16) & 0x8000) << std::hex << bits_of(value);
    return;
  }
  uint16_t expected = reference_bf16_bits(value);
  EXPECT_EQ(actual, expected) << std::hex << "float 0x" << bits_of(value) << ": got 0x" << actual
                              << ", expected 0x" << expected;
}

// Verifies that BFloat16(float) is the nearest-even neighbour over a sweep of float patterns.
TEST(BFloat16Test, FromFloatIsNearestEvenOverBitPatternSweep) {
  constexpr uint64_t kStride = 4099;
  for (uint64_t bits = 0; bits <= 0xFFFFFFFFu; bits += kStride) {
    float value = float_of(static_cast<uint32_t>(bits));
    if (!std::isnan(value) && BFloat16(value).bits != reference_bf16_bits(value)) {
      expect_bf16_matches_reference(value);
      FAIL() << "stopping at the first mismatch";
    }
    if (std::isnan(value)) expect_bf16_matches_reference(value);
  }
}

// Verifies the rounding boundaries: for every bfloat16 pattern, the exact value, the tie with
// the next pattern, and the floats either side of the tie (incl. subnormals and the overflow
// from the largest finite value to infinity).
TEST(BFloat16Test, FromFloatIsNearestEvenAtEveryRoundingBoundary) {
  int mismatches = 0;
  for (uint32_t b = 0; b <= 0xFFFF && mismatches < 10; ++b) {
    if ((b & 0x7F80) == 0x7F80) continue;  // Infinity and NaN have no tie above them.
    uint32_t base = b << 16;
    for (uint32_t f : {base, base | 0x8000, (base | 0x8000) - 1, (base | 0x8000) + 1, base | 1}) {
      float value = float_of(f);
      if (BFloat16(value).bits != reference_bf16_bits(value)) {
        ++mismatches;
        expect_bf16_matches_reference(value);
      }
    }
  }
  EXPECT_EQ(mismatches, 0);
}

// Verifies hand-picked conversions: signed zero, ties to even, overflow, infinity, NaN.
TEST(BFloat16Test, FromFloatKnownValues) {
  EXPECT_EQ(BFloat16(0.0f).bits, 0x0000);
  EXPECT_EQ(BFloat16(-0.0f).bits, 0x8000);
  EXPECT_EQ(BFloat16(1.0f).bits, 0x3F80);
  EXPECT_EQ(BFloat16(float_of(0x3F808000)).bits, 0x3F80);               // Tie, even stays.
  EXPECT_EQ(BFloat16(float_of(0x3F818000)).bits, 0x3F82);               // Tie, odd rounds up.
  EXPECT_EQ(BFloat16(float_of(0x3F808001)).bits, 0x3F81);               // Above the tie.
  EXPECT_EQ(BFloat16(std::numeric_limits<float>::max()).bits, 0x7F80);  // Rounds to infinity.
  EXPECT_EQ(BFloat16(-std::numeric_limits<float>::infinity()).bits, 0xFF80);
  EXPECT_EQ(BFloat16(float_of(0x00000001)).bits, 0x0000);  // Smallest float subnormal.
  for (uint32_t nan : {0x7FC00000u, 0x7F800001u, 0x7FFFFFFFu, 0xFF800001u}) {
    BFloat16 b(float_of(nan));
    EXPECT_TRUE(std::isnan(static_cast<float>(b))) << std::hex << nan;
    EXPECT_EQ(b.bits & 0x8000, (nan >> 16) & 0x8000) << std::hex << nan;
  }
}

// Verifies that float(BFloat16) is the upper half of the float, exactly, and converts back.
TEST(BFloat16Test, ToFloatIsExactForEveryBitPattern) {
  for (uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    BFloat16 b;
    b.bits = static_cast<uint16_t>(bits);
    float value = static_cast<float>(b);
    ASSERT_EQ(bits_of(value), bits << 16);
    if (!std::isnan(value)) {
      ASSERT_EQ(BFloat16(value).bits, bits);
    }
    if (std::isfinite(value)) {
      ASSERT_EQ(static_cast<double>(value), bf16_value(bits));
    }
  }
}

}  // namespace
}  // namespace tandem
