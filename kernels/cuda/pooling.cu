#include "kernels/cuda/launch.h"
#include "kernels/cuda/pooling.h"

namespace tandem::kernels::cuda::pooling {
namespace {

// Window arithmetic along one axis, for the two kinds of windows. Each gives
// the input positions a window reads, begin(o), begin(o) + step, ... below
// end(o), clipped to the input; the divisor of an average; and the windows
// [first_window, last_window] whose span includes an input (with a
// dilation, a superset of those that read it).
struct FixedAxis {
  int64_t in, out, kernel, stride, padding, dilation;

  __device__ int64_t start(int64_t o) const { return o * stride - padding; }
  // The first tap at or after 0 (the CPU's window_span).
  __device__ int64_t begin(int64_t o) const {
    const int64_t s = start(o);
    return s >= 0 ? s : s + (-s + dilation - 1) / dilation * dilation;
  }
  __device__ int64_t end(int64_t o) const { return min(start(o) + extent(), in); }
  __device__ int64_t step() const { return dilation; }
  __device__ int64_t extent() const { return (kernel - 1) * dilation + 1; }
  __device__ int64_t divisor(int64_t) const { return kernel; }  // Padding counts.
  // Window o spans i when o stride - padding <= i < o stride - padding + extent.
  __device__ int64_t first_window(int64_t i) const {
    const int64_t before = i + padding - extent();  // Windows need o stride > before.
    return before < 0 ? 0 : before / stride + 1;
  }
  __device__ int64_t last_window(int64_t i) const { return min((i + padding) / stride, out - 1); }
};

struct AdaptiveAxis {
  int64_t in, out;

