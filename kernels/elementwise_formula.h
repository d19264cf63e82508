// What an elementwise op declares about itself, and the machinery that turns
// the list of such declarations (kernels/elementwise_ops.h) into every table
// that needs one: op codes, the fused-program parser's table, the CPU and
// CUDA interpreters' dispatch, the registry's traits.
//
// An elementwise op is a struct with a formula and static traits:
//
//   struct LeakyRelu : ElementwiseDefaults {
//     static constexpr std::string_view kName = "leaky_relu";
//     static constexpr std::array<FormulaParam, 1> kParams = {{{"alpha", 0.01}}};
//     static constexpr PostOp kPostOp = {.algorithm = PostOpAlgorithm::kRelu,
//                                        .alpha_is_param = true};
//     double alpha;  // One member per parameter, in kParams' order.
//     template <class T>
//     TANDEM_HOST_DEVICE T operator()(T x) const { return x >= T{0} ? x : T(alpha * x); }
//   };
//
// The formula is host and device code at once, so the CPU kernel, the fused
// interpreters and the CUDA kernels compute one expression. Plain C++ with
// light includes: nvcc compiles it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "kernels/host_device.h"

namespace tandem::kernels {

// The dtypes an elementwise op takes; its output keeps the input's dtype
// unless the op declares kBoolResult.
enum class ElementTypes : uint8_t {
  kFloating,       // float32, float64.
  kSignedNumeric,  // float32, float64, int32, int64.
  kIntegerOrBool,  // int32, int64, uint8, bool.
  kAll,            // Every dtype.
};

// A float parameter of the op: an attribute of the op and a member of its
// formula (in the same order), and a parameter of its fused instruction.
struct FormulaParam {
  std::string_view name;
  double default_value = 0;
};

// The oneDNN eltwise algorithm that computes an op as a post-op of conv2d
// and linear (Note [Fused activation] in kernels/cpu/onednn.h), with its
// constants: oneDNN computes scale * algorithm(x; alpha, beta).
enum class PostOpAlgorithm : uint8_t {
  kNone,  // The op is no fusable activation.
  kRelu,  // alpha: the negative slope.
  kTanh,
  kElu,  // alpha * (e^x - 1) below 0.
  kLogistic,
  kGeluErf,
  kSwish,  // x * sigmoid(alpha * x).
  kMish,
  kHardswish,
};
struct PostOp {
  PostOpAlgorithm algorithm = PostOpAlgorithm::kNone;
  float scale = 1;
  float alpha = 0;
  float beta = 0;
  bool alpha_is_param = false;  // alpha is the op's first parameter instead.
};

// What an op struct inherits unless it says otherwise.
struct ElementwiseDefaults {
  static constexpr int kArity = 1;
  static constexpr ElementTypes kTypes = ElementTypes::kFloating;
  static constexpr bool kBoolResult = false;  // The output is bool (isnan).
  static constexpr bool kCostly = false;      // The formula calls libm.
  static constexpr std::array<FormulaParam, 0> kParams{};
  // The first parameter must not exceed the second (clip's bounds).
  static constexpr bool kOrderedParams = false;
  static constexpr PostOp kPostOp{};
  // op(a, b) is op(b, a) bit for bit, gradients included, so cse may merge
  // the two. Add and mul are; maximum and minimum are not (max(0, -0) is -0
  // and max(-0, 0) is 0, and the gradient goes to `a` on ties).
  static constexpr bool kCommutative = false;
  // A unary op with a gradient defines
  //   template <class D> static auto gradient(const D& d);
  // over the gradient builder of kernels/ops/elementwise_unary.cc: d.x, d.y,
  // d.g (input, output, output's gradient) as expressions with + - * /,
  // d.apply(Op{params}, e) for any op of the list, comparisons and where.
  static constexpr bool kDifferentiable = true;
};

// Each op's code: its index in the list. A fused program's instruction
// stores it; it never leaves the process (the program text names ops).
enum class ElementwiseOp : uint8_t {};

// Everything about an op that code outside its formula needs, as data.
struct ElementwiseInfo {
  ElementwiseOp code{};
  std::string_view name;
  int arity = 1;
  ElementTypes types = ElementTypes::kFloating;
  bool bool_result = false;
  bool costly = false;
  int num_params = 0;
  std::array<FormulaParam, 2> params{};
  bool ordered_params = false;
  PostOp post_op{};
  bool fusable = false;  // kFusable<Op>.
  bool commutative = false;
};

// Whether fused programs may use Op: they compute in their inputs' floating
// dtype.
template <class Op>
inline constexpr bool kFusable = !Op::kBoolResult && Op::kTypes != ElementTypes::kIntegerOrBool;

template <class... Ops>
struct ElementwiseOpList {
  static constexpr int kSize = sizeof...(Ops);

