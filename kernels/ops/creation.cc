// Creation ops: zeros, ones, full, arange, rand, randn (no inputs), and
// dropout (random, so it lives with them). None but dropout is
// differentiable.
//
// Random ops are pure functions of their attributes: the same "seed" gives
// the same values on any machine and any number of threads (see Note
// [Counter-based random numbers]). The eager layer holds the seedable global
// generator that draws a fresh "seed" for each call.
#include <cmath>
#include <limits>
#include <numbers>
#include <type_traits>

#include "kernels/cpu/dtype_visit.h"
#include "kernels/ops/families.h"
#include "kernels/ops/op_helpers.h"
#include "kernels/registry.h"

namespace tandem::kernels {
namespace {

using Ints = std::vector<int64_t>;

// Note [Counter-based random numbers]
// Element i of a random op with seed s is made from
//   bits(s, i) = mix(mix(s) + (i + 1) * kGamma),
// where mix is the splitmix64 finalizer (Steele, Lea and Flood, "Fast
// splittable pseudorandom number generators", 2014) and kGamma the golden
// ratio constant: for a fixed s this is exactly the splitmix64 stream started
// at mix(s), but any element can be computed on its own, so a kernel may
// split its range over threads and still give the same values. Hashing the
// seed first keeps nearby seeds (1, 2, 3...) from producing shifted copies
// of one stream. splitmix64 passes BigCrush; it is not cryptographic.
constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ULL;

constexpr uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

class CounterRng {
 public:
  explicit CounterRng(int64_t seed) : key_(mix(static_cast<uint64_t>(seed))) {}
  uint64_t bits(uint64_t counter) const { return mix(key_ + (counter + 1) * kGamma); }
  // Uniform in [0, 1) with 53 random bits.
  double uniform(uint64_t counter) const {
    return static_cast<double>(bits(counter) >> 11) * 0x1.0p-53;
  }

