#include "kernels/cuda/handles.h"

#include <mutex>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include <cuda_runtime_api.h>

#include "core/cuda/check.h"
#include "kernels/cuda/launch.h"

namespace tandem::kernels::cuda {

// Note [Library handles]
// A cuBLAS or cuDNN handle is tied to the device current when it was
// created, may be used by one thread at a time, and is costly to create
// (cuDNN loads kernels, cuBLAS sets up its workspace). So a thread leases
// one handle per device on its first op there and gives it back to a
// process-wide pool when it exits: threads that come and go (an engine
// restarted by a test, a pushing thread running a tiny op inline) reuse
// handles instead of creating more. The stream is set on every call, since
// it is the op's, not the thread's.
//
// Nothing here is ever destroyed: the pools are leaked on purpose. At
// process exit the CUDA driver may shut down before static destructors run,
// and cublasDestroy / cudnnDestroy then fail or crash; the OS reclaims the
// handles with the process.

namespace {

template <class Handle>
class HandlePool {
 public:
  using CreateFn = Handle (*)();

  explicit HandlePool(CreateFn create) : create_(create) {}

  // A free handle of the current device, `device`, or a new one.
  Handle acquire(int device) {
    {
      std::lock_guard lock(mutex_);
      std::vector<Handle>& free = free_[device];
      if (!free.empty()) {
        Handle handle = free.back();
        free.pop_back();
        return handle;
      }
    }
    int current = -1;
    TANDEM_CUDA_CHECK(cudaGetDevice(&current));
    TANDEM_INTERNAL_ASSERT(current == device, "a kernel for cuda:", device,
                           " runs on a thread whose current device is cuda:", current);
    return create_();
  }

  void release(int device, Handle handle) {
    std::lock_guard lock(mutex_);
    free_[device].push_back(handle);
  }

 private:
  const CreateFn create_;
  std::mutex mutex_;
  absl::flat_hash_map<int, std::vector<Handle>> free_;
};

// The handles one thread holds, by device; back to the pool at thread exit.
template <class Handle>
class Leases {
 public:
  explicit Leases(HandlePool<Handle>& pool) : pool_(pool) {}
  Leases(const Leases&) = delete;
  Leases& operator=(const Leases&) = delete;
  ~Leases() {
    for (const auto& [device, handle] : held_) pool_.release(device, handle);
  }

  Handle get(int device) {
    for (const auto& [held_device, handle] : held_) {
      if (held_device == device) return handle;
    }
    Handle handle = pool_.acquire(device);
    held_.emplace_back(device, handle);
    return handle;
  }

 private:
  HandlePool<Handle>& pool_;
  std::vector<std::pair<int, Handle>> held_;  // A thread uses one or two devices.
};

cublasHandle_t create_cublas() {
  cublasHandle_t handle;
  TANDEM_CUBLAS_CHECK(cublasCreate(&handle));
  return handle;
}

cudnnHandle_t create_cudnn() {
  cudnnHandle_t handle;
  TANDEM_CUDNN_CHECK(cudnnCreate(&handle));
  return handle;
}

}  // namespace

cublasHandle_t cublas_handle(const KernelContext& context) {
  static auto& pool = *new HandlePool<cublasHandle_t>(create_cublas);  // Leaked, see above.
  thread_local Leases<cublasHandle_t> leases(pool);
  cublasHandle_t handle = leases.get(context.run.device.index());
  TANDEM_CUBLAS_CHECK(cublasSetStream(handle, stream_of(context)));
  return handle;
}

cudnnHandle_t cudnn_handle(const KernelContext& context) {
  static auto& pool = *new HandlePool<cudnnHandle_t>(create_cudnn);  // Leaked, see above.
  thread_local Leases<cudnnHandle_t> leases(pool);
  cudnnHandle_t handle = leases.get(context.run.device.index());
  TANDEM_CUDNN_CHECK(cudnnSetStream(handle, stream_of(context)));
  return handle;
}

void throw_cublas_error(cublasStatus_t status, const char* call) {
  detail::throw_check_failure(str_cat("cuBLAS error ", cublasGetStatusName(status), " (",
                                      cublasGetStatusString(status), ") in ", call));
}

void throw_cudnn_error(cudnnStatus_t status, const char* call) {
  // cuDNN 9 keeps a message with the details (which parameter, which limit).
  char details[512] = "";
  cudnnGetLastErrorString(details, sizeof(details));
  detail::throw_check_failure(str_cat("cuDNN error ", cudnnGetErrorString(status), " in ", call,
                                      details[0] != '\0' ? ": " : "", details));
}

}  // namespace tandem::kernels::cuda
