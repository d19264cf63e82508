#include "kernels/cpu/row_linear.h"

#include <immintrin.h>

namespace tandem::kernels::cpu {
namespace {

// The sum of the 16 lanes. The unmasked shuffles and extracts (and
// _mm512_reduce_add_ps, built on them) make GCC 12 warn of an uninitialized
// value inside its own header (GCC bug 105593); their masked forms, with
// every lane selected, are the same instructions.
[[gnu::target("avx512f")]] inline float horizontal_sum(__m512 v) {
  constexpr __mmask16 kAll = 0xFFFF;
  v = _mm512_add_ps(v, _mm512_mask_shuffle_f32x4(v, kAll, v, v, _MM_SHUFFLE(1, 0, 3, 2)));
  v = _mm512_add_ps(v, _mm512_mask_shuffle_f32x4(v, kAll, v, v, _MM_SHUFFLE(2, 3, 0, 1)));
  __m128 t = _mm512_mask_extractf32x4_ps(_mm_setzero_ps(), 0xF, v, 0);
  t = _mm_add_ps(t, _mm_movehl_ps(t, t));
  t = _mm_add_ss(t, _mm_shuffle_ps(t, t, 1));
  return _mm_cvtss_f32(t);
}

// y[r, o .. o + 4) for every row r, AVX-512: one 16-lane accumulator per
// output (named, not an array, so that they stay in registers at any
// optimization level), the last partial vector of each row loaded under a
// mask.
[[gnu::target("avx512f")]] void block4_avx512(const float* x, const float* w, const float* bias,
                                              float* y, int64_t rows, int64_t in, int64_t out,
                                              int64_t o) {
  const int64_t full = in / 16 * 16;
  const __mmask16 tail = static_cast<__mmask16>((1u << (in - full)) - 1);
  const float *w0 = w + o * in, *w1 = w0 + in, *w2 = w1 + in, *w3 = w2 + in;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * in;
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t i = 0; i < full; i += 16) {
      const __m512 xv = _mm512_loadu_ps(xr + i);
      a0 = _mm512_fmadd_ps(xv, _mm512_loadu_ps(w0 + i), a0);
      a1 = _mm512_fmadd_ps(xv, _mm512_loadu_ps(w1 + i), a1);
      a2 = _mm512_fmadd_ps(xv, _mm512_loadu_ps(w2 + i), a2);
      a3 = _mm512_fmadd_ps(xv, _mm512_loadu_ps(w3 + i), a3);
    }
    if (full < in) {
      const __m512 xv = _mm512_maskz_loadu_ps(tail, xr + full);
      a0 = _mm512_fmadd_ps(xv, _mm512_maskz_loadu_ps(tail, w0 + full), a0);
      a1 = _mm512_fmadd_ps(xv, _mm512_maskz_loadu_ps(tail, w1 + full), a1);
      a2 = _mm512_fmadd_ps(xv, _mm512_maskz_loadu_ps(tail, w2 + full), a2);
      a3 = _mm512_fmadd_ps(xv, _mm512_maskz_loadu_ps(tail, w3 + full), a3);
    }
    float* yr = y + r * out + o;
    const float* b = bias != nullptr ? bias + o : nullptr;
    yr[0] = horizontal_sum(a0) + (b != nullptr ? b[0] : 0.0f);
    yr[1] = horizontal_sum(a1) + (b != nullptr ? b[1] : 0.0f);
    yr[2] = horizontal_sum(a2) + (b != nullptr ? b[2] : 0.0f);
    yr[3] = horizontal_sum(a3) + (b != nullptr ? b[3] : 0.0f);
  }
}

// The same for the one output o.
[[gnu::target("avx512f")]] void block1_avx512(const float* x, const float* w, const float* bias,
                                              float* y, int64_t rows, int64_t in, int64_t out,
                                              int64_t o) {
  const int64_t full = in / 16 * 16;
  const __mmask16 tail = static_cast<__mmask16>((1u << (in - full)) - 1);
  const float* wo = w + o * in;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * in;
    __m512 a = _mm512_setzero_ps();
    for (int64_t i = 0; i < full; i += 16) {
      a = _mm512_fmadd_ps(_mm512_loadu_ps(xr + i), _mm512_loadu_ps(wo + i), a);
    }
    if (full < in) {
      a = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(tail, xr + full),
                          _mm512_maskz_loadu_ps(tail, wo + full), a);
    }
    y[r * out + o] = horizontal_sum(a) + (bias != nullptr ? bias[o] : 0.0f);
  }
}

[[gnu::target("avx512f")]] void row_linear_avx512(const float* x, const float* w, const float* bias,
                                                  float* y, int64_t rows, int64_t in, int64_t out) {
  int64_t o = 0;
  for (; o + 4 <= out; o += 4) block4_avx512(x, w, bias, y, rows, in, out, o);
  for (; o < out; ++o) block1_avx512(x, w, bias, y, rows, in, out, o);
}

