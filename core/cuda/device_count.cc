// cuda_device_count() for builds with the CUDA toolkit. Without a GPU or a
// driver, the runtime reports an error, which here means "no devices".
#include <cuda_runtime_api.h>

#include "core/device.h"

namespace tandem {

int cuda_device_count() {
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      cudaGetLastError();  // Clear the sticky error so later CUDA calls start clean.
      return 0;
    }
    return n;
  }();
  return count;
}

}  // namespace tandem
