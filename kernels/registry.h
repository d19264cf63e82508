// The op registry: every op, defined once (docs/ARCHITECTURE.md, "One op, one place").
//
// An op family file (kernels/ops/<family>.cc) registers its ops side by side:
//
//   void register_elementwise_binary_ops(Registry& registry) {
//     registry.add({
//         .name = "add",
//         .num_inputs = 2,
//         .infer = infer_broadcast,           // shapes and dtypes, on the caller's thread
//         .cpu = binary_kernel<Add>,          // runs on an engine worker
//         .gradient = add_gradient,           // written with other ops
//     });
//   }
//
// Eager dispatch (dispatch.h), autograd, the tracer, the graph passes and the
// model loader all read this table; nothing anywhere switches on op names:
// an op's name is written where it is defined and in its eager wrapper only
// (others read its traits or hold a handle from known_ops.h), which
// tests/kernels/op_name_literals_test.cc checks.
// A family's register function is listed once, in registry.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <source_location>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "absl/types/span.h"

#include "core/engine/engine.h"
#include "core/tensor.h"
#include "kernels/attrs.h"
#include "kernels/elementwise_formula.h"

namespace tandem::kernels {

// What inference knows about a tensor: its shape and dtype, no data.
struct TensorMeta {
  Shape shape;
  DType dtype = DType::kFloat32;
};
// The shapes of one call's inputs and outputs, for OpDef::one_core: what an
// eager call's tensors or a graph's values say, without copying either.
struct CallShapes {
  absl::Span<const Shape* const> inputs;
  absl::Span<const Shape* const> outputs;
};

// Inference's answer, one per output: inline for the usual single output, so
// that inferring a call allocates nothing.
using TensorMetas = absl::InlinedVector<TensorMeta, 1>;

// One attribute of an op's schema. An attribute without a default is
// required; a call that omits it is an error naming the op and attribute.
struct AttrSpec {
  std::string name;
  AttrValue default_value;
  bool required = false;
};

// What a kernel sees. Inputs are ready to read and outputs are allocated,
// with the shapes and dtypes inference gave; the engine guarantees no other
// op touches them while the kernel runs.
struct KernelContext {
  absl::Span<const Tensor> inputs;
  absl::Span<const Tensor> outputs;
  const Attrs& attrs;
  const engine::RunContext& run;
};

// What a gradient function sees: the forward call and the gradients of its
// outputs (an undefined Tensor where an output's gradient is zero).
struct GradContext {
  absl::Span<const Tensor> inputs;
  absl::Span<const Tensor> outputs;
  absl::Span<const Tensor> grad_outputs;
  const Attrs& attrs;
  // Which inputs need a gradient (torch's ctx.needs_input_grad); empty means
  // all. A formula may skip the others and return an undefined Tensor for
  // them: backward of a network's first layer then computes no gradient for
  // its input data (a GEMM or a backward convolution as large as the weight's).
  absl::Span<const bool> needs_input_grad = {};

