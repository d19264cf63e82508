// The CUDA kernels of kernels/ops/sort.cc: sort and topk. One thread orders
// each line with a bottom-up merge sort of its positions (scratch: two int64
// arrays the size of x), under the CPU's total order (value, NaN largest,
// then position), so both devices give the same values and indices. Lines
// run in parallel; one long line runs on one thread, which is slow: a
// segmented radix sort would serve that case when a workload needs it.
#include <cstdint>

#include "kernels/cpu/dtype_visit.h"
#include "kernels/cuda/families.h"
#include "kernels/cuda/for_each.cuh"

namespace tandem::kernels {
namespace cuda {
namespace {

template <class T>
__device__ __forceinline__ bool ascending(T a, T b) {
  return !(a != a) && ((b != b) || a < b);
}

template <class T>
struct OrderLines {
  const T* x;
  T* values;
  int64_t* indices;
  int64_t* order;   // Scratch, n per line.
  int64_t* merged;  // Scratch, n per line.
  int64_t length, inner, count;
  bool descending;

  // Whether position a of a line comes before position b.
  __device__ __forceinline__ bool before(const T* line, int64_t a, int64_t b) const {
    const T va = line[a * inner], vb = line[b * inner];
    const bool a_first = descending ? ascending(vb, va) : ascending(va, vb);
    const bool b_first = descending ? ascending(va, vb) : ascending(vb, va);
    return a_first || (!b_first && a < b);
  }

  __device__ void operator()(int64_t l) const {
    const int64_t o = l / inner, i = l - o * inner;
    const T* line = x + o * length * inner + i;
    int64_t* from = order + l * length;
    int64_t* to = merged + l * length;
    for (int64_t t = 0; t < length; ++t) from[t] = t;
    for (int64_t width = 1; width < length; width *= 2) {
      for (int64_t lo = 0; lo < length; lo += 2 * width) {
        const int64_t mid = lo + width < length ? lo + width : length;
        const int64_t hi = lo + 2 * width < length ? lo + 2 * width : length;
        int64_t a = lo, b = mid;
        for (int64_t k = lo; k < hi; ++k) {
          to[k] = b >= hi || (a < mid && !before(line, from[b], from[a])) ? from[a++] : from[b++];
        }
      }
      int64_t* swap = from;
      from = to;
      to = swap;
    }
    const int64_t out = o * count * inner + i;
    for (int64_t t = 0; t < count; ++t) {
      values[out + t * inner] = line[from[t] * inner];
      indices[out + t * inner] = from[t];
    }
  }
};

void order_kernel(const KernelContext& c, int64_t count, bool descending) {
  const Tensor& x = c.inputs[0];
  const int axis = x.shape().normalize_axis(c.attrs.get_int("axis"));
  const int64_t length = x.shape()[axis];
  if (length == 0 || count == 0) return;  // Nothing to write.
  const int64_t lines = x.numel() / length;
  const int64_t inner = x.shape().stride(axis);
  const Tensor scratch = Tensor::empty(Shape{2, x.numel()}, DType::kInt64, c.run.device);
  int64_t* order = scratch.data<int64_t>();
  visit_numeric(x.dtype(), [&]<class T>() {
    for_each(stream_of(c), lines,
             OrderLines<T>{x.data<T>(), c.outputs[0].data<T>(), c.outputs[1].data<int64_t>(), order,
                           order + x.numel(), length, inner, count, descending});
  });
}

void sort_kernel(const KernelContext& c) {
  const Tensor& x = c.inputs[0];
  order_kernel(c, x.shape()[x.shape().normalize_axis(c.attrs.get_int("axis"))],
               c.attrs.get_bool("descending"));
}

void topk_kernel(const KernelContext& c) {
  order_kernel(c, c.attrs.get_int("k"), c.attrs.get_bool("largest"));
}

}  // namespace
}  // namespace cuda

void register_sort_cuda_kernels(Registry& registry) {
  registry.set_cuda_kernel("sort", cuda::sort_kernel);
  registry.set_cuda_kernel("topk", cuda::topk_kernel);
}

}  // namespace tandem::kernels
