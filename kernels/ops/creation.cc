// Creation ops: zeros, ones, full, arange, rand, randn (no inputs), and
// dropout (random, so it lives with them). None but dropout is
// differentiable.
//
// Random ops are pure functions of their attributes: the same "seed" gives
// the same values on any machine, any number of threads and either device
// (see Note [Counter-based random numbers] in kernels/counter_rng.h). The
// eager layer holds the seedable global generator that draws a fresh "seed"
// for each call.
#include <cmath>

#include "kernels/counter_rng.h"
#include "kernels/cpu/dtype_visit.h"
#include "kernels/cpu/parallel.h"
#include "kernels/element_cast.h"
#include "kernels/elementwise_ops.h"
#include "kernels/known_ops.h"
#include "kernels/ops/families.h"
#include "kernels/ops/op_helpers.h"
#include "kernels/registry.h"

namespace tandem::kernels {
namespace {

using Ints = std::vector<int64_t>;

// Writes `value` into every element, converted as cast converts a double
// (kernels/element_cast.h), as the CUDA kernels do.
template <class T>
void fill(const Tensor& out, double value) {
  T v = convert<T>(value);
  T* data = out.data<T>();
  std::fill(data, data + out.numel(), v);
}

// zeros, ones, full.

TensorMetas infer_filled(absl::Span<const TensorMeta>, const Attrs& attrs) {
  return {{Shape(attrs.get_ints("shape")), attrs.get_dtype("dtype")}};
}

TensorMetas infer_full(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  check_value_fits("value", attrs.get_float("value"), attrs.get_dtype("dtype"));
  return infer_filled(in, attrs);
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

TensorMetas infer_arange(absl::Span<const TensorMeta>, const Attrs& attrs) {
  DType dtype = attrs.get_dtype("dtype");
  TANDEM_CHECK(dtype != DType::kBool, "dtype bool is not supported; use a numeric dtype");
  const int64_t count = arange_count(attrs);
  if (count > 0) {
    // The values run from the first to the last: both must convert to an
    // integer dtype without saturating (Note [Cast semantics]); fractions
    // truncate, as the cast op's do.
    const double start = attrs.get_float("start"), step = attrs.get_float("step");
    visit_numeric(dtype, [&]<class T>() {
      for (double value : {start, start + static_cast<double>(count - 1) * step}) {
        TANDEM_CHECK(in_range<T>(value), "arange from ", start, " by ", step, " reaches ", value,
                     ", which is out of range for ", dtype_name(dtype));
      }
    });
  }
  return {{Shape{count}, dtype}};
}

void arange_kernel(const KernelContext& c) {
  double start = c.attrs.get_float("start"), step = c.attrs.get_float("step");
  const Tensor& out = c.outputs[0];
  visit_all(out.dtype(), [&]<class T>() {
    T* data = out.data<T>();
    for (int64_t i = 0; i < out.numel(); ++i) {
      data[i] = convert<T>(start + static_cast<double>(i) * step);
    }
  });
}

// rand (uniform in [0, 1)) and randn (standard normal).

TensorMetas infer_random(absl::Span<const TensorMeta>, const Attrs& attrs) {
  DType dtype = attrs.get_dtype("dtype");
  TANDEM_CHECK(is_floating_point(dtype), "dtype must be floating point, got ", dtype_name(dtype));
  return {{Shape(attrs.get_ints("shape")), dtype}};
}

void rand_kernel(const KernelContext& c) {
  CounterRng rng(c.attrs.get_int("seed"));
  const Tensor& out = c.outputs[0];
  visit_all_floating(out.dtype(), [&]<class T>() {
    constexpr int kBits = significand_bits<T>();
    T* data = out.data<T>();
    for (int64_t i = 0; i < out.numel(); ++i) {
      data[i] = convert<T>(rng.uniform_bits<kBits>(static_cast<uint64_t>(i)));  // Exact in T.
    }
  });
}

// Box-Muller (CounterRng::normal).
void randn_kernel(const KernelContext& c) {
  CounterRng rng(c.attrs.get_int("seed"));
  const Tensor& out = c.outputs[0];
  visit_all_floating(out.dtype(), [&]<class T>() {
    T* data = out.data<T>();
    for (int64_t i = 0; i < out.numel(); ++i) {
      data[i] = convert<T>(rng.normal(static_cast<uint64_t>(i)));
    }
  });
}

// dropout: y = x * mask, mask[i] = 0 with probability p, else 1 / (1 - p);
// when not training, y = x and mask = 1.

TensorMetas infer_dropout(absl::Span<const TensorMeta> in, const Attrs& attrs) {
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
    const T kept = training ? static_cast<T>(1 / (1 - p)) : T{1};
    // Each draw depends on its index only, so the ranges split anywhere and
    // give the same mask.
    parallel_for(c.inputs[0].numel(), kCheapGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        mask[i] = !training || rng.uniform(static_cast<uint64_t>(i)) >= p ? kept : T{0};
        y[i] = x[i] * mask[i];
      }
    });
  });
}

// The mask depends on the seed only: no gradient flows through it.
std::vector<Tensor> dropout_gradient(const GradContext& c) {
  const Tensor& g = c.grad_outputs[0];
  if (!g.defined()) return {Tensor()};
  return {nested_call1(op_def<elementwise::Mul>(), {g, c.outputs[1]})};
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

const OpDef& zeros_op() { return op_def<"zeros">(); }
const OpDef& arange_op() { return op_def<"arange">(); }
const OpDef& ones_op() { return op_def<"ones">(); }
const OpDef& full_op() { return op_def<"full">(); }
const OpDef& randn_op() { return op_def<"randn">(); }

void register_creation_ops(Registry& registry) {
  registry.add(creation("zeros", {required("shape", Ints{}), optional("dtype", DType::kFloat32)},
                        infer_filled, constant_kernel<0>, "a tensor of zeros"));
  registry.add(creation("ones", {required("shape", Ints{}), optional("dtype", DType::kFloat32)},
                        infer_filled, constant_kernel<1>, "a tensor of ones"));
  registry.add(creation(
      "full",
      {required("shape", Ints{}), optional("dtype", DType::kFloat32), optional("value", 0.0)},
      infer_full, full_kernel, "a tensor filled with value"));
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