  // This list followed by `Other`'s ops.
  template <class... More>
  static ElementwiseOpList<Ops..., More...> append(ElementwiseOpList<More...>*);
  template <class Other>
  using Append = decltype(append(static_cast<Other*>(nullptr)));

  // The code of Op, which must be in the list.
  template <class Op>
  static constexpr ElementwiseOp code_of() {
    int index = 0, found = -1;
    ((std::is_same_v<Op, Ops> ? (found = index, ++index) : ++index), ...);
    return static_cast<ElementwiseOp>(found);
  }

  static constexpr std::array<ElementwiseInfo, kSize> infos() {
    std::array<ElementwiseInfo, kSize> table{};
    int index = 0;
    ((table[static_cast<size_t>(index)] = info_of<Ops>(index), ++index), ...);
    return table;
  }

  // Calls fn.template operator()<Op>() for the op with `code`; false for a
  // code outside the list.
  template <class Fn>
  TANDEM_HOST_DEVICE static bool visit(ElementwiseOp code, Fn&& fn) {
    int index = 0;
    return ((static_cast<int>(code) == index++ ? (fn.template operator()<Ops>(), true) : false) ||
            ...);
  }

 private:
  template <class Op>
  static constexpr ElementwiseInfo info_of(int index) {
    static_assert(Op::kParams.size() <= 2, "a fused instruction carries at most two parameters");
    ElementwiseInfo info{.code = static_cast<ElementwiseOp>(index),
                         .name = Op::kName,
                         .arity = Op::kArity,
                         .types = Op::kTypes,
                         .bool_result = Op::kBoolResult,
                         .costly = Op::kCostly,
                         .num_params = static_cast<int>(Op::kParams.size()),
                         .params = {},
                         .ordered_params = Op::kOrderedParams,
                         .post_op = Op::kPostOp,
                         .fusable = kFusable<Op>,
                         .commutative = Op::kCommutative};
    size_t k = 0;
    for (const FormulaParam& param : Op::kParams) info.params[k++] = param;
    return info;
  }
};

// The formula of Op with its parameters p0, p1 (those it has, in order).
template <class Op>
TANDEM_HOST_DEVICE Op make_formula([[maybe_unused]] double p0, [[maybe_unused]] double p1) {
  if constexpr (Op::kParams.size() == 0) {
    return Op{};
  } else if constexpr (Op::kParams.size() == 1) {
    return Op{{}, p0};
  } else {
    return Op{{}, p0, p1};
  }
}

// The formula of Op with the parameters that `attrs` (an Attrs) holds.
template <class Op, class AttrsT>
Op formula_from(const AttrsT& attrs) {
  double p[2] = {0, 0};
  size_t k = 0;
  for (const FormulaParam& param : Op::kParams) p[k++] = attrs.get_float(param.name);
  return make_formula<Op>(p[0], p[1]);
}

// For gradients: Op with `params` applied to an expression of the gradient
// builder; defined with the builder (kernels/ops/elementwise_unary.cc), the
// only place that instantiates the ops' gradient templates.
template <class Op, class E, class... Params>
E apply_op(const E& e, Params... params);

}  // namespace tandem::kernels
