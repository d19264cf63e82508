// The CUDA kernels of the elementwise ops: binary arithmetic and comparisons
// with broadcasting (kernels/ops/elementwise_binary.cc), the unary ops, cast
// and where (elementwise_unary.cc), and fused_elementwise, interpreted per
// element from the program the CPU kernel runs (kernels/fused_program.h).
// Each thread computes whole elements in registers;
// the values are those of the CPU kernels: both compute the formulas of
// kernels/elementwise_ops.h.
#include <memory>
#include <string>
#include <type_traits>

#include "kernels/cpu/dtype_visit.h"
#include "kernels/cuda/comparison.cuh"
#include "kernels/cuda/families.h"
#include "kernels/elementwise_ops.h"
#include "kernels/fused_program.h"

namespace tandem::kernels {
namespace cuda {
namespace {

// Binary ops: out[i] = f(a[i'], b[i'']) over the broadcast shape; see Note
// [Merged axes] in for_each.cuh for the same-shape and scalar fast paths.

template <class In, class Out, class F>
struct BinaryMap {
  const In* a;
  const In* b;
  Out* out;
  Indexer<2> ix;
  F f;
  __device__ void operator()(int64_t i) const {
    Offsets<2> o = ix(i);
    out[i] = f(a[o.at[0]], b[o.at[1]]);
  }
};

// T is the dtype's C++ type (dtype.h), Out the device type of the output.
template <class T, class Out, class F>
void broadcast_binary(const KernelContext& c, F f) {
  const Tensor& a = c.inputs[0];
  const Tensor& b = c.inputs[1];
  const Tensor& out = c.outputs[0];
  if (out.numel() == 0) return;
  Indexer<2> ix = make_indexer<2>(out.shape(), {broadcast_strides(a.shape(), out.shape()),
                                                broadcast_strides(b.shape(), out.shape())});
  for_each(stream_of(c), out.numel(),
           BinaryMap<device_t<T>, Out, F>{device_data<T>(a), device_data<T>(b),
                                          static_cast<Out*>(out.raw_data()), ix, f});
}

// Integer division by zero gives 0 here, where the CPU fails the op.
template <class Formula>
struct Arithmetic {
  template <class T>
  __device__ T operator()(T x, T y) const {
    return Formula{}(x, y);
  }
};

template <Comparison kCmp>
struct Compare {
  template <class T>
  __device__ bool operator()(T x, T y) const {
    return compare(kCmp, x, y);
  }
};

template <class Formula>
void arithmetic_kernel(const KernelContext& c) {
  visit_numeric(c.inputs[0].dtype(),
                [&]<class T>() { broadcast_binary<T, T>(c, Arithmetic<Formula>{}); });
}

template <Comparison kCmp>
void comparison_kernel(const KernelContext& c) {
  visit_all(c.inputs[0].dtype(), [&]<class T>() { broadcast_binary<T, bool>(c, Compare<kCmp>{}); });
}

// Unary ops: out[i] = f(in[i]) with f the op's formula and parameters.

template <class Op, class In, class Out>
struct UnaryMap {
  const In* in;
  Out* out;
  Op f;
  __device__ void operator()(int64_t i) const { out[i] = f(in[i]); }
};

template <class Op>
void unary_kernel(const KernelContext& c) {
  const Op f = formula_from<Op>(c.attrs);
  auto launch = [&]<class T>() {
    using Out = std::conditional_t<Op::kBoolResult, bool, device_t<T>>;
    for_each(stream_of(c), c.outputs[0].numel(),
             UnaryMap<Op, device_t<T>, Out>{device_data<T>(c.inputs[0]),
                                            static_cast<Out*>(c.outputs[0].raw_data()), f});
  };
  visit_element_types<Op::kTypes>(c.inputs[0].dtype(), launch);
}

template <class... Ops>
void register_unary_kernels(Registry& registry, ElementwiseOpList<Ops...>*) {
  (registry.set_cuda_kernel(Ops::kName, unary_kernel<Ops>), ...);
}

template <class From, class To>
struct CastMap {
  const From* in;
  To* out;
  __device__ void operator()(int64_t i) const { out[i] = convert<To>(in[i]); }
};

void cast_kernel(const KernelContext& c) {
  const Tensor& in = c.inputs[0];
  const Tensor& out = c.outputs[0];
  visit_all(in.dtype(), [&]<class From>() {
    visit_all(out.dtype(), [&]<class To>() {
      for_each(stream_of(c), out.numel(),
               CastMap<device_t<From>, device_t<To>>{device_data<From>(in), device_data<To>(out)});
    });
  });
}

// where selects without looking at values: one instantiation per element size.
template <class U>
struct WhereMap {
  const bool* cond;
  const U* a;
  const U* b;
  U* out;
  Indexer<3> ix;
  __device__ void operator()(int64_t i) const {
    Offsets<3> o = ix(i);
    out[i] = cond[o.at[0]] ? a[o.at[1]] : b[o.at[2]];
  }
};

void where_kernel(const KernelContext& c) {
  const Tensor& out = c.outputs[0];
  if (out.numel() == 0) return;
  const Shape& shape = out.shape();
  Indexer<3> ix = make_indexer<3>(shape, {broadcast_strides(c.inputs[0].shape(), shape),
                                          broadcast_strides(c.inputs[1].shape(), shape),
                                          broadcast_strides(c.inputs[2].shape(), shape)});
  visit_element_bits(dtype_size(out.dtype()), [&]<class U>() {
    for_each(stream_of(c), out.numel(),
             WhereMap<U>{c.inputs[0].data<bool>(), static_cast<const U*>(c.inputs[1].raw_data()),
                         static_cast<const U*>(c.inputs[2].raw_data()),
                         static_cast<U*>(out.raw_data()), ix});
  });
}

// fused_elementwise. The program travels as a kernel argument (a fixed-size
// array of instructions); each thread runs it for its elements, keeping the
// registers r0, r1, ... in a local array.

inline constexpr int kMaxFusedInstrs = 64;
inline constexpr int kMaxFusedInputs = 32;  // One bit each in FusedMap::scalar_inputs.

struct DeviceInstr {
  ElementwiseOp op;
  bool binary;
  int16_t operands[2];  // rM as M >= 0; iN as -1 - N.
  double p0, p1;
};

struct DeviceProgram {
  int size = 0;
  DeviceInstr instrs[kMaxFusedInstrs];
};

// The program parsed for the CPU kernel (kernels/fused_program.h), in the
// form a kernel argument takes; only the CUDA limits are checked here.
DeviceProgram device_program(const std::string& text, int num_inputs) {
  TANDEM_CHECK(num_inputs <= kMaxFusedInputs, "fused_elementwise on CUDA takes at most ",
               kMaxFusedInputs, " inputs, got ", num_inputs);
  std::shared_ptr<const FusedProgram> parsed = cached_fused_program(text, num_inputs);
  TANDEM_CHECK(parsed->instrs.size() <= static_cast<size_t>(kMaxFusedInstrs),
               "fused_elementwise on CUDA runs at most ", kMaxFusedInstrs,
               " instructions; the program has more");
  DeviceProgram program;
  for (const FusedInstr& instr : parsed->instrs) {
    DeviceInstr& device = program.instrs[program.size++];
    device = {.op = instr.code,
              .binary = instr.arity == 2,
              .operands = {0, 0},
              .p0 = instr.params[0],
              .p1 = instr.params[1]};
    for (int a = 0; a < instr.arity; ++a) {
      const FusedOperand& operand = instr.operands[static_cast<size_t>(a)];
      device.operands[a] =
          static_cast<int16_t>(operand.is_input ? -1 - operand.index : operand.index);
    }
  }
  return program;
}

template <class T>
struct FusedMap {
  DeviceProgram program;
  const T* inputs[kMaxFusedInputs];
  uint32_t scalar_inputs;  // Bit N: input N has one element, read for every i.
  T* out;