 private:
  uint64_t key_;
};

// Significand bits of each floating element type: a uniform draw with that
// many bits is exact in the type, so it never rounds up to 1.
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

// Writes a double into any element type: through float for float16 and
// bfloat16, `!= 0` for bool, saturating (NaN to 0) for integers.
template <class T>
T from_double(double value) {
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    return T(static_cast<float>(value));
  } else if constexpr (std::is_same_v<T, bool>) {
    return value != 0;
  } else if constexpr (std::is_integral_v<T>) {
    if (value != value) return T{0};
    if (value >= static_cast<double>(std::numeric_limits<T>::max())) {
      return std::numeric_limits<T>::max();
    }
    if (value <= static_cast<double>(std::numeric_limits<T>::lowest())) {
      return std::numeric_limits<T>::lowest();
    }
    return static_cast<T>(value);
  } else {
    return static_cast<T>(value);
  }
}

template <class T>
void fill(const Tensor& out, double value) {
  T v = from_double<T>(value);
  T* data = out.data<T>();
  std::fill(data, data + out.numel(), v);
}

// zeros, ones, full.

std::vector<TensorMeta> infer_filled(absl::Span<const TensorMeta>, const Attrs& attrs) {
  return {{Shape(attrs.get_ints("shape")), attrs.get_dtype("dtype")}};
}

template <int kValue>
void constant_kernel(const KernelContext& c) {
  visit_all(c.outputs[0].dtype(), [&]<class T>() { fill<T>(c.outputs[0], kValue); });
}

void full_kernel(const KernelContext& c) {
  double value = c.attrs.get_float("value");
  visit_all(c.outputs[0].dtype(), [&]<class T>() { fill<T>(c.outputs[0], value); });
}

// arange: start, start + step, ... while before stop (NumPy's count rule).

int64_t arange_count(const Attrs& attrs) {
  double start = attrs.get_float("start"), stop = attrs.get_float("stop");
  double step = attrs.get_float("step");
  TANDEM_CHECK(std::isfinite(start) && std::isfinite(stop) && std::isfinite(step),
               "start, stop and step must be finite, got start=", start, ", stop=", stop,
               ", step=", step);
  TANDEM_CHECK(step != 0, "step must not be 0 (start=", start, ", stop=", stop, ")");
  double count = std::ceil((stop - start) / step);
  // 2^53: beyond it, start + i * step no longer tells consecutive elements apart.
  TANDEM_CHECK(count <= 0x1.0p53, "arange from ", start, " to ", stop, " by ", step, " would have ",
               count, " elements; at most 2^53 are supported");
  return count > 0 ? static_cast<int64_t>(count) : 0;
}

std::vector<TensorMeta> infer_arange(absl::Span<const TensorMeta>, const Attrs& attrs) {
  DType dtype = attrs.get_dtype("dtype");
  TANDEM_CHECK(dtype != DType::kBool, "dtype bool is not supported; use a numeric dtype");
  return {{Shape{arange_count(attrs)}, dtype}};
}

void arange_kernel(const KernelContext& c) {
  double start = c.attrs.get_float("start"), step = c.attrs.get_float("step");
  const Tensor& out = c.outputs[0];
  visit_all(out.dtype(), [&]<class T>() {
    T* data = out.data<T>();
    for (int64_t i = 0; i < out.numel(); ++i) {
      data[i] = from_double<T>(start + static_cast<double>(i) * step);
    }
  });
}

// rand (uniform in [0, 1)) and randn (standard normal).

std::vector<TensorMeta> infer_random(absl::Span<const TensorMeta>, const Attrs& attrs) {
  DType dtype = attrs.get_dtype("dtype");
  TANDEM_CHECK(is_floating_point(dtype), "dtype must be floating point, got ", dtype_name(dtype));
  return {{Shape(attrs.get_ints("shape")), dtype}};
}

template <class F>
void visit_all_floating(DType dtype, F&& f) {
  if (dtype == DType::kFloat16) return f.template operator()<Half>();
  if (dtype == DType::kBFloat16) return f.template operator()<BFloat16>();
  return visit_floating(dtype, std::forward<F>(f));
}

void rand_kernel(const KernelContext& c) {
  CounterRng rng(c.attrs.get_int("seed"));
  const Tensor& out = c.outputs[0];
  visit_all_floating(out.dtype(), [&]<class T>() {
    constexpr int kBits = significand_bits<T>();
    constexpr double kScale = 1.0 / static_cast<double>(uint64_t{1} << kBits);
    T* data = out.data<T>();
    for (int64_t i = 0; i < out.numel(); ++i) {
      uint64_t top = rng.bits(static_cast<uint64_t>(i)) >> (64 - kBits);
      data[i] = from_double<T>(static_cast<double>(top) * kScale);  // Exact in T.
    }
  });
}

// Box-Muller over draws 2i and 2i + 1 (u1 in (0, 1], so the log is finite).
void randn_kernel(const KernelContext& c) {
  CounterRng rng(c.attrs.get_int("seed"));
  const Tensor& out = c.outputs[0];
  visit_all_floating(out.dtype(), [&]<class T>() {
    T* data = out.data<T>();
    for (int64_t i = 0; i < out.numel(); ++i) {
      uint64_t counter = 2 * static_cast<uint64_t>(i);
      double u1 = 1.0 - rng.uniform(counter);
      double u2 = rng.uniform(counter + 1);
      data[i] = from_double<T>(std::sqrt(-2 * std::log(u1)) * std::cos(2 * std::numbers::pi * u2));
    }
  });
}

// dropout: y = x * mask, mask[i] = 0 with probability p, else 1 / (1 - p);
// when not training, y = x and mask = 1.

std::vector<TensorMeta> infer_dropout(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  check_floating("input", in[0].dtype);
  double p = attrs.get_float("p");
  TANDEM_CHECK(p >= 0 && p < 1, "p must be in [0, 1), got ", p);
  return {in[0], in[0]};
}

void dropout_kernel(const KernelContext& c) {
  double p = c.attrs.get_float("p");
  bool training = c.attrs.get_bool("training");
  CounterRng rng(c.attrs.get_int("seed"));
  visit_floating(c.inputs[0].dtype(), [&]<class T>() {
    const T* x = c.inputs[0].data<T>();
    T* y = c.outputs[0].data<T>();
    T* mask = c.outputs[1].data<T>();
    T scale = static_cast<T>(1 / (1 - p));
    for (int64_t i = 0; i < c.inputs[0].numel(); ++i) {
      mask[i] = !training || rng.uniform(static_cast<uint64_t>(i)) >= p ? (training ? scale : T{1})
                                                                        : T{0};
      y[i] = x[i] * mask[i];
    }
  });
}

// The mask depends on the seed only: no gradient flows through it.
std::vector<Tensor> dropout_gradient(const GradContext& c) {
  const Tensor& g = c.grad_outputs[0];
  if (!g.defined()) return {Tensor()};
  return {op("mul", {g, c.outputs[1]})};
}

AttrSpec required(std::string name, AttrValue type) {
  return {.name = std::move(name), .default_value = std::move(type), .required = true};
}

AttrSpec optional(std::string name, AttrValue value) {
  return {.name = std::move(name), .default_value = std::move(value)};
}

// Where a creation op puts its output: the "device" attribute ("cpu",
// "cuda:0"), which every creation op takes.
Device device_attr(const Attrs& attrs) { return Device::parse(attrs.get_string("device")); }

OpDef creation(std::string name, std::vector<AttrSpec> attrs, InferFn infer, KernelFn kernel,
               std::string doc) {
  attrs.push_back(optional("device", std::string("cpu")));
  return {.name = std::move(name),
          .num_inputs = 0,
          .attrs = std::move(attrs),
          .infer = infer,
          .cpu = kernel,
          .differentiable = false,
          .doc = std::move(doc),
          .output_device = device_attr};
}

}  // namespace

void register_creation_ops(Registry& registry) {
  registry.add(creation("zeros", {required("shape", Ints{}), optional("dtype", DType::kFloat32)},
                        infer_filled, constant_kernel<0>, "a tensor of zeros"));
  registry.add(creation("ones", {required("shape", Ints{}), optional("dtype", DType::kFloat32)},
                        infer_filled, constant_kernel<1>, "a tensor of ones"));
  registry.add(creation(
      "full",
      {required("shape", Ints{}), optional("dtype", DType::kFloat32), optional("value", 0.0)},
      infer_filled, full_kernel, "a tensor filled with value"));
  registry.add(creation("arange",
                        {optional("start", 0.0), required("stop", 0.0), optional("step", 1.0),
                         optional("dtype", DType::kFloat32)},
                        infer_arange, arange_kernel, "start, start + step, ... below stop"));
  registry.add(creation(
      "rand",
      {required("shape", Ints{}), optional("dtype", DType::kFloat32), required("seed", int64_t{0})},
      infer_random, rand_kernel, "uniform in [0, 1), a function of seed"));
  registry.add(creation(
      "randn",
      {required("shape", Ints{}), optional("dtype", DType::kFloat32), required("seed", int64_t{0})},
      infer_random, randn_kernel, "standard normal, a function of seed"));
  registry.add(
      {.name = "dropout",
       .num_outputs = 2,
       .attrs = {optional("p", 0.5), optional("training", true), required("seed", int64_t{0})},
       .infer = infer_dropout,
       .cpu = dropout_kernel,
       .gradient = dropout_gradient,
       .doc = "(x * mask, mask): mask is 0 with probability p, else 1 / (1 - p)"});
}

}  // namespace tandem::kernels
