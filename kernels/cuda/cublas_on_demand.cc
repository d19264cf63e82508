// cuBLAS, loaded when the first GEMM runs rather than when the program
// starts.
//
// Note [cuBLAS on demand]
// libcublas pulls in libcublasLt, over 500 MB of code whose relocation costs
// every process that links it about 0.4 s at start-up on the development VM,
// GPU or not (measured: a program that only calls cudaGetDeviceCount starts
// in 10 ms without cuBLAS linked, 440 ms with it). Tandem links everything
// into one library, so a CPU-only program, or each of the test suite's
// thousand processes, would pay that for nothing. So tandem_kernels does not
// link cuBLAS: this file defines the few cuBLAS entry points the kernels
// call, and each opens libcublas the first time it runs and forwards to the
// real function. A machine without the library gets a tandem::Error naming
// it from the op that needed it. (PyTorch loads its NVRTC stubs the same
// way.)
#include <dlfcn.h>

#include <cublas_v2.h>

#include "core/error.h"

namespace tandem::kernels::cuda {
namespace {

// The soname of the toolkit the kernels were compiled against.
#define TANDEM_SONAME(major) "libcublas.so." #major
#define TANDEM_SONAME_OF(major) TANDEM_SONAME(major)
constexpr const char* kLibrary = TANDEM_SONAME_OF(CUBLAS_VER_MAJOR);
#undef TANDEM_SONAME_OF
#undef TANDEM_SONAME

void* library() {
  static void* handle = [] {
    // Never closed: handles created from it outlive every user (see Note
    // [Library handles] in handles.cc).
    void* h = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
    TANDEM_CHECK(h != nullptr, "cannot load cuBLAS (", kLibrary, "): ", dlerror());
    return h;
  }();
  return handle;
}

template <class Fn>
Fn resolve(const char* name) {
  void* symbol = dlsym(library(), name);
  TANDEM_CHECK(symbol != nullptr, "cuBLAS (", kLibrary, ") has no function ", name);
  return reinterpret_cast<Fn>(symbol);
}

}  // namespace
}  // namespace tandem::kernels::cuda

// Each forwards to the function of the same name in libcublas, resolved once.
#define TANDEM_FORWARD(returns, name, ...) \
  static const auto real = ::tandem::kernels::cuda::resolve<returns (*)(__VA_ARGS__)>(#name);

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  TANDEM_FORWARD(cublasStatus_t, cublasCreate_v2, cublasHandle_t*)
  return real(handle);
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  TANDEM_FORWARD(cublasStatus_t, cublasSetStream_v2, cublasHandle_t, cudaStream_t)
  return real(handle, stream);
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k, const void* alpha,
                            const void* A, cudaDataType Atype, int lda, const void* B,
                            cudaDataType Btype, int ldb, const void* beta, void* C,
                            cudaDataType Ctype, int ldc, cublasComputeType_t computeType,
                            cublasGemmAlgo_t algo) {
  TANDEM_FORWARD(cublasStatus_t, cublasGemmEx, cublasHandle_t, cublasOperation_t, cublasOperation_t,
                 int, int, int, const void*, const void*, cudaDataType, int, const void*,
                 cudaDataType, int, const void*, void*, cudaDataType, int, cublasComputeType_t,
                 cublasGemmAlgo_t)
  return real(handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype,
              ldc, computeType, algo);
}

cublasStatus_t cublasGemmStridedBatchedEx_64(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int64_t m, int64_t n,
    int64_t k, const void* alpha, const void* A, cudaDataType Atype, int64_t lda,
    long long int strideA, const void* B, cudaDataType Btype, int64_t ldb, long long int strideB,
    const void* beta, void* C, cudaDataType Ctype, int64_t ldc, long long int strideC,
    int64_t batchCount, cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  TANDEM_FORWARD(cublasStatus_t, cublasGemmStridedBatchedEx_64, cublasHandle_t, cublasOperation_t,
                 cublasOperation_t, int64_t, int64_t, int64_t, const void*, const void*,
                 cudaDataType, int64_t, long long int, const void*, cudaDataType, int64_t,
                 long long int, const void*, void*, cudaDataType, int64_t, long long int, int64_t,
                 cublasComputeType_t, cublasGemmAlgo_t)
  return real(handle, transa, transb, m, n, k, alpha, A, Atype, lda, strideA, B, Btype, ldb,
              strideB, beta, C, Ctype, ldc, strideC, batchCount, computeType, algo);
}

const char* cublasGetStatusName(cublasStatus_t status) {
  TANDEM_FORWARD(const char*, cublasGetStatusName, cublasStatus_t)
  return real(status);
}

const char* cublasGetStatusString(cublasStatus_t status) {
  TANDEM_FORWARD(const char*, cublasGetStatusString, cublasStatus_t)
  return real(status);
}

}  // extern "C"

#undef TANDEM_FORWARD