  __device__ T operand(const T* registers, int16_t o, int64_t i) const {
    if (o >= 0) return registers[o];
    int n = -1 - o;
    return inputs[n][(scalar_inputs >> n) & 1u ? 0 : i];
  }

  // One instruction's op on its operands (y unused for a unary op).
  static __device__ T run(const DeviceInstr& instr, T x, T y) {
    T result = x;
    elementwise::ElementwiseOps::visit(instr.op, [&]<class Op>() {
      // The parser admits only ops that compute in floating point.
      if constexpr (kFusable<Op>) {
        const Op f = make_formula<Op>(instr.p0, instr.p1);
        if constexpr (Op::kArity == 1) {
          result = f(x);
        } else {
          result = f(x, y);
        }
      }
    });
    return result;
  }

  __device__ void operator()(int64_t i) const {
    T registers[kMaxFusedInstrs];
    for (int k = 0; k < program.size; ++k) {
      const DeviceInstr& instr = program.instrs[k];
      T x = operand(registers, instr.operands[0], i);
      T y = instr.binary ? operand(registers, instr.operands[1], i) : x;
      registers[k] = run(instr, x, y);
    }
    out[i] = registers[program.size - 1];
  }
};

void fused_kernel(const KernelContext& c) {
  const DeviceProgram program =
      device_program(c.attrs.get_string("program"), static_cast<int>(c.inputs.size()));
  visit_floating(c.outputs[0].dtype(), [&]<class T>() {
    FusedMap<T> map{
        .program = program, .inputs = {}, .scalar_inputs = 0, .out = c.outputs[0].data<T>()};
    for (size_t n = 0; n < c.inputs.size(); ++n) {
      map.inputs[n] = c.inputs[n].data<T>();
      if (c.inputs[n].numel() == 1) map.scalar_inputs |= 1u << n;
    }
    for_each(stream_of(c), c.outputs[0].numel(), map);
  });
}

}  // namespace
}  // namespace cuda

void register_elementwise_cuda_kernels(Registry& registry) {
  using cuda::Comparison;
  namespace e = elementwise;
  registry.set_cuda_kernel(e::Add::kName, cuda::arithmetic_kernel<e::Add>);
  registry.set_cuda_kernel(e::Sub::kName, cuda::arithmetic_kernel<e::Sub>);
  registry.set_cuda_kernel(e::Mul::kName, cuda::arithmetic_kernel<e::Mul>);
  registry.set_cuda_kernel(e::Div::kName, cuda::arithmetic_kernel<e::Div>);
  registry.set_cuda_kernel(e::Pow::kName, cuda::arithmetic_kernel<e::Pow>);
  registry.set_cuda_kernel(e::Maximum::kName, cuda::arithmetic_kernel<e::Maximum>);
  registry.set_cuda_kernel(e::Minimum::kName, cuda::arithmetic_kernel<e::Minimum>);
  registry.set_cuda_kernel("eq", cuda::comparison_kernel<Comparison::kEq>);
  registry.set_cuda_kernel("ne", cuda::comparison_kernel<Comparison::kNe>);
  registry.set_cuda_kernel("lt", cuda::comparison_kernel<Comparison::kLt>);
  registry.set_cuda_kernel("le", cuda::comparison_kernel<Comparison::kLe>);
  registry.set_cuda_kernel("gt", cuda::comparison_kernel<Comparison::kGt>);
  registry.set_cuda_kernel("ge", cuda::comparison_kernel<Comparison::kGe>);

  cuda::register_unary_kernels(registry, static_cast<e::UnaryOps*>(nullptr));
  registry.set_cuda_kernel("cast", cuda::cast_kernel);
  registry.set_cuda_kernel("where", cuda::where_kernel);

  registry.set_cuda_kernel("fused_elementwise", cuda::fused_kernel);
}

}  // namespace tandem::kernels