  __device__ int64_t begin(int64_t o) const { return o * in / out; }
  __device__ int64_t end(int64_t o) const { return ((o + 1) * in + out - 1) / out; }
  __device__ int64_t step() const { return 1; }
  __device__ int64_t divisor(int64_t o) const { return end(o) - begin(o); }
  // begin(o) <= i  <=>  o <= ceil((i + 1) out / in) - 1;  end(o) > i  <=>  o >= floor(i out / in).
  __device__ int64_t first_window(int64_t i) const { return i * out / in; }
  __device__ int64_t last_window(int64_t i) const {
    return min(((i + 1) * out + in - 1) / in - 1, out - 1);
  }
};

__device__ int64_t thread_index() { return blockIdx.x * int64_t{blockDim.x} + threadIdx.x; }
__device__ int64_t thread_count() { return int64_t{blockDim.x} * gridDim.x; }

// Where output element o (of planes x ay.out x ax.out) lies.
template <class Axis>
struct OutputIndex {
  int64_t plane, oy, ox;
  __device__ OutputIndex(int64_t o, const Axis& ay, const Axis& ax)
      : plane(o / ax.out / ay.out), oy(o / ax.out % ay.out), ox(o % ax.out) {}
};

// The first maximum of each window in row-major order, NaN winning (the
// CPU's window_argmax): its offset within the plane into `argmax` and its
// value into `y`, each where not null.
template <class T>
__global__ void window_argmax(FixedAxis ay, FixedAxis ax, int64_t count, const T* x, T* y,
                              int64_t* argmax) {
  for (int64_t o = thread_index(); o < count; o += thread_count()) {
    const OutputIndex<FixedAxis> at(o, ay, ax);
    const T* plane = x + at.plane * ay.in * ax.in;
    const int64_t iy0 = ay.begin(at.oy), iy1 = ay.end(at.oy);
    const int64_t ix0 = ax.begin(at.ox), ix1 = ax.end(at.ox);
    int64_t best = iy0 * ax.in + ix0;
    T best_value = plane[best];
    for (int64_t iy = iy0; iy < iy1; iy += ay.step()) {
      for (int64_t ix = ix0; ix < ix1; ix += ax.step()) {
        const T v = plane[iy * ax.in + ix];
        if (v > best_value || (isnan(v) && !isnan(best_value))) {
          best = iy * ax.in + ix;
          best_value = v;
        }
      }
    }
    if (y != nullptr) y[o] = best_value;
    if (argmax != nullptr) argmax[o] = best;
  }
}

// grad_x[i]: the sum of grad_y over the windows whose argmax is i (of
// those whose span includes i, in order: the CPU's order of addition).
template <class T>
__global__ void max_backward(FixedAxis ay, FixedAxis ax, int64_t count, const int64_t* argmax,
                             const T* grad_y, T* grad_x) {
  for (int64_t i = thread_index(); i < count; i += thread_count()) {
    const int64_t plane = i / ax.in / ay.in, iy = i / ax.in % ay.in, ix = i % ax.in;
    const int64_t offset = iy * ax.in + ix, windows = plane * ay.out * ax.out;
    T sum = 0;
    for (int64_t oy = ay.first_window(iy); oy <= ay.last_window(iy); ++oy) {
      for (int64_t ox = ax.first_window(ix); ox <= ax.last_window(ix); ++ox) {
        const int64_t o = windows + oy * ax.out + ox;
        if (argmax[o] == offset) sum += grad_y[o];
      }
    }
    grad_x[i] = sum;
  }
}

template <class T, class Axis>
__global__ void average(Axis ay, Axis ax, int64_t count, const T* x, T* y) {
  for (int64_t o = thread_index(); o < count; o += thread_count()) {
    const OutputIndex<Axis> at(o, ay, ax);
    const T* plane = x + at.plane * ay.in * ax.in;
    T sum = 0;
    for (int64_t iy = ay.begin(at.oy); iy < ay.end(at.oy); iy += ay.step()) {
      for (int64_t ix = ax.begin(at.ox); ix < ax.end(at.ox); ix += ax.step()) {
        sum += plane[iy * ax.in + ix];
      }
    }
    y[o] = sum / static_cast<T>(ay.divisor(at.oy) * ax.divisor(at.ox));
  }
}

// grad_x[i]: each covering window's share, grad_y / divisor, summed.
template <class T, class Axis>
__global__ void average_backward(Axis ay, Axis ax, int64_t count, const T* grad_y, T* grad_x) {
  for (int64_t i = thread_index(); i < count; i += thread_count()) {
    const int64_t plane = i / ax.in / ay.in, iy = i / ax.in % ay.in, ix = i % ax.in;
    const T* windows = grad_y + plane * ay.out * ax.out;
    T sum = 0;
    for (int64_t oy = ay.first_window(iy); oy <= ay.last_window(iy); ++oy) {
      for (int64_t ox = ax.first_window(ix); ox <= ax.last_window(ix); ++ox) {
        sum += windows[oy * ax.out + ox] / static_cast<T>(ay.divisor(oy) * ax.divisor(ox));
      }
    }
    grad_x[i] = sum;
  }
}

FixedAxis fixed(const PoolAxis& a) {
  return {a.in, a.out, a.kernel, a.stride, a.padding, a.dilation};
}

int64_t input_count(const PoolGeometry& g) { return g.planes * g.y.in * g.x.in; }
int64_t output_count(const PoolGeometry& g) { return g.planes * g.y.out * g.x.out; }

// Calls f(axis_y, axis_x) with the device form of the geometry's windows.
template <class F>
void with_axes(const PoolGeometry& g, F f) {
  if (g.y.kernel == 0) {
    f(AdaptiveAxis{g.y.in, g.y.out}, AdaptiveAxis{g.x.in, g.x.out});
  } else {
    f(fixed(g.y), fixed(g.x));
  }
}

}  // namespace

template <class T>
void max_pool2d(const PoolGeometry& g, const T* x, T* y, int64_t* argmax, cudaStream_t stream) {
  const int64_t count = output_count(g);
  if (count == 0) return;
  window_argmax<<<blocks_for(count), kThreadsPerBlock, 0, stream>>>(fixed(g.y), fixed(g.x), count,
                                                                    x, y, argmax);
  TANDEM_CUDA_CHECK_LAUNCH();
}

template <class T>
void max_pool2d_backward(const PoolGeometry& g, const T* x, const T* grad_y, T* grad_x,
                         int64_t* argmax, cudaStream_t stream) {
  const int64_t windows = output_count(g), count = input_count(g);
  if (count == 0) return;
  if (windows > 0) {
    window_argmax<<<blocks_for(windows), kThreadsPerBlock, 0, stream>>>(
        fixed(g.y), fixed(g.x), windows, x, static_cast<T*>(nullptr), argmax);
    TANDEM_CUDA_CHECK_LAUNCH();
  }
  max_backward<<<blocks_for(count), kThreadsPerBlock, 0, stream>>>(fixed(g.y), fixed(g.x), count,
                                                                   argmax, grad_y, grad_x);
  TANDEM_CUDA_CHECK_LAUNCH();
}

template <class T>
void avg_pool2d(const PoolGeometry& g, const T* x, T* y, cudaStream_t stream) {
  const int64_t count = output_count(g);
  if (count == 0) return;
  with_axes(g, [&](auto ay, auto ax) {
    average<<<blocks_for(count), kThreadsPerBlock, 0, stream>>>(ay, ax, count, x, y);
    TANDEM_CUDA_CHECK_LAUNCH();
  });
}

template <class T>
void avg_pool2d_backward(const PoolGeometry& g, const T* grad_y, T* grad_x, cudaStream_t stream) {
  const int64_t count = input_count(g);
  if (count == 0) return;
  with_axes(g, [&](auto ay, auto ax) {
    average_backward<<<blocks_for(count), kThreadsPerBlock, 0, stream>>>(ay, ax, count, grad_y,
                                                                         grad_x);
    TANDEM_CUDA_CHECK_LAUNCH();
  });
}

#define TANDEM_POOLING_INSTANTIATE(T)                                                         \
  template void max_pool2d<T>(const PoolGeometry&, const T*, T*, int64_t*, cudaStream_t);     \
  template void max_pool2d_backward<T>(const PoolGeometry&, const T*, const T*, T*, int64_t*, \
                                       cudaStream_t);                                         \
  template void avg_pool2d<T>(const PoolGeometry&, const T*, T*, cudaStream_t);               \
  template void avg_pool2d_backward<T>(const PoolGeometry&, const T*, T*, cudaStream_t);
TANDEM_POOLING_INSTANTIATE(float)
TANDEM_POOLING_INSTANTIATE(double)
#undef TANDEM_POOLING_INSTANTIATE

}  // namespace tandem::kernels::cuda::pooling
