// fused_elementwise: a chain (or DAG) of elementwise ops run as one kernel,
// made by the elementwise fusion pass (trace/passes/elementwise_fusion.h).
// Each input element is read once and each output element written once; the
// intermediates live in small per-thread blocks instead of whole tensors.
//
// Note [Fused elementwise programs]: the "program" attribute is a text, one
// instruction per register, separated by ';', in order:
//
//   r0=exp(i0);r1=mul(r0,i1);r2=clip(r1,max=6,min=0)
//
// Instruction k defines rk from operands iN (the node's input N) and rM
// (M < k), followed by the op's float parameters as name=value (leaky_relu:
// alpha; clip: min and max; every parameter given, in any order). The last
// register is the output. Every input is read by some instruction. Numbers
// are written in the shortest form that reads back exactly (std::to_chars),
// so one graph gives one text: deterministic, comparable by CSE, and a plain
// string for the JSON format. Instructions compute exactly what the op of
// the same name computes (its formula in kernels/elementwise_ops.h). One parser,
// kernels/fused_program.h, reads the text for this CPU kernel and for the
// CUDA kernel (kernels/cuda/elementwise.cu).
//
// Inputs are float32 or float64, all of one dtype (the output's); each has
// the output's shape or is a one-element scalar broadcast to every element.
// The output's shape is the broadcast of the inputs' shapes.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "kernels/broadcast.h"
#include "kernels/cpu/dtype_visit.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vector_formulas.h"
#include "kernels/elementwise_ops.h"
#include "kernels/fused_program.h"
#include "kernels/known_ops.h"
#include "kernels/ops/families.h"
#include "kernels/registry.h"

namespace tandem::kernels {
namespace {

TensorMetas infer_fused(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  DType dtype = in[0].dtype;
  TANDEM_CHECK(dtype == DType::kFloat32 || dtype == DType::kFloat64,
               "inputs must be float32 or float64, got ", dtype_name(dtype));
  Shape shape = in[0].shape;
  for (size_t i = 1; i < in.size(); ++i) {
    TANDEM_CHECK(in[i].dtype == dtype, "input ", i, " is ", dtype_name(in[i].dtype),
                 ", input 0 is ", dtype_name(dtype), "; all inputs must have one dtype");
    shape = broadcast_shapes(shape, in[i].shape);
  }
  for (size_t i = 0; i < in.size(); ++i) {
    TANDEM_CHECK(in[i].shape == shape || in[i].shape.numel() == 1, "input ", i, " has shape ",
                 in[i].shape.to_string(), "; expected the output's shape ", shape.to_string(),
                 " or a one-element scalar");
  }
  parse_fused_program(attrs.get_string("program"), static_cast<int>(in.size()));
  return {{shape, dtype}};
}

// Elements per block: a few registers' blocks stay in L1.
constexpr int64_t kBlock = 256;

// The block loops. Registers' slots, inputs and the output never overlap
// (see FusedProgram; the output is a fresh buffer).
template <class T, class F>
void map1(const T* __restrict a, T* __restrict out, int64_t n, F f) {
  for (int64_t j = 0; j < n; ++j) out[j] = f(a[j]);
}
template <class T, class F>
void map2(const T* __restrict a, const T* __restrict b, T* __restrict out, int64_t n, F f) {
  for (int64_t j = 0; j < n; ++j) out[j] = f(a[j], b[j]);
}

template <class T>
void run_instr(const FusedInstr& instr, const T* a, const T* b, T* out, int64_t n) {
  elementwise::ElementwiseOps::visit(instr.code, [&]<class Op>() {
    // The parser admits only ops that compute in floating point.
    if constexpr (kFusable<Op>) {
      const Op f = make_formula<Op>(instr.params[0], instr.params[1]);
      if constexpr (std::is_same_v<T, float> && cpu::kHasVectorFormula<Op>) {
        cpu::map_floats(cpu::VectorFormula<Op>{}, a, out, n);  // As the unary kernel does.
      } else if constexpr (Op::kArity == 1) {
        map1(a, out, n, f);
      } else {
        map2(a, b, out, n, f);
      }
    }
  });
}

template <class T>
void run_program(const FusedProgram& program, const KernelContext& c) {
  const int64_t n = c.outputs[0].numel();
  const size_t num_inputs = c.inputs.size();
  std::vector<const T*> inputs(num_inputs);
  std::vector<bool> scalar(num_inputs);
  for (size_t i = 0; i < num_inputs; ++i) {
    inputs[i] = c.inputs[i].data<T>();
    scalar[i] = c.inputs[i].numel() == 1 && n != 1;
  }
  T* out = c.outputs[0].data<T>();
  // More instructions per element: more work per element, so fewer elements
  // pay for waking another core.
  const int64_t instrs = static_cast<int64_t>(program.instrs.size());
  const int64_t grain =
      program.costly ? kCostlyGrain : std::max(kCostlyGrain, kCheapGrain / instrs);
  parallel_for(n, grain, [&](int64_t begin, int64_t end) {
    // Register slots, then one block per scalar input filled with its value
    // (so every operand is a contiguous block and the loops vectorize).
    std::vector<T> scratch(static_cast<size_t>((program.num_slots + num_inputs) * kBlock));
    T* slots = scratch.data();
    T* broadcasts = slots + program.num_slots * kBlock;
    for (size_t i = 0; i < num_inputs; ++i) {
      if (scalar[i]) std::fill_n(broadcasts + i * kBlock, kBlock, inputs[i][0]);
    }
    for (int64_t start = begin; start < end; start += kBlock) {
      const int64_t len = std::min(kBlock, end - start);
      auto operand = [&](const FusedOperand& o) -> const T* {
        if (!o.is_input) return slots + program.slot[static_cast<size_t>(o.index)] * kBlock;
        size_t i = static_cast<size_t>(o.index);
        return scalar[i] ? broadcasts + i * kBlock : inputs[i] + start;
      };
      for (size_t k = 0; k < program.instrs.size(); ++k) {
        const FusedInstr& instr = program.instrs[k];
        T* dst = program.slot[k] < 0 ? out + start : slots + program.slot[k] * kBlock;
        const T* b = instr.arity == 2 ? operand(instr.operands[1]) : nullptr;
        run_instr<T>(instr, operand(instr.operands[0]), b, dst, len);
      }
    }
  });
}

void fused_kernel(const KernelContext& c) {
  std::shared_ptr<const FusedProgram> program =
      cached_fused_program(c.attrs.get_string("program"), static_cast<int>(c.inputs.size()));
  visit_floating(c.outputs[0].dtype(), [&]<class T>() { run_program<T>(*program, c); });
}

}  // namespace

const OpDef& fused_elementwise_op() { return op_def<"fused_elementwise">(); }

void register_fused_elementwise_ops(Registry& registry) {
  registry.add(
      {.name = "fused_elementwise",
       .num_inputs = kVariadic,
       .attrs = {{.name = "program", .default_value = std::string(), .required = true}},
       .infer = infer_fused,
       .cpu = fused_kernel,
       // Made by a pass after tracing, when gradients are already in the graph.
       .differentiable = false,
       .doc = "elementwise ops run as one kernel (see Note [Fused elementwise programs])"});
}

}  // namespace tandem::kernels
