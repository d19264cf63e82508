// The CUDA kernels of the creation ops (kernels/ops/creation.cc): zeros,
// ones, full, arange, rand, randn and dropout.
//
// The random ops compute the CPU kernels' own stream, element by element,
// with the same CounterRng (Note [Counter-based random numbers] in
// kernels/counter_rng.h): element i is a pure function of (seed, i), so a
// seed gives the same values on both devices (randn up to the last bits of
// the device's log and cos), and a model trained on either sees the same
// dropout masks.
#include <cstdint>

#include "kernels/counter_rng.h"
#include "kernels/cpu/dtype_visit.h"
#include "kernels/cuda/element_types.cuh"
#include "kernels/cuda/families.h"

namespace tandem::kernels {
namespace cuda {
namespace {

CounterRng rng_of(const Attrs& attrs) { return CounterRng(attrs.get_int("seed")); }

template <int kValue>
void constant_kernel(const KernelContext& c) {
  fill(c.outputs[0], kValue, stream_of(c));
}

void full_kernel(const KernelContext& c) {
  fill(c.outputs[0], c.attrs.get_float("value"), stream_of(c));
}

template <class T>
struct Arange {
  T* out;
  double start, step;
  // Rounded multiply, then add, never fused: the CPU's two roundings.
  __device__ void operator()(int64_t i) const {
    out[i] = convert<T>(__dadd_rn(start, __dmul_rn(static_cast<double>(i), step)));
  }
};

void arange_kernel(const KernelContext& c) {
  const Tensor& out = c.outputs[0];
  visit_all(out.dtype(), [&]<class T>() {
    for_each(stream_of(c), out.numel(),
             Arange<device_t<T>>{device_data<T>(out), c.attrs.get_float("start"),
                                 c.attrs.get_float("step")});
  });
}

// Draw i with as many bits as T's significand: exact in T and never 1.
template <class T, int kBits>
struct Uniform {
  T* out;
  CounterRng rng;
  __device__ void operator()(int64_t i) const {
    out[i] = convert<T>(rng.uniform_bits<kBits>(static_cast<uint64_t>(i)));
  }
};

void rand_kernel(const KernelContext& c) {
  const Tensor& out = c.outputs[0];
  visit_all_floating(out.dtype(), [&]<class T>() {
    for_each(stream_of(c), out.numel(),
             Uniform<device_t<T>, significand_bits<T>()>{device_data<T>(out), rng_of(c.attrs)});
  });
}

// Box-Muller (CounterRng::normal).
template <class T>
struct Normal {
  T* out;
  CounterRng rng;
  __device__ void operator()(int64_t i) const {
    out[i] = convert<T>(rng.normal(static_cast<uint64_t>(i)));
  }
};

void randn_kernel(const KernelContext& c) {
  const Tensor& out = c.outputs[0];
  visit_all_floating(out.dtype(), [&]<class T>() {
    for_each(stream_of(c), out.numel(), Normal<device_t<T>>{device_data<T>(out), rng_of(c.attrs)});
  });
}

// y = x * mask, mask = 0 where draw i < p, else 1 / (1 - p); all ones when
// not training.
template <class T>
struct Dropout {
  const T* x;
  T* y;
  T* mask;
  CounterRng rng;
  double p;
  T scale;
  bool training;
  __device__ void operator()(int64_t i) const {
    T m =
        !training || rng.uniform(static_cast<uint64_t>(i)) >= p ? (training ? scale : T{1}) : T{0};
    mask[i] = m;
    y[i] = x[i] * m;
  }
};

void dropout_kernel(const KernelContext& c) {
  double p = c.attrs.get_float("p");
  visit_floating(c.inputs[0].dtype(), [&]<class T>() {
    for_each(
        stream_of(c), c.inputs[0].numel(),
        Dropout<T>{c.inputs[0].data<T>(), c.outputs[0].data<T>(), c.outputs[1].data<T>(),
                   rng_of(c.attrs), p, static_cast<T>(1 / (1 - p)), c.attrs.get_bool("training")});
  });
}

}  // namespace
}  // namespace cuda

void register_creation_cuda_kernels(Registry& registry) {
  registry.set_cuda_kernel("zeros", cuda::constant_kernel<0>);
  registry.set_cuda_kernel("ones", cuda::constant_kernel<1>);
  registry.set_cuda_kernel("full", cuda::full_kernel);
  registry.set_cuda_kernel("arange", cuda::arange_kernel);
  registry.set_cuda_kernel("rand", cuda::rand_kernel);
  registry.set_cuda_kernel("randn", cuda::randn_kernel);
  registry.set_cuda_kernel("dropout", cuda::dropout_kernel);
}

}  // namespace tandem::kernels
