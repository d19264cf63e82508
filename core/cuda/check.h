// Turning CUDA, cuBLAS and cuDNN status codes into tandem::Error. For the
// CUDA parts of Tandem only: it includes the CUDA runtime's header.
//
//   TANDEM_CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, stream));
//   TANDEM_CUBLAS_CHECK(cublasSgemm(handle, ...));
//
// The message names the failing call and the error, and the current op and
// the user's line are attached like any TANDEM_CHECK (Note [Call sites] in
// core/error.h).
#pragma once

#include <cuda_runtime_api.h>

#include "core/error.h"

namespace tandem::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call);

}  // namespace tandem::cuda

#define TANDEM_CUDA_CHECK(call)                                                       \
  do {                                                                                \
    if (cudaError_t tandem_cuda_status = (call); tandem_cuda_status != cudaSuccess) { \
      ::tandem::cuda::throw_cuda_error(tandem_cuda_status, #call);                    \
    }                                                                                 \
  } while (false)