  bool needs_grad(size_t input) const {
    return needs_input_grad.empty() || needs_input_grad[input];
  }
};

// Shape and dtype inference. Checks its inputs with TANDEM_CHECK; the message
// then names the op and the user's line (see Note [Call sites] in error.h).
using InferFn = TensorMetas (*)(absl::Span<const TensorMeta> inputs, const Attrs& attrs);
using KernelFn = void (*)(const KernelContext& context);
// Returns one gradient per input, each computed with ops (so it runs through
// the engine and is traced like any op; autograd does not record it, so there
// is no double backward: trace/README.md, "Limits today"); an undefined
// Tensor for inputs that get no gradient.
using GradientFn = std::vector<Tensor> (*)(const GradContext& context);

inline constexpr int kVariadic = -1;

struct OpDef {
  std::string name;
  int num_inputs = 1;   // Or kVariadic (at least one).
  int num_outputs = 1;  // Or kVariadic: inference decides (e.g. split).
  std::vector<AttrSpec> attrs = {};
  InferFn infer = nullptr;
  KernelFn cpu = nullptr;
  KernelFn cuda = nullptr;  // Filled by the CUDA backend where it exists.
  GradientFn gradient = nullptr;
  // Ops without a gradient must say so: an op that forgot its gradient fails
  // the registry's completeness test instead of silently stopping backward.
  bool differentiable = true;
  // A one-line description for listings and error messages.
  std::string doc;
  // The CPU kernel runs multi-threaded (oneDNN's OpenMP) and gets the whole
  // thread budget; see Note [Thread budget] in dispatch.h.
  bool uses_all_cores = false;
  // For a uses_all_cores op: whether a call of these shapes runs on one
  // thread instead (matmul's plain loops for tiny products, linear's kernel
  // for a few rows), so that it skips the all-cores lock and may run inline.
  // Its kernel must then start no OpenMP team. Null: every call uses all
  // cores.
  bool (*one_core)(const CallShapes& shapes) = nullptr;
  // A call's work, for deciding whether it is tiny enough to run on the
  // pushing thread (Note [Tiny ops run inline] in core/engine/
  // threaded_engine.cc): for an op whose kernel does more per element than
  // a pass over it, in element passes (matmul: its multiply-adds). Null: the
  // elements of its inputs and outputs.
  int64_t (*work)(const CallShapes& shapes) = nullptr;
  // For ops that choose where their outputs live (creation ops; to_device):
  // the outputs' device, from the resolved attributes. Null: the inputs'
  // device. The op runs on the GPU if either side is one (a copy to the host
  // runs on the GPU that holds the data).
  Device (*output_device)(const Attrs& attrs) = nullptr;
  // Its one output is its one input's elements, in order, under another
  // shape (reshape, flatten): an eager call returns a view of the input's
  // data and runs no kernel, as torch's reshape of a contiguous tensor does
  // (Tandem's tensors are always contiguous, and no op writes a tensor it
  // did not create). Graphs, and calls a tracer records (it tells values
  // apart by their storage), run the kernel.
  bool is_view = false;
  // It exchanges data with other processes through a communicator
  // (kernels/communicator.h): eager dispatch and the executor order it after
  // every collective pushed before it (Note [Collectives run in program
  // order]), never run it inline, and let it finish after its kernel returns.
  bool collective = false;
  // For the ops of kernels/elementwise_ops.h: the op's formula traits (its
  // fused-program instruction, its fused activation); null for the rest.
  const ElementwiseInfo* elementwise = nullptr;

  // Filled by Registry::add from `attrs`: every attribute that has a default,
  // set to it (what a call that gives no attributes resolves to), and
  // whether any attribute is required.
  Attrs defaults = {};
  bool has_required_attrs = false;
  // Filled by Registry::add and set_cuda_kernel: the source files that
  // define the op (where it was added, where its CUDA kernel was set), the
  // only files besides its eager wrapper that write its name
  // (tests/kernels/op_name_literals_test.cc).
  std::vector<std::string> defined_in = {};
};

class Registry {
 public:
  // Every op Tandem has; built on first use.
  static const Registry& global();

  // Throws tandem::Error "unknown op 'x'" for a name that is not registered.
  const OpDef& get(std::string_view name) const;
  const OpDef* find(std::string_view name) const;
  // All ops, sorted by name.
  std::vector<const OpDef*> all() const;

  // Adds an op; throws tandem::Error if the definition is incomplete or the
  // name is taken. Used by the family register functions.
  void add(OpDef def, std::source_location where = std::source_location::current());
  // Fills the CUDA kernel slot of a registered op, once. Used by the CUDA
  // backend (kernels/cuda/), which registers after every op family.
  void set_cuda_kernel(std::string_view name, KernelFn kernel,
                       std::source_location where = std::source_location::current());

 private:
  absl::flat_hash_map<std::string, std::unique_ptr<OpDef>> ops_;
};

// A string literal as a template argument (op_def<"relu">() below).
template <size_t N>
struct OpName {
  constexpr OpName(const char (&name)[N]) {
    for (size_t i = 0; i < N; ++i) chars[i] = name[i];
  }
  char chars[N];
};

// The op named by a literal, looked up in the global registry once per name
// rather than on every call: what eager's functions dispatch with.
//
//   kernels::call1(kernels::op_def<"relu">(), {x}, {}, where);
template <OpName kName>
const OpDef& op_def() {
  static const OpDef& def = Registry::global().get(kName.chars);
  return def;
}
// The same for a struct naming its op as kName (an elementwise op's, in
// kernels/elementwise_ops.h):
//
//   if (node.op == &kernels::op_def<kernels::elementwise::Add>()) ...
template <class Op>
const OpDef& op_def() {
  static const OpDef& def = Registry::global().get(Op::kName);
  return def;
}

// Whether the op's schema has an attribute of that name.
bool has_attr(const OpDef& op, std::string_view name);

// Whether the op draws random numbers: its schema has a "seed" attribute,
// which fixes the draw (the same seed, the same values), and which the
// executor may replace per call (trace/executor.h). Such a node is never
// folded into a constant.
bool is_random(const OpDef& op);

// The op's attributes with defaults filled in; throws tandem::Error naming the
// op for unknown or missing attributes and wrong types.
Attrs resolve_attrs(const OpDef& op, const Attrs& given);

}  // namespace tandem::kernels
