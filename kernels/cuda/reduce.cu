// CUDA kernels of kernels/ops/reduce.cc: sum, mean, prod, max, min and var over
// any set of axes, argmax over one. Every reduction is a fold over the
// columns of a ReduceLayout (column_reduce.h); output element i is column i,
// which is the row-major order of the kept axes, keepdims or not.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "kernels/cpu/dtype_visit.h"
#include "kernels/cuda/column_reduce.cuh"
#include "kernels/cuda/families.h"
#include "kernels/cuda/launch.h"
#include "kernels/integer_math.h"
#include "kernels/registry.h"

namespace tandem::kernels {
namespace {

using cuda::Column;
using cuda::column_reduce;
using cuda::for_each_column;
using cuda::ReduceLayout;

// The layout of the op's input over its "axes" attr (all axes when empty);
// inference has checked the axes.
ReduceLayout layout_over_axes(const KernelContext& c) {
  const Shape& shape = c.inputs[0].shape();
  const std::vector<int64_t>& given = c.attrs.get_ints("axes");
  std::vector<int> axes;
  for (int i = 0; i < shape.rank(); ++i) {
    if (given.empty() || std::find(given.begin(), given.end(), i) != given.end() ||
        std::find(given.begin(), given.end(), i - shape.rank()) != given.end()) {
      axes.push_back(i);
    }
  }
  return cuda::make_reduce_layout(shape.dims(), axes);
}

template <bool kMean>
void sum_kernel(const KernelContext& c) {
  auto run = [&]<class T>() {
    cuda::launch_reduce(c, layout_over_axes(c), cuda::SumOf<T>{c.inputs[0].data<T>()},
                        cuda::Total<T>{kMean}, c.outputs[0].data<T>());
  };
  // Inference allows mean on floating types only.
  if constexpr (kMean) {
    visit_floating(c.inputs[0].dtype(), run);
  } else {
    visit_numeric(c.inputs[0].dtype(), run);
  }
}

// Floats multiply in double, integers wrap in int64, as on the CPU.
template <class T>
struct ProductOf {
  using Acc = cuda::Accumulator<T>;
  const T* in;
  __device__ Acc identity() const { return 1; }
  __device__ Acc map(int64_t offset, int64_t) const { return static_cast<Acc>(in[offset]); }
  __device__ Acc combine(Acc a, Acc b) const {
    if constexpr (std::is_floating_point_v<T>) {
      return a * b;
    } else {
      return integer::mul(a, b);
    }
  }
};

void prod_kernel(const KernelContext& c) {
  visit_numeric(c.inputs[0].dtype(), [&]<class T>() {
    cuda::launch_reduce(c, layout_over_axes(c), ProductOf<T>{c.inputs[0].data<T>()},
                        cuda::Total<T>{}, c.outputs[0].data<T>());
  });
}

template <bool kMax>
void max_min_kernel(const KernelContext& c) {
  visit_numeric(c.inputs[0].dtype(), [&]<class T>() {
    cuda::launch_reduce(c, layout_over_axes(c), cuda::ExtremumOf<T, kMax>{c.inputs[0].data<T>()},
                        cuda::Total<T>{}, c.outputs[0].data<T>());
  });
}

// Two passes, the second over the deviations from the column's mean, as the
// CPU kernel does.
template <class T>
__global__ void var_columns(ReduceLayout l, const T* in, int64_t correction, T* out) {
  for_each_column(l, [&](const Column& col) {
    const double count = static_cast<double>(l.num_reduced);
    const double mean = column_reduce(l, col, cuda::SumOf<T>{in}) / count;
    const double squares = column_reduce(l, col, cuda::SquaredDeviationOf<T>{in, mean});
    const double dof = count - static_cast<double>(correction);
    if (col.active && threadIdx.y == 0) {
      out[col.index] =
          static_cast<T>(dof > 0 ? squares / dof : std::numeric_limits<double>::quiet_NaN());
    }
  });
}

void var_kernel(const KernelContext& c) {
  const ReduceLayout l = layout_over_axes(c);
  if (l.num_kept == 0) return;
  visit_floating(c.inputs[0].dtype(), [&]<class T>() {
    var_columns<<<l.grid(), l.block(), 0, cuda::stream_of(c)>>>(
        l, c.inputs[0].data<T>(), c.attrs.get_int("correction"), c.outputs[0].data<T>());
    TANDEM_CUDA_CHECK_LAUNCH();
  });
}

template <class T>
struct ValueIndex {
  T value;
  int64_t index;  // -1: no element yet.
};

// The first index of the largest value, a NaN counting as largest. Ties and
// NaNs go to the smaller index, so the tree order gives the CPU's answer.
template <class T>
struct ArgmaxOf {
  using Acc = ValueIndex<T>;
  const T* in;
  __device__ Acc identity() const { return {T{}, -1}; }
  __device__ Acc map(int64_t offset, int64_t r) const { return {in[offset], r}; }
  __device__ Acc combine(Acc a, Acc b) const {
    if (a.index < 0) return b;
    if (b.index < 0) return a;
    const bool a_nan = a.value != a.value, b_nan = b.value != b.value;
    if (a_nan != b_nan) return a_nan ? a : b;
    if (!a_nan && a.value != b.value) return a.value > b.value ? a : b;
    return a.index < b.index ? a : b;
  }
};

struct IndexOf {
  template <class T>
  __device__ int64_t operator()(ValueIndex<T> acc, int64_t) const {
    return acc.index;
  }
};

void argmax_kernel(const KernelContext& c) {
  const Tensor& x = c.inputs[0];
  const int axis = x.shape().normalize_axis(c.attrs.get_int("axis"));
  const ReduceLayout l = cuda::make_reduce_layout(x.shape().dims(), {axis});
  visit_numeric(x.dtype(), [&]<class T>() {
    cuda::launch_reduce(c, l, ArgmaxOf<T>{x.data<T>()}, IndexOf{}, c.outputs[0].data<int64_t>());
  });
}

}  // namespace

void register_reduce_cuda_kernels(Registry& registry) {
  registry.set_cuda_kernel("sum", sum_kernel<false>);
  registry.set_cuda_kernel("mean", sum_kernel<true>);
  registry.set_cuda_kernel("prod", prod_kernel);
  registry.set_cuda_kernel("max", max_min_kernel<true>);
  registry.set_cuda_kernel("min", max_min_kernel<false>);
  registry.set_cuda_kernel("var", var_kernel);
  registry.set_cuda_kernel("argmax", argmax_kernel);
}

}  // namespace tandem::kernels
