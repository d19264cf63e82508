#include "core/cuda/check.h"

namespace tandem::cuda {

void throw_cuda_error(cudaError_t status, const char* call) {
  // Clear a non-sticky error, so that the next call does not report it again.
  cudaGetLastError();
  detail::throw_check_failure(str_cat("CUDA error ", cudaGetErrorName(status), " (",
                                      cudaGetErrorString(status), ") in ", call));
}

}  // namespace tandem::cuda
