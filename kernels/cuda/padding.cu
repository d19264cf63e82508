// The CUDA kernels of kernels/ops/padding.cc: pad in every mode, one thread
// per output element reading the input position kernels/padding.h names
// (constant padding writes `value` where that is outside the input), and
// pad_backward, one thread per gradient element adding into the element it
// copied, with atomics: float sums may differ from the CPU's in the last
// bits.
#include <cstdint>
#include <vector>

#include <cuda_runtime_api.h>

#include "kernels/cpu/dtype_visit.h"
#include "kernels/cuda/element_types.cuh"
#include "kernels/cuda/families.h"
#include "kernels/cuda/for_each.cuh"
#include "kernels/cuda/indexing.cuh"
#include "kernels/padding.h"

namespace tandem::kernels {
namespace cuda {
namespace {

// The padded shape's axes (innermost first) and where each reads the input.
struct PadLayout {
  static constexpr int kMaxAxes = 8;  // Tandem's tensors have rank <= 8.
  int rank = 0;
  PadMode mode = PadMode::kConstant;
  int64_t padded[kMaxAxes] = {}, size[kMaxAxes] = {}, before[kMaxAxes] = {}, stride[kMaxAxes] = {};

  PadLayout(const Shape& input, const Shape& out, const std::vector<int64_t>& pads, PadMode m)
      : rank(input.rank()), mode(m) {
    TANDEM_CHECK(rank <= kMaxAxes, "pad on the GPU takes at most ", kMaxAxes, " axes, got ",
                 input.to_string());
    for (int k = 0; k < rank; ++k) {
      const int axis = rank - 1 - k;
      padded[k] = out[axis];
      size[k] = input[axis];
      before[k] = pads[2 * axis];
      stride[k] = input.stride(axis);
    }
  }
  // The input offset output element o reads, or -1 for constant padding.
  __device__ __forceinline__ int64_t operator()(int64_t o) const {
    int64_t at = 0;
    for (int k = 0; k < rank; ++k) {
      const int64_t rest = o / padded[k], coordinate = o - rest * padded[k];
      o = rest;
      const int64_t i = pad_source(mode, coordinate, before[k], size[k]);
      if (i < 0 || i >= size[k]) return -1;
      at += i * stride[k];
    }
    return at;
  }
};

template <class U>
struct Pad {
  const U* x;
  U* out;
  U fill;
  PadLayout source;
  __device__ void operator()(int64_t o) const {
    const int64_t i = source(o);
    out[o] = i >= 0 ? x[i] : fill;
  }
};

void pad_kernel(const KernelContext& c) {
  const Tensor& x = c.inputs[0];
  const Tensor& out = c.outputs[0];
  const PadLayout source(x.shape(), out.shape(), c.attrs.get_ints("pads"), pad_mode(c.attrs));
  with_value_bits(x.dtype(), c.attrs.get_float("value"), [&]<class U>(U fill) {
    for_each(
        stream_of(c), out.numel(),
        Pad<U>{static_cast<const U*>(x.raw_data()), static_cast<U*>(out.raw_data()), fill, source});
  });
}

template <class T>
struct PadBackward {
  const T* g;
  T* dx;
  PadLayout source;
  __device__ void operator()(int64_t o) const { atomic_add(dx + source(o), g[o]); }
};

void pad_backward_kernel(const KernelContext& c) {
  const Tensor& g = c.inputs[0];
  const Tensor& dx = c.outputs[0];
  if (dx.nbytes() > 0) {
    TANDEM_CUDA_CHECK(cudaMemsetAsync(dx.raw_data(), 0, dx.nbytes(), stream_of(c)));
  }
  const PadLayout source(dx.shape(), g.shape(), c.attrs.get_ints("pads"), pad_mode(c.attrs));
  visit_floating(g.dtype(), [&]<class T>() {
    for_each(stream_of(c), g.numel(), PadBackward<T>{g.data<T>(), dx.data<T>(), source});
  });
}

}  // namespace
}  // namespace cuda

void register_padding_cuda_kernels(Registry& registry) {
  registry.set_cuda_kernel("pad", cuda::pad_kernel);
  registry.set_cuda_kernel("pad_backward", cuda::pad_backward_kernel);
}

}  // namespace tandem::kernels
