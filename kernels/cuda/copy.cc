// The CUDA kernel of to_device (kernels/ops/device_copy.cc): every copy
// that involves a GPU, as one asynchronous copy on the op's stream.
//
// The engine finishes such a copy only when the device has run it, since it
// touches memory the stream does not order (Note [GPU ops complete at
// launch] in core/engine/threaded_engine.cc). A copy to or from pageable
// host memory is staged by the driver and the call returns only when the
// host side is done; pinned memory (Tensor::pin_memory) is copied by the
// device while the worker goes on.
#include "core/cuda/runtime.h"
#include "kernels/cuda/families.h"
#include "kernels/registry.h"

namespace tandem::kernels {
namespace {

void copy_cuda(const KernelContext& c) {
  const Tensor& in = c.inputs[0];
  if (in.nbytes() != 0)
    cuda::copy_async(c.outputs[0].raw_data(), in.raw_data(), in.nbytes(), c.run.stream);
}

}  // namespace

void register_copy_cuda_kernels(Registry& registry) {
  registry.set_cuda_kernel("to_device", copy_cuda);
}

}  // namespace tandem::kernels
