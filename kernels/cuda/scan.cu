// The CUDA kernels of kernels/ops/scan.cc: cumsum, cumprod and
// cumprod_backward. One thread runs each line along the axis, in the CPU's
// order and with its accumulators (double for floats, wrapping int64 for
// integers), so results match the CPU's exactly. Neighbouring threads take
// neighbouring inner positions, so a scan over any axis but the last reads
// consecutive addresses. A few long lines leave most of the GPU idle; a
// blocked parallel scan would fix that when a workload needs it.
#include <cstdint>
#include <type_traits>

#include "kernels/cpu/dtype_visit.h"
#include "kernels/cuda/families.h"
#include "kernels/cuda/for_each.cuh"
#include "kernels/integer_math.h"

namespace tandem::kernels {
namespace cuda {
namespace {

// x as [outer, length, inner] around the scanned axis; element t of a line,
// in the direction of the scan, is at at(line, t).
struct ScanLines {
  int64_t length = 1, inner = 1;
  bool reverse = false;
  bool exclusive = false;

  ScanLines(const Shape& shape, const Attrs& attrs)
      : reverse(attrs.get_bool("reverse")), exclusive(attrs.get_bool("exclusive")) {
    const int axis = shape.normalize_axis(attrs.get_int("axis"));
    length = shape[axis];
    for (int d = axis + 1; d < shape.rank(); ++d) inner *= shape[d];
  }
  __device__ __forceinline__ int64_t at(int64_t line, int64_t t) const {
    const int64_t o = line / inner, i = line - o * inner;
    return (o * length + (reverse ? length - 1 - t : t)) * inner + i;
  }
};

int64_t lines_of(const Tensor& x, const ScanLines& lines) {
  return lines.length == 0 ? 0 : x.numel() / lines.length;
}

template <class T>
using Accumulator = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;

template <class T, bool kProduct>
struct Scan {
  const T* in;
  T* out;
  ScanLines lines;
  __device__ void operator()(int64_t line) const {
    using A = Accumulator<T>;
    A acc = kProduct ? 1 : 0;
    for (int64_t t = 0; t < lines.length; ++t) {
      const int64_t at = lines.at(line, t);
      const A value = static_cast<A>(in[at]);
      if (lines.exclusive) out[at] = static_cast<T>(acc);
      if constexpr (std::is_floating_point_v<T>) {
        acc = kProduct ? acc * value : acc + value;
      } else {
        acc = kProduct ? integer::mul(acc, value) : integer::add(acc, value);
      }
      if (!lines.exclusive) out[at] = static_cast<T>(acc);
    }
  }
};

template <bool kProduct>
void scan_kernel(const KernelContext& c) {
  const Tensor& x = c.inputs[0];
  const ScanLines lines(x.shape(), c.attrs);
  visit_numeric(x.dtype(), [&]<class T>() {
    for_each(stream_of(c), lines_of(x, lines),
             Scan<T, kProduct>{x.data<T>(), c.outputs[0].data<T>(), lines});
  });
}

// Note [Cumulative product gradient] in kernels/ops/scan.cc: R (or S) runs
// back through the line into `after` (double, as the CPU keeps it), then
// the prefix product P runs forward.
template <class T>
struct CumprodBackward {
  const T* x;
  const T* g;
  T* dx;
  double* after;  // Laid out like x.
  ScanLines lines;
  __device__ void operator()(int64_t line) const {
    const int64_t n = lines.length;
    double next = 0;
    for (int64_t t = n - 1; t >= 0; --t) {
      const double x_next = t + 1 < n ? static_cast<double>(x[lines.at(line, t + 1)]) : 0.0;
      const double g_next = t + 1 < n ? static_cast<double>(g[lines.at(line, t + 1)]) : 0.0;
      const double g_here = g[lines.at(line, t)];
      next = lines.exclusive ? g_next + x_next * next : g_here + x_next * next;
      after[lines.at(line, t)] = next;
    }
    double before = 1;
    for (int64_t t = 0; t < n; ++t) {
      const int64_t at = lines.at(line, t);
      dx[at] = static_cast<T>(before * after[at]);
      before *= static_cast<double>(x[at]);
    }
  }
};

void cumprod_backward_kernel(const KernelContext& c) {
  const Tensor& x = c.inputs[0];
  const ScanLines lines(x.shape(), c.attrs);
  const Tensor after = Tensor::empty(x.shape(), DType::kFloat64, c.run.device);
  visit_floating(x.dtype(), [&]<class T>() {
    for_each(stream_of(c), lines_of(x, lines),
             CumprodBackward<T>{x.data<T>(), c.inputs[1].data<T>(), c.outputs[0].data<T>(),
                                after.data<double>(), lines});
  });
}

}  // namespace
}  // namespace cuda

void register_scan_cuda_kernels(Registry& registry) {
  registry.set_cuda_kernel("cumsum", cuda::scan_kernel<false>);
  registry.set_cuda_kernel("cumprod", cuda::scan_kernel<true>);
  registry.set_cuda_kernel("cumprod_backward", cuda::cumprod_backward_kernel);
}

}  // namespace tandem::kernels
