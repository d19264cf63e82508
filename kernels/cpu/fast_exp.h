// A vectorizable exp for kernels' inner loops (the softmax of fused
// attention, the gates of the recurrent layers), and the activations built
// on it. Internal to kernels/.
//
//   for (int64_t j = 0; j < n; ++j) row[j] = fast_exp(row[j] - shift);
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

// Note [Row passes in two builds]
// Kernels that run their own loops around GEMMs pass over their rows with
// the functions below (fused attention's softmax and its gradient, the
// LSTM's gates). Such a pass is marked TANDEM_VECTOR_CLONES: it is compiled
// twice, for the build's SSE2 baseline and for AVX2 with FMA (x86-64-v3),
// and the loader picks the one the CPU runs (GCC's target_clones). On the
// 2-core AVX2 development machine fused attention's forward and backward at
// [8, 8, 512, 64] took 110 ms with the SSE2 passes, 91 with the AVX2 ones
// (bench_sequence --child attention --seq 512). The file that holds a pass
// is compiled with -fno-trapping-math (kernels/CMakeLists.txt), without
// which GCC vectorizes no loop that compares floats. Clang (the fuzz
// build's compiler) has no target_clones for templates, and under
// ThreadSanitizer the clones' resolvers, which the loader runs before the
// sanitizer's runtime is up, crashed the test programs at start: those
// builds compile the baseline pass only.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
#define TANDEM_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define TANDEM_VECTOR_CLONES
#endif

namespace tandem::kernels::cpu {

// e^x split as 2^n e^r, n = round(x / ln 2) and r in [-ln 2 / 2, ln 2 / 2],
// e^r from Cephes' expf polynomial (within 2 ulp); `shifted` holds n in the
// low bits of its mantissa (n + 1.5 * 2^23). For |x| <= 104.
struct ExpParts {
  float e_r;
  float shifted;
  // n, read from shifted's bits in unsigned arithmetic: no float-to-int
  // conversion, which would be undefined for NaN.
  int32_t n() const {
    return static_cast<int32_t>(std::bit_cast<uint32_t>(shifted) - std::bit_cast<uint32_t>(kRound));
  }
  static constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer.
};

inline ExpParts exp_parts(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2High = 0.693359375f, kLn2Low = -2.12194440e-4f;
  const float shifted = x * kLog2e + ExpParts::kRound;
  const float n = shifted - ExpParts::kRound;
  const float r = x - n * kLn2High - n * kLn2Low;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  return {p * r * r + r + 1.0f, shifted};
}

// 2^k for k in [-126, 127], from its exponent bits.
inline float two_to(int32_t k) {
  return std::bit_cast<float>(static_cast<uint32_t>(k + 127) << 23);
}

// e^x in float32, for kernels' inner loops: exp_parts of x clamped to [-87,
// 88]. Branch-free, so that GCC vectorizes the loops that call it (with
// -fno-trapping-math, which lets it keep the comparisons in vector
// registers), where libm's expf is a call per element. 0 below -87 (-inf
// included), e^88 above 88, NaN stays NaN.
inline float fast_exp(float x) {
  const ExpParts e = exp_parts(std::min(std::max(x, -87.0f), 88.0f));
  return x < -87.0f ? 0.0f : e.e_r * two_to(e.n());
}
inline double fast_exp(double x) { return std::exp(x); }

// e^x over all of float32, as the exp op must give it: 2^n applied as two
// factors 2^h 2^(n - h), h = floor(n / 2), each a normal float for n in
// [-150, 128], so that results past e^88.72 overflow to inf and those below
// e^-87 fall through the denormals to 0 (below e^-104) as libm's do. NaN
// stays NaN.
inline float exp_full_range(float x) {
  const ExpParts e = exp_parts(std::min(std::max(x, -104.0f), 89.0f));
  const int32_t n = e.n(), h = n >> 1;  // Arithmetic shift: floor(n / 2).
  return e.e_r * two_to(h) * two_to(n - h);
}

// 1 / (1 + e^-x) and tanh(x) = 2 sigmoid(2x) - 1 on the same exp: within a
// few float32 ulp of 1 (sigmoid) and in absolute terms (tanh, whose
// relative error grows below |x| ~ 1e-3, where it is x within 1e-7).
inline float fast_sigmoid(float x) { return 1.0f / (1.0f + fast_exp(-x)); }
inline float fast_tanh(float x) { return 2.0f * fast_sigmoid(2.0f * x) - 1.0f; }
inline double fast_sigmoid(double x) { return 1 / (1 + std::exp(-x)); }
inline double fast_tanh(double x) { return std::tanh(x); }

}  // namespace tandem::kernels::cpu
