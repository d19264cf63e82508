// core/cuda/runtime.h for builds with the CUDA toolkit.
#include "core/cuda/runtime.h"

#include <mutex>
#include <shared_mutex>
#include <vector>

#include <cuda_runtime_api.h>

#include "core/cuda/check.h"
#include "core/device.h"
#include "core/spinlock.h"

namespace tandem {

// Without a GPU or a driver the runtime reports an error, which here means
// "no devices".
int cuda_device_count() {
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();  // Clear the error so later CUDA calls start clean.
      return 0;
    }
    return n;
  }();
  return count;
}

namespace cuda {
namespace {

// The current device of the calling thread, set for a scope.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    TANDEM_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) TANDEM_CUDA_CHECK(cudaSetDevice(device));
    changed_ = previous_ != device;
  }
  ~DeviceScope() {
    if (changed_) cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
  bool changed_ = false;
};

void check_device(int device) {
  TANDEM_CHECK(device >= 0 && device < cuda_device_count(), "no device cuda:", device,
               cuda_device_count() == 0
                   ? std::string(": this machine has no CUDA device")
                   : str_cat(": this machine has ", cuda_device_count(), " CUDA device(s)"));
}

// Events are created once and reused; creating one costs a driver call.
class EventPool {
 public:
  cudaEvent_t take() {
    {
      std::lock_guard lock(mu_);
      if (!free_.empty()) {
        cudaEvent_t event = free_.back();
        free_.pop_back();
        return event;
      }
    }
    cudaEvent_t event;
    // No timing: a timed event costs more to record.
    TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    return event;
  }
  void give_back(cudaEvent_t event) {
    std::lock_guard lock(mu_);
    free_.push_back(event);
  }

 private:
  Spinlock mu_;
  std::vector<cudaEvent_t> free_;
};

// The pool of the calling thread's current device: an event can only be
// recorded on a stream of the device it was created on, so each device has
// its own. (Workers and event watchers keep their device current.) Never
// destroyed: destroying CUDA objects after the driver has unloaded at exit is
// an error, and the process is ending anyway.
EventPool& events() {
  static auto* pools = new std::vector<EventPool>(cuda_device_count());
  int device = 0;
  TANDEM_CUDA_CHECK(cudaGetDevice(&device));
  return (*pools)[device];
}

// Note [No waiting on a stream in capture]
// Synchronizing a stream while another thread captures it (the executor's
// CUDA graph, on the device's worker) is not allowed: the call fails, does
// not wait, and invalidates the capture. Waits (wait(), wait_all(), a copy
// between GPUs) therefore hold this lock shared and a capture holds it
// exclusively; the capturing thread itself skips it, so that a kernel that
// synchronizes fails the capture as intended instead of deadlocking.
std::shared_mutex& capture_mu() {
  static auto* mu = new std::shared_mutex;
  return *mu;
}
thread_local bool capturing = false;

}  // namespace

void set_device(int device) {
  check_device(device);
  TANDEM_CUDA_CHECK(cudaSetDevice(device));
}

void* stream(int device) {
  check_device(device);
  static std::mutex mu;
  static auto* streams = new std::vector<cudaStream_t>(cuda_device_count(), nullptr);
  std::lock_guard lock(mu);
  cudaStream_t& s = (*streams)[device];
  if (s == nullptr) {
    DeviceScope scope(device);
    // Non-blocking: the legacy default stream, which other libraries may
    // use, does not serialize with it.
    TANDEM_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  }
  return s;
}

void synchronize(void* s) {
  std::shared_lock<std::shared_mutex> lock;  // Note [No waiting on a stream in capture]
  if (!capturing) lock = std::shared_lock(capture_mu());
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(static_cast<cudaStream_t>(s)));
}

void* record_event(void* s) {
  cudaEvent_t event = events().take();
  TANDEM_CUDA_CHECK(cudaEventRecord(event, static_cast<cudaStream_t>(s)));
  return event;
}

void wait_and_release_event(void* e) {
  auto event = static_cast<cudaEvent_t>(e);
  cudaError_t status = cudaEventSynchronize(event);
  events().give_back(event);
  TANDEM_CUDA_CHECK(status);
}

void copy_async(void* dst, const void* src, size_t nbytes, void* s) {
  TANDEM_CUDA_CHECK(
      cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, static_cast<cudaStream_t>(s)));
}

void begin_capture(void* s) {
  // Thread-local mode: other threads' CUDA calls (the frontend allocating,
  // the event watcher) go on undisturbed, and an unsafe call on this thread
  // fails the capture instead of the process.
  // Note [No waiting on a stream in capture]: held until end_capture.
  capture_mu().lock();
  cudaError_t status =
      cudaStreamBeginCapture(static_cast<cudaStream_t>(s), cudaStreamCaptureModeThreadLocal);
  if (status == cudaSuccess) {
    capturing = true;
  } else {
    capture_mu().unlock();
  }
  TANDEM_CUDA_CHECK(status);
}

void* end_capture(void* s) {
  cudaGraph_t graph = nullptr;
  cudaError_t status = cudaStreamEndCapture(static_cast<cudaStream_t>(s), &graph);
  if (capturing) {
    capturing = false;
    capture_mu().unlock();
  }
  cudaGraphExec_t exec = nullptr;
  if (status == cudaSuccess && graph != nullptr) {
    status = cudaGraphInstantiate(&exec, graph, 0);
  }
  if (graph != nullptr) cudaGraphDestroy(graph);
  if (status != cudaSuccess) {
    cudaGetLastError();  // A failed capture is an answer here, not an error.
    return nullptr;
  }
  return exec;
}

void launch_graph(void* graph, void* s) {
  TANDEM_CUDA_CHECK(
      cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph), static_cast<cudaStream_t>(s)));
}

void* device_malloc(int device, size_t nbytes) {
  check_device(device);
  DeviceScope scope(device);
  void* block = nullptr;
  if (cudaMalloc(&block, nbytes) != cudaSuccess) {
    cudaGetLastError();  // Out of memory is not sticky; clear it.
    return nullptr;
  }
  return block;
}

void device_free(int device, void* block) {
  DeviceScope scope(device);
  TANDEM_CUDA_CHECK(cudaFree(block));
}

void* pinned_malloc(size_t nbytes) {
  void* block = nullptr;
  if (cudaHostAlloc(&block, nbytes, cudaHostAllocPortable) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  return block;
}

void pinned_free(void* block) { TANDEM_CUDA_CHECK(cudaFreeHost(block)); }

}  // namespace cuda
}  // namespace tandem
