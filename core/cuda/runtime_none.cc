// core/cuda/runtime.h for builds without CUDA: no devices, and every other
// call (unreachable without a device) says why it cannot work.
#include "core/cuda/runtime.h"
#include "core/device.h"
#include "core/error.h"

namespace tandem {

int cuda_device_count() { return 0; }

namespace cuda {
namespace {

[[noreturn]] void no_cuda() {
  TANDEM_CHECK(false, "this build of Tandem has no CUDA support (configure with TANDEM_CUDA=ON)");
  __builtin_unreachable();
}

}  // namespace

void set_device(int) { no_cuda(); }
void* stream(int) { no_cuda(); }
void synchronize(void*) { no_cuda(); }
void* record_event(void*) { no_cuda(); }
void wait_and_release_event(void*) { no_cuda(); }
void copy_async(void*, const void*, size_t, void*) { no_cuda(); }
void begin_capture(void*) { no_cuda(); }
void* end_capture(void*) { no_cuda(); }
void launch_graph(void*, void*) { no_cuda(); }
void* device_malloc(int, size_t) { no_cuda(); }
void device_free(int, void*) { no_cuda(); }
void* pinned_malloc(size_t) { no_cuda(); }
void pinned_free(void*) { no_cuda(); }

}  // namespace cuda
}  // namespace tandem
