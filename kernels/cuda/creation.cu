// The CUDA kernels of the creation ops (kernels/ops/creation.cc): zeros,
// ones, full, arange, rand, randn and dropout.
//
// The random ops compute the CPU kernels' own stream, element by element:
// Note [Counter-based random numbers] in creation.cc makes element i a pure
// function of (seed, i), so a seed gives the same values on both devices
// (randn up to the last bits of the device's log and cos), and a model
// trained on either sees the same dropout masks.
#include <cstdint>
#include <limits>
#include <numbers>
#include <type_traits>
#include <utility>

#include "kernels/cpu/dtype_visit.h"
#include "kernels/cuda/element_types.cuh"
#include "kernels/cuda/families.h"

namespace tandem::kernels {
namespace cuda {
namespace {

// splitmix64, exactly as creation.cc computes it.
constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ULL;

__host__ __device__ constexpr uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

struct CounterRng {
  uint64_t key;  // mix(seed).
  __device__ uint64_t bits(uint64_t counter) const { return mix(key + (counter + 1) * kGamma); }
  // Uniform in [0, 1) with 53 random bits.
  __device__ double uniform(uint64_t counter) const {
    return static_cast<double>(bits(counter) >> 11) * 0x1.0p-53;
  }
};

CounterRng rng_of(const Attrs& attrs) {
  return {mix(static_cast<uint64_t>(attrs.get_int("seed")))};
}

// float32, float64, float16, bfloat16: the dtypes rand and randn make.
template <class F>
void visit_all_floating(DType dtype, F&& f) {
  if (dtype == DType::kFloat16) return f.template operator()<Half>();
  if (dtype == DType::kBFloat16) return f.template operator()<BFloat16>();
  return visit_floating(dtype, std::forward<F>(f));
}

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

// The top `bits` bits of element i's draw, times 2^-bits: with as many bits
// as T's significand, exact in T and never 1.
template <class T>
struct Uniform {
  T* out;
  CounterRng rng;
  int bits;
  double scale;
  __device__ void operator()(int64_t i) const {
    uint64_t top = rng.bits(static_cast<uint64_t>(i)) >> (64 - bits);
    out[i] = convert<T>(static_cast<double>(top) * scale);
  }
};

template <class T>
constexpr int significand_bits() {
  if constexpr (std::is_same_v<T, Half>) {
    return 11;
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return 8;
  } else {
    return std::numeric_limits<T>::digits;
  }
}

void rand_kernel(const KernelContext& c) {
  const Tensor& out = c.outputs[0];
  visit_all_floating(out.dtype(), [&]<class T>() {
    constexpr int kBits = significand_bits<T>();
    for_each(stream_of(c), out.numel(),
             Uniform<device_t<T>>{device_data<T>(out), rng_of(c.attrs), kBits,
                                  1.0 / static_cast<double>(uint64_t{1} << kBits)});
  });
}

// Box-Muller over draws 2i and 2i + 1 (u1 in (0, 1], so the log is finite).
template <class T>
struct Normal {
  T* out;
  CounterRng rng;
  __device__ void operator()(int64_t i) const {
    uint64_t counter = 2 * static_cast<uint64_t>(i);
    double u1 = 1.0 - rng.uniform(counter);
    double u2 = rng.uniform(counter + 1);
    out[i] = convert<T>(::sqrt(-2 * ::log(u1)) * ::cos(2 * std::numbers::pi * u2));
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
