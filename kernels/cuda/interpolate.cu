// The CUDA kernels of kernels/ops/interpolate.cc. interpolate: one thread
// per output element sums what it reads, in double, in the CPU's corner
// order. interpolate_backward: one thread per gradient element adds its
// weighted share to each input element it read, with atomics, so float sums
// may differ from the CPU's in the last bits.
#include <cstdint>
#include <vector>

#include <cuda_runtime_api.h>

#include "kernels/cpu/dtype_visit.h"
#include "kernels/cuda/families.h"
#include "kernels/cuda/for_each.cuh"
#include "kernels/cuda/indexing.cuh"
#include "kernels/interpolation.h"

namespace tandem::kernels {
namespace cuda {
namespace {

// One [N, C] plane's spatial axes, input and output sizes.
struct Resize {
  static constexpr int kMaxAxes = 3;
  int d = 0;
  InterpolationMode mode = InterpolationMode::kNearest;
  bool align_corners = false;
  int64_t from[kMaxAxes] = {}, to[kMaxAxes] = {};
  int64_t in_plane = 1, out_plane = 1;

  Resize(const Shape& input, const Shape& output, const Attrs& attrs)
      : d(input.rank() - 2),
        mode(interpolation_mode(attrs)),
        align_corners(attrs.get_bool("align_corners")) {
    for (int k = 0; k < d; ++k) {
      from[k] = input[k + 2];
      to[k] = output[k + 2];
      in_plane *= from[k];
      out_plane *= to[k];
    }
  }
  int corners() const { return mode == InterpolationMode::kNearest ? 1 : 1 << d; }

  // Calls tap(input offset, weight) for each element output element i reads.
  template <class Tap>
  __device__ __forceinline__ void visit(int64_t i, int corners, Tap tap) const {
    const int64_t plane = i / out_plane;
    int64_t rest = i - plane * out_plane;
    AxisSample samples[kMaxAxes];
    for (int k = d - 1; k >= 0; --k) {
      const int64_t o = rest % to[k];
      rest /= to[k];
      samples[k] = axis_sample(mode, align_corners, o, from[k], to[k]);
    }
    for (int corner = 0; corner < corners; ++corner) {
      double weight = 1;
      int64_t at = 0;
      for (int k = 0; k < d; ++k) {
        const bool high = (corner >> k) & 1;
        weight *= high ? samples[k].weight : 1 - samples[k].weight;
        at = at * from[k] + (high ? samples[k].high : samples[k].low);
      }
      tap(plane * in_plane + at, weight);
    }
  }
};

template <class T>
struct Interpolate {
  const T* x;
  T* out;
  Resize resize;
  int corners;
  __device__ void operator()(int64_t i) const {
    double sum = 0;
    resize.visit(i, corners, [&](int64_t at, double weight) { sum += weight * x[at]; });
    out[i] = static_cast<T>(sum);
  }
};

void interpolate_kernel(const KernelContext& c) {
  const Tensor& x = c.inputs[0];
  const Tensor& out = c.outputs[0];
  const Resize resize(x.shape(), out.shape(), c.attrs);
  visit_floating(x.dtype(), [&]<class T>() {
    for_each(stream_of(c), out.numel(),
             Interpolate<T>{x.data<T>(), out.data<T>(), resize, resize.corners()});
  });
}

template <class T>
struct InterpolateBackward {
  const T* g;
  T* dx;
  Resize resize;
  int corners;
  __device__ void operator()(int64_t i) const {
    const double grad = g[i];
    resize.visit(i, corners, [&](int64_t at, double weight) {
      if (weight != 0) atomic_add(dx + at, static_cast<T>(weight * grad));
    });
  }
};

void interpolate_backward_kernel(const KernelContext& c) {
  const Tensor& g = c.inputs[0];
  const Tensor& dx = c.outputs[0];
  if (dx.nbytes() > 0) {
    TANDEM_CUDA_CHECK(cudaMemsetAsync(dx.raw_data(), 0, dx.nbytes(), stream_of(c)));
  }
  const Resize resize(dx.shape(), g.shape(), c.attrs);
  visit_floating(g.dtype(), [&]<class T>() {
    for_each(stream_of(c), g.numel(),
             InterpolateBackward<T>{g.data<T>(), dx.data<T>(), resize, resize.corners()});
  });
}

}  // namespace
}  // namespace cuda

void register_interpolate_cuda_kernels(Registry& registry) {
  registry.set_cuda_kernel("interpolate", cuda::interpolate_kernel);
  registry.set_cuda_kernel("interpolate_backward", cuda::interpolate_backward_kernel);
}

}  // namespace tandem::kernels
