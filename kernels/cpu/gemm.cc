#include "kernels/cpu/gemm.h"

#include <oneapi/dnnl/dnnl.h>

#include "core/error.h"
#include "kernels/cpu/onednn.h"

namespace tandem::kernels::cpu {

void gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, float alpha,
          const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
          int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {  // An empty sum; sgemm would refuse the leading dimensions of empty operands.
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == 0 ? 0 : beta * c[i * ldc + j];
    }
    return;
  }
  onednn::warm_up_gemm();  // Note [oneDNN's gemm, warmed when first needed].
  const dnnl_status_t status = dnnl_sgemm(transpose_a ? 'T' : 'N', transpose_b ? 'T' : 'N', m, n, k,
                                          alpha, a, lda, b, ldb, beta, c, ldc);
  TANDEM_CHECK(status == dnnl_success, "oneDNN's sgemm failed (status ", static_cast<int>(status),
               ") for a ", m, "x", k, " by ", k, "x", n, " product");
}

void gemm(bool transpose_a, bool transpose_b, int64_t m, int64_t n, int64_t k, double alpha,
          const double* a, int64_t lda, const double* b, int64_t ldb, double beta, double* c,
          int64_t ldc) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t p = 0; p < k; ++p) {
        sum += (transpose_a ? a[p * lda + i] : a[i * lda + p]) *
               (transpose_b ? b[j * ldb + p] : b[p * ldb + j]);
      }
      double& out = c[i * ldc + j];
      out = alpha * sum + (beta == 0 ? 0 : beta * out);
    }
  }
}

}  // namespace tandem::kernels::cpu
