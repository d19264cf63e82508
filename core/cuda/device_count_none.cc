// cuda_device_count() for builds without the CUDA toolkit.
#include "core/device.h"

namespace tandem {

int cuda_device_count() { return 0; }

}  // namespace tandem
