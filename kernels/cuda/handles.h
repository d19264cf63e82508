// cuBLAS and cuDNN handles for the CUDA kernels, and the checks that turn
// their status codes into tandem::Error. For the plain C++ kernel files
// (matmul.cc, conv_pool.cc): includes the libraries' headers.
//
//   void matmul_kernel(const KernelContext& c) {
//     cublasHandle_t handle = cuda::cublas_handle(c);  // Bound to the op's stream.
//     TANDEM_CUBLAS_CHECK(cublasGemmEx(handle, ...));
//   }
//
// A handle belongs to the calling thread until it exits (Note [Library
// handles] in handles.cc); use it only within the kernel that asked for it.
#pragma once

#include <cublas_v2.h>
#include <cudnn.h>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/registry.h"

namespace tandem::kernels::cuda {

// The calling thread's handle for the op's device, created on first use,
// with its stream set to the op's stream.
cublasHandle_t cublas_handle(const KernelContext& context);
cudnnHandle_t cudnn_handle(const KernelContext& context);

// A constant the libraries take by pointer as alpha or beta: a double for
// float64 data (CUBLAS_COMPUTE_64F, CUDNN_DATA_DOUBLE), a float otherwise.
class Scalar {
 public:
  constexpr explicit Scalar(double value) : f32_(static_cast<float>(value)), f64_(value) {}
  const void* for_dtype(DType dtype) const {
    return dtype == DType::kFloat64 ? static_cast<const void*>(&f64_) : &f32_;
  }

 private:
  float f32_;
  double f64_;
};
inline constexpr Scalar kOne(1), kZero(0);

[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call);
[[noreturn]] void throw_cudnn_error(cudnnStatus_t status, const char* call);

}  // namespace tandem::kernels::cuda

// The message names the call and the library's status, e.g. "cuBLAS error
// CUBLAS_STATUS_INVALID_VALUE (an invalid numeric value was used as an
// argument) in cublasGemmEx(...)".
#define TANDEM_CUBLAS_CHECK(call)                                               \
  do {                                                                          \
    if (cublasStatus_t tandem_cublas_status = (call);                           \
        tandem_cublas_status != CUBLAS_STATUS_SUCCESS) {                        \
      ::tandem::kernels::cuda::throw_cublas_error(tandem_cublas_status, #call); \
    }                                                                           \
  } while (false)

#define TANDEM_CUDNN_CHECK(call)                                                                   \
  do {                                                                                             \
    if (cudnnStatus_t tandem_cudnn_status = (call); tandem_cudnn_status != CUDNN_STATUS_SUCCESS) { \
      ::tandem::kernels::cuda::throw_cudnn_error(tandem_cudnn_status, #call);                      \
    }                                                                                              \
  } while (false)