// The sum of the 8 lanes.
[[gnu::target("avx2,fma")]] inline float horizontal_sum(__m256 v) {
  __m128 t = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  t = _mm_add_ps(t, _mm_movehl_ps(t, t));
  t = _mm_add_ss(t, _mm_shuffle_ps(t, t, 1));
  return _mm_cvtss_f32(t);
}

// y[r, o .. o + 4) for every row r, AVX2: as block4_avx512 with 8 lanes,
// the elements past the last whole vector of a row added one by one.
[[gnu::target("avx2,fma")]] void block4_avx2(const float* x, const float* w, const float* bias,
                                             float* y, int64_t rows, int64_t in, int64_t out,
                                             int64_t o) {
  const int64_t full = in / 8 * 8;
  const float *w0 = w + o * in, *w1 = w0 + in, *w2 = w1 + in, *w3 = w2 + in;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * in;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int64_t i = 0; i < full; i += 8) {
      const __m256 xv = _mm256_loadu_ps(xr + i);
      a0 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(w0 + i), a0);
      a1 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(w1 + i), a1);
      a2 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(w2 + i), a2);
      a3 = _mm256_fmadd_ps(xv, _mm256_loadu_ps(w3 + i), a3);
    }
    float s0 = horizontal_sum(a0), s1 = horizontal_sum(a1), s2 = horizontal_sum(a2),
          s3 = horizontal_sum(a3);
    for (int64_t i = full; i < in; ++i) {
      s0 += xr[i] * w0[i];
      s1 += xr[i] * w1[i];
      s2 += xr[i] * w2[i];
      s3 += xr[i] * w3[i];
    }
    float* yr = y + r * out + o;
    const float* b = bias != nullptr ? bias + o : nullptr;
    yr[0] = s0 + (b != nullptr ? b[0] : 0.0f);
    yr[1] = s1 + (b != nullptr ? b[1] : 0.0f);
    yr[2] = s2 + (b != nullptr ? b[2] : 0.0f);
    yr[3] = s3 + (b != nullptr ? b[3] : 0.0f);
  }
}

// The same for the one output o.
[[gnu::target("avx2,fma")]] void block1_avx2(const float* x, const float* w, const float* bias,
                                             float* y, int64_t rows, int64_t in, int64_t out,
                                             int64_t o) {
  const int64_t full = in / 8 * 8;
  const float* wo = w + o * in;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * in;
    __m256 a = _mm256_setzero_ps();
    for (int64_t i = 0; i < full; i += 8) {
      a = _mm256_fmadd_ps(_mm256_loadu_ps(xr + i), _mm256_loadu_ps(wo + i), a);
    }
    float sum = horizontal_sum(a);
    for (int64_t i = full; i < in; ++i) sum += xr[i] * wo[i];
    y[r * out + o] = sum + (bias != nullptr ? bias[o] : 0.0f);
  }
}

}  // namespace

[[gnu::target("avx2,fma")]] void row_linear_avx2(const float* x, const float* w, const float* bias,
                                                 float* y, int64_t rows, int64_t in, int64_t out) {
  int64_t o = 0;
  for (; o + 4 <= out; o += 4) block4_avx2(x, w, bias, y, rows, in, out, o);
  for (; o < out; ++o) block1_avx2(x, w, bias, y, rows, in, out, o);
}

// Any x86-64 (or other) CPU: eight independent partial sums per output, a
// loop the compiler vectorizes without reordering any one sum.
void row_linear_portable(const float* x, const float* w, const float* bias, float* y, int64_t rows,
                         int64_t in, int64_t out) {
  constexpr int kLanes = 8;
  const int64_t full = in / kLanes * kLanes;
  for (int64_t o = 0; o < out; ++o) {
    const float* wo = w + o * in;
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * in;
      float lanes[kLanes] = {};
      for (int64_t i = 0; i < full; i += kLanes) {
        for (int j = 0; j < kLanes; ++j) lanes[j] += xr[i + j] * wo[i + j];
      }
      float sum = bias != nullptr ? bias[o] : 0.0f;
      for (int64_t i = full; i < in; ++i) sum += xr[i] * wo[i];
      for (float lane : lanes) sum += lane;
      y[r * out + o] = sum;
    }
  }
}

void row_linear(const float* x, const float* w, const float* bias, float* y, int64_t rows,
                int64_t in, int64_t out) {
  static const bool avx512 = __builtin_cpu_supports("avx512f");
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (avx512) {
    row_linear_avx512(x, w, bias, y, rows, in, out);
  } else if (avx2) {
    row_linear_avx2(x, w, bias, y, rows, in, out);
  } else {
    row_linear_portable(x, w, bias, y, rows, in, out);
  }
}

}  // namespace tandem::kernels::cpu
