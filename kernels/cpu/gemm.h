// General matrix products for kernels that run their own loops around them
// (fused attention, the recurrent layers): row-major, either operand
// transposed. float32 goes to oneDNN's sgemm, which runs on every OpenMP
// thread outside a parallel region and on the calling thread inside one;
// float64 to plain loops (the path the finite-difference checks use).
// Internal to kernels/.
//
//   // C [m, n] = A [m, k] B^T (B stored [n, k]) + C
//   gemm(false, true, m, n, k, 1.0f, a, k, b, k, 1.0f, c, n);
#pragma once

#include <cstdint>

namespace tandem::kernels::cpu {

// C = alpha op(A) op(B) + beta C, op transposing where its flag says; lda,
// ldb and ldc are the row strides of the matrices as stored. C is not read
// where beta is 0. Throws tandem::Error if oneDNN fails.
void gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
          const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
          int64_t ldc);
void gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, double alpha,
          const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
          int64_t ldc);

}  // namespace tandem::kernels::cpu
