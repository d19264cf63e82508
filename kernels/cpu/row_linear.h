// A fully connected layer for a few rows of input (batch-1 inference, a
// recurrent cell stepping one sample), on the calling thread.
//
//   // y[r, o] = bias[o] + sum_i x[r, i] * w[o, i], for r < rows, o < out
//   row_linear(x, w, bias, y, rows, in, out);
//
// Note [Linear for a few rows]
// With one row, a linear layer is a matrix-vector product: every weight is
// read once and used once, so its speed is how fast the weights stream from
// the cache, and any fixed cost per call shows. oneDNN's matmul primitive is
// built for products that reuse what they load: on the 2-core development
// machine the tutorial's MLP (784-256-128-10) took ~60 us at batch 1 through
// it, on one thread or two, with the primitive descriptor built anew at each
// call and, on two threads, an OpenMP team woken for a few microseconds of
// work. Weights are stored [out, in], so each output is a dot product of two
// contiguous rows: four outputs at a time share each load of x, and sixteen
// lanes of AVX-512 or eight of AVX2 with FMA (where the CPU has them, else a
// portable loop the compiler vectorizes for SSE2, the build's baseline)
// accumulate each. On a 2-core AVX2 machine the standard MLP at batch 1
// spent a third of its time in the portable loop. Sums are in a different order than oneDNN's,
// so results agree with it to rounding, not bit for bit.
#pragma once

#include <algorithm>
#include <cstdint>

namespace tandem::kernels::cpu {

// Rows of at most this many take row_linear (kernels/ops/matmul.cc): beyond
// it the weights are reused enough for oneDNN's blocked kernels to win.
inline constexpr int64_t kRowLinearMaxRows = 4;
// Nor more weights than this (16 MiB of float32, a few times what a core's
// L2 cache holds): beyond it streaming them from memory on one core is slower
// than oneDNN on every core.
inline constexpr int64_t kRowLinearMaxWeights = int64_t{1} << 22;

// Whether a layer of `rows` rows, `in` inputs and `out` outputs takes
// row_linear. linear's kernel and its OpDef::one_core both ask this.
inline bool row_linear_fits(int64_t rows, int64_t in, int64_t out) {
  return rows <= kRowLinearMaxRows && in <= kRowLinearMaxWeights / std::max<int64_t>(out, 1);
}

// y = x w^T + bias for x [rows, in], w [out, in], bias [out] (or null for
// none), y [rows, out]; all row-major and contiguous. Single-threaded.
void row_linear(const float* x, const float* w, const float* bias, float* y, int64_t rows,
                int64_t in, int64_t out);

// The paths row_linear chooses from, public so that tests check each one the
// machine can run: AVX2 with FMA (where the CPU has them, without AVX-512)
// and portable code (on CPUs with neither).
void row_linear_avx2(const float* x, const float* w, const float* bias, float* y, int64_t rows,
                     int64_t in, int64_t out);
void row_linear_portable(const float* x, const float* w, const float* bias, float* y, int64_t rows,
                         int64_t in, int64_t out);

}  // namespace tandem::kernels::cpu
