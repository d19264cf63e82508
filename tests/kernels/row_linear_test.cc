// kernels/cpu/row_linear.h: each code path against a float64 reference, at
// sizes that exercise every remainder (a partial vector of inputs, outputs
// beyond the last block of four, one to four rows, no inputs at all).
#include "kernels/cpu/row_linear.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace tandem::kernels::cpu {
namespace {

using RowLinearFn = void (*)(const float*, const float*, const float*, float*, int64_t, int64_t,
                             int64_t);

// Deterministic values in [-1, 1).
std::vector<float> values(int64_t count, uint32_t seed) {
  std::vector<float> v(static_cast<size_t>(count));
  for (float& x : v) {
    seed = seed * 1664525u + 1013904223u;
    x = static_cast<float>(seed >> 8) / static_cast<float>(1 << 23) - 1.0f;
  }
  return v;
}

void check(RowLinearFn fn, int64_t rows, int64_t in, int64_t out, bool with_bias) {
  std::vector<float> x = values(rows * in, 1), w = values(out * in, 2), b = values(out, 3);
  std::vector<float> y(static_cast<size_t>(rows * out), NAN);
  fn(x.data(), w.data(), with_bias ? b.data() : nullptr, y.data(), rows, in, out);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      double sum = with_bias ? b[o] : 0.0;
      for (int64_t i = 0; i < in; ++i) sum += double{x[r * in + i]} * w[o * in + i];
      ASSERT_NEAR(y[r * out + o], sum, 1e-5 * (1 + std::sqrt(static_cast<double>(in))))
          << "rows " << rows << ", in " << in << ", out " << out << ", at [" << r << ", " << o
          << "]";
    }
  }
}

void check_sizes(RowLinearFn fn) {
  for (int64_t rows = 1; rows <= kRowLinearMaxRows; ++rows) {
    for (int64_t in : {0, 1, 15, 16, 17, 37, 64, 784}) {
      for (int64_t out : {1, 3, 4, 5, 11, 16}) check(fn, rows, in, out, true);
    }
  }
  check(fn, 2, 37, 11, false);
}

// Verifies the path this CPU takes (AVX-512 where it has it).
TEST(RowLinearTest, MatchesTheReference) { check_sizes(row_linear); }

// Verifies the AVX2 path where this CPU can run it.
TEST(RowLinearTest, Avx2MatchesTheReference) {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    GTEST_SKIP() << "this CPU has no AVX2 with FMA";
  }
  check_sizes(row_linear_avx2);
}

// Verifies the portable path, whatever this CPU has.
TEST(RowLinearTest, PortableMatchesTheReference) { check_sizes(row_linear_portable); }

}  // namespace
}  // namespace tandem::kernels::cpu
