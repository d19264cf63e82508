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

// e^x in float32: 2^n e^r with n = round(x / ln 2) and r in [-ln 2 / 2,
// ln 2 / 2], e^r from Cephes' expf polynomial (within 2 ulp). Branch-free,
// so that GCC vectorizes the loops that call it (with -fno-trapping-math,
// which lets it keep the comparisons in vector registers), where libm's
// expf is a call per element. 0 below -87 (-inf included), e^88 above 88,
// NaN stays NaN.
inline float fast_exp(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2High = 0.693359375f, kLn2Low = -2.12194440e-4f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer.
  const float clamped = std::min(std::max(x, -87.0f), 88.0f);
  const float shifted = clamped * kLog2e + kRound;  // n sits in its low bits.
  const float n = shifted - kRound;
  const float r = clamped - n * kLn2High - n * kLn2Low;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // 2^n from n's bits, in unsigned arithmetic: no float-to-int conversion,
  // which would be undefined for NaN.
  const uint32_t n_bits = std::bit_cast<uint32_t>(shifted) - std::bit_cast<uint32_t>(kRound);
  const float two_to_n = std::bit_cast<float>((n_bits + 127u) << 23);
  return x < -87.0f ? 0.0f : p * two_to_n;
}
inline double fast_exp(double x) { return std::exp(x); }

// 1 / (1 + e^-x) and tanh(x) = 2 sigmoid(2x) - 1 on the same exp: within a
// few float32 ulp of 1 (sigmoid) and in absolute terms (tanh, whose
// relative error grows below |x| ~ 1e-3, where it is x within 1e-7).
inline float fast_sigmoid(float x) { return 1.0f / (1.0f + fast_exp(-x)); }
inline float fast_tanh(float x) { return 2.0f * fast_sigmoid(2.0f * x) - 1.0f; }
inline double fast_sigmoid(double x) { return 1 / (1 + std::exp(-x)); }
inline double fast_tanh(double x) { return std::tanh(x); }

}  // namespace tandem::kernels::cpu
