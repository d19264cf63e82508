// The unary elementwise ops of kernels/elementwise_ops.h (neg, abs, exp,
// sin, relu, gelu, isnan, ...; that file is their list), registered from
// their declarations; plus cast (any dtype to any dtype) and where (a
// ternary select with broadcasting).
//
// Element types: by each op's ElementTypes; outputs keep the input's dtype
// unless the op's result is bool. cast converts each element by Note [Cast
// semantics] in kernels/element_cast.h: on the CPU a NaN, infinite or
// out-of-range value cast to an integer dtype fails the op; on a GPU it
// saturates (NaN gives 0).
#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "kernels/broadcast.h"
#include "kernels/cpu/dtype_visit.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/vector_formulas.h"
#include "kernels/element_cast.h"
#include "kernels/elementwise_ops.h"
#include "kernels/known_ops.h"
#include "kernels/ops/families.h"
#include "kernels/ops/op_helpers.h"
#include "kernels/registry.h"

namespace tandem::kernels {

namespace {

// An expression of the gradient builder below: a tensor, with the
// arithmetic operators as ops. A double beside an expression becomes a
// scalar of its dtype.
struct GradExpr {
  Tensor t;
};

}  // namespace

template <class Op, class E, class... Params>
E apply_op(const E& e, Params... params) {
  static_assert(sizeof...(Params) == Op::kParams.size(), "give every parameter of the op");
  Attrs attrs;
  size_t k = 0;
  (attrs.set(std::string(Op::kParams[k++].name), static_cast<double>(params)), ...);
  return E{nested_call1(op_def<Op>(), {e.t}, attrs)};
}

namespace {

Tensor scalar_like(double value, const Tensor& t) { return scalar_tensor(value, t.dtype()); }

GradExpr binary(const OpDef& op, const GradExpr& a, const GradExpr& b) {
  return {nested_call1(op, {a.t, b.t})};
}
GradExpr binary(const OpDef& op, const GradExpr& a, double b) {
  return {nested_call1(op, {a.t, scalar_like(b, a.t)})};
}
GradExpr binary(const OpDef& op, double a, const GradExpr& b) {
  return {nested_call1(op, {scalar_like(a, b.t), b.t})};
}

template <class A, class B>
constexpr bool kHasGradExpr = std::is_same_v<A, GradExpr> || std::is_same_v<B, GradExpr>;

template <class A, class B>
requires kHasGradExpr<A, B> GradExpr operator+(const A& a, const B& b) {
  return binary(op_def<elementwise::Add>(), a, b);
}
template <class A, class B>
requires kHasGradExpr<A, B> GradExpr operator-(const A& a, const B& b) {
  return binary(op_def<elementwise::Sub>(), a, b);
}
template <class A, class B>
requires kHasGradExpr<A, B> GradExpr operator*(const A& a, const B& b) {
  return binary(op_def<elementwise::Mul>(), a, b);
}
template <class A, class B>
requires kHasGradExpr<A, B> GradExpr operator/(const A& a, const B& b) {
  return binary(op_def<elementwise::Div>(), a, b);
}
GradExpr operator-(const GradExpr& a) { return apply_op<elementwise::Neg>(a); }

// What an op's gradient template sees (Note in kernels/elementwise_formula.h).
template <class Op>
struct GradientBuilder {
  GradExpr x, y, g;  // Input, output, the output's gradient.
  const Attrs& attrs;

  double param(int k) const {
    return attrs.get_float(std::string(Op::kParams[static_cast<size_t>(k)].name));
  }
  bool floating() const { return is_floating_point(x.t.dtype()); }
  GradExpr none() const { return {}; }
  GradExpr gt(const GradExpr& a, double b) const { return binary(gt_op(), a, b); }
  GradExpr ge(const GradExpr& a, double b) const { return binary(ge_op(), a, b); }
  GradExpr lt(const GradExpr& a, double b) const { return binary(lt_op(), a, b); }
  GradExpr le(const GradExpr& a, double b) const { return binary(le_op(), a, b); }
  // cond ? a : b, where a double is a scalar of the gradient's dtype.
  template <class A, class B>
  GradExpr where(const GradExpr& cond, const A& a, const B& b) const {
    return {nested_call1("where", {cond.t, tensor_of(a), tensor_of(b)})};
  }

 private:
  Tensor tensor_of(const GradExpr& e) const { return e.t; }
  Tensor tensor_of(double v) const { return scalar_like(v, g.t); }
};

template <class Op>
std::vector<Tensor> unary_gradient(const GradContext& c) {
  GradientBuilder<Op> builder{{c.inputs[0]}, {c.outputs[0]}, {c.grad_outputs[0]}, c.attrs};
  return {Op::gradient(builder).t};
}

// Inference: the op's element types, and its parameters' constraints.

bool takes(ElementTypes types, DType dtype) {
  switch (types) {
    case ElementTypes::kFloating:
      return dtype == DType::kFloat32 || dtype == DType::kFloat64;
    case ElementTypes::kSignedNumeric:
      return dtype == DType::kFloat32 || dtype == DType::kFloat64 || dtype == DType::kInt32 ||
             dtype == DType::kInt64;
    case ElementTypes::kIntegerOrBool:
      return dtype == DType::kInt32 || dtype == DType::kInt64 || dtype == DType::kUInt8 ||
             dtype == DType::kBool;
    case ElementTypes::kAll:
      return true;
  }
  return false;
}

const char* types_text(ElementTypes types) {
  switch (types) {
    case ElementTypes::kFloating:
      return "float32 or float64";
    case ElementTypes::kSignedNumeric:
      return "float32, float64, int32 or int64";
    case ElementTypes::kIntegerOrBool:
      return "int32, int64, uint8 or bool";
    case ElementTypes::kAll:
      return "any dtype";
  }
  return "";
}

template <class Op>
TensorMetas infer_unary(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  TANDEM_CHECK(takes(Op::kTypes, in[0].dtype), "input must be ", types_text(Op::kTypes), ", got ",
               dtype_name(in[0].dtype));
  if constexpr (Op::kOrderedParams) {
    const std::string lo(Op::kParams[0].name), hi(Op::kParams[1].name);
    TANDEM_CHECK(attrs.get_float(lo) <= attrs.get_float(hi), lo, " must not exceed ", hi, ", got ",
                 lo, "=", attrs.get_float(lo), " and ", hi, "=", attrs.get_float(hi));
  }
  return {{in[0].shape, Op::kBoolResult ? DType::kBool : in[0].dtype}};
}

// The kernel: out[i] = f(in[i]) with f the op's formula and parameters.
// Outputs are fresh buffers (dispatch allocates them), so nothing aliases.
template <class Op, class T, class Out>
void map_range(const Op& f, const T* __restrict in, Out* __restrict out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = f(in[i]);
}

template <class Op, class T>
void map_elements(const KernelContext& c) {
  using Out = std::conditional_t<Op::kBoolResult, bool, T>;
  const Op f = formula_from<Op>(c.attrs);
  const T* in = c.inputs[0].data<T>();
  Out* out = c.outputs[0].data<Out>();
  // Formulas that call libm split over the cores at fewer elements.
  const int64_t grain = Op::kCostly ? kCostlyGrain : kCheapGrain;
  if constexpr (std::is_same_v<T, float> && cpu::kHasVectorFormula<Op>) {
    // Note [Vectorized formulas] in kernels/cpu/vector_formulas.h.
    parallel_for(c.outputs[0].numel(), grain, [&](int64_t begin, int64_t end) {
      cpu::map_floats(cpu::VectorFormula<Op>{}, in + begin, out + begin, end - begin);
    });
    return;
  }
  parallel_for(c.outputs[0].numel(), grain, [&](int64_t begin, int64_t end) {
    map_range(f, in + begin, out + begin, end - begin);
  });
}

template <class Op>
void unary_kernel(const KernelContext& c) {
  visit_element_types<Op::kTypes>(c.inputs[0].dtype(), [&]<class T>() { map_elements<Op, T>(c); });
}

template <class Op>
OpDef unary_op_def() {
  static constexpr auto kInfos = elementwise::ElementwiseOps::infos();
  OpDef def{
      .name = std::string(Op::kName),
      .infer = infer_unary<Op>,
      .cpu = unary_kernel<Op>,
      .differentiable = Op::kDifferentiable,
      .doc = std::string(Op::kDoc),
      .elementwise = &kInfos[static_cast<size_t>(elementwise::ElementwiseOps::code_of<Op>())]};
  for (const FormulaParam& param : Op::kParams) {
    def.attrs.push_back({.name = std::string(param.name), .default_value = param.default_value});
  }
  if constexpr (Op::kDifferentiable) def.gradient = unary_gradient<Op>;
  return def;
}

template <class... Ops>
void register_unary_ops(Registry& registry, ElementwiseOpList<Ops...>*) {
  (registry.add(unary_op_def<Ops>()), ...);
}

// cast and where.

TensorMetas infer_cast(absl::Span<const TensorMeta> in, const Attrs& attrs) {
  return {{in[0].shape, attrs.get_dtype("dtype")}};
}

TensorMetas infer_where(absl::Span<const TensorMeta> in, const Attrs&) {
  TANDEM_CHECK(in[0].dtype == DType::kBool, "condition must be bool, got ", dtype_name(in[0].dtype),
               " (shape ", in[0].shape.to_string(), "); compare first");
  TANDEM_CHECK(in[1].dtype == in[2].dtype, "dtype mismatch: ", dtype_name(in[1].dtype), " and ",
               dtype_name(in[2].dtype), " (shapes ", in[1].shape.to_string(), " and ",
               in[2].shape.to_string(), "); cast one operand first");
  Shape shape = broadcast_shapes(broadcast_shapes(in[0].shape, in[1].shape), in[2].shape);
  return {{shape, in[1].dtype}};
}

// A floating value with no integer to go to fails the op, naming the
// element, its value and the dtype (Note [Cast semantics]).
template <class To, class From>
void check_cast_range(const From* src, int64_t begin, int64_t end, DType to) {
  for (int64_t i = begin; i < end; ++i) {
    TANDEM_CHECK(in_range<To>(src[i]), "cannot cast element ", i, " (",
                 static_cast<double>(widen(src[i])), ") to ", dtype_name(to),
                 ": it is NaN, infinite or beyond the range of ", dtype_name(to));
  }
}

void cast_kernel(const KernelContext& c) {
  const Tensor& in = c.inputs[0];
  const Tensor& out = c.outputs[0];
  int64_t n = in.numel();
  visit_all(in.dtype(), [&]<class From>() {
    visit_all(out.dtype(), [&]<class To>() {
      const From* src = in.data<From>();
      To* dst = out.data<To>();
      parallel_for(n, kCheapGrain, [&](int64_t begin, int64_t end) {
        // The conversion loop stays branch-free (it vectorizes); only a range
        // that holds a bad value looks again to name it.
        bool all_in_range = true;
        for (int64_t i = begin; i < end; ++i) {
          dst[i] = convert<To>(src[i]);
          all_in_range &= in_range<To>(src[i]);
        }
        if (!all_in_range) check_cast_range<To>(src, begin, end, out.dtype());
      });
    });
  });
}

// cond ? a : b as a bitwise select on the condition's byte: no branch, which
// on data-dependent conditions (a gradient's x > 0) mispredicted half the
// time and was most of where's time; and, the byte read as an integer (a
// bool GCC would not widen), a loop of these vectorizes.
template <class T>
T select(uint8_t cond, T a, T b) {
  using Bits = std::conditional_t<
      sizeof(T) == 1, uint8_t,
      std::conditional_t<sizeof(T) == 2, uint16_t,
                         std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>>>;
  static_assert(sizeof(Bits) == sizeof(T));
  const Bits mask = static_cast<Bits>(Bits{0} - static_cast<Bits>(cond != 0));
  return std::bit_cast<T>(static_cast<Bits>((std::bit_cast<Bits>(a) & mask) |
                                            (std::bit_cast<Bits>(b) & static_cast<Bits>(~mask))));
}

// out[i] = cond[i * sc] ? a[i * sa] : b[i * sb] for i < n, each stride 1 or
// 0 (a scalar); the common patterns get loops of their own so that they
// vectorize (a gradient's where(x > 0, g, 0) is the second).
template <class T>
void where_row(const uint8_t* __restrict cond, int64_t sc, const T* __restrict a, int64_t sa,
               const T* __restrict b, int64_t sb, T* __restrict out, int64_t n) {
  if (sc == 1 && sa == 1 && sb == 1) {
    for (int64_t i = 0; i < n; ++i) out[i] = select(cond[i], a[i], b[i]);
  } else if (sc == 1 && sa == 1 && sb == 0) {
    const T vb = b[0];
    for (int64_t i = 0; i < n; ++i) out[i] = select(cond[i], a[i], vb);
  } else if (sc == 1 && sa == 0 && sb == 1) {
    const T va = a[0];
    for (int64_t i = 0; i < n; ++i) out[i] = select(cond[i], va, b[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = select(cond[i * sc], a[i * sa], b[i * sb]);
  }
}

// Rows shorter than this are stepped element by element: a row's offsets
// cost a division per axis.
constexpr int64_t kRowAtLeast = 16;

// out[i] = cond[i'] ? a[i''] : b[i'''] over the broadcast shape.
void where_kernel(const KernelContext& c) {
  const Tensor& out = c.outputs[0];
  const Shape& shape = out.shape();
  const int64_t n = shape.numel();
  int rank = shape.rank();
  // Operands that are whole (laid out like the output) or scalars make the
  // output one flat row.
  bool flat = true;
  int64_t flat_stride[3];
  for (int k = 0; k < 3; ++k) {
    const int64_t count = c.inputs[k].numel();
    flat &= count == n || count == 1;
    flat_stride[k] = count == n ? 1 : 0;
  }
  Strides strides[3];
  for (int k = 0; k < 3; ++k) strides[k] = broadcast_strides(c.inputs[k].shape(), shape);
  // Read as bytes: see select().
  const auto* cond = reinterpret_cast<const uint8_t*>(c.inputs[0].data<bool>());
  visit_all(out.dtype(), [&]<class T>() {
    const T* a = c.inputs[1].data<T>();
    const T* b = c.inputs[2].data<T>();
    T* dst = out.data<T>();
    if (flat) {
      const int64_t sc = flat_stride[0], sa = flat_stride[1], sb = flat_stride[2];
      parallel_for(n, kCheapGrain, [&](int64_t begin, int64_t end) {
        where_row(cond + begin * sc, sc, a + begin * sa, sa, b + begin * sb, sb, dst + begin,
                  end - begin);
      });
      return;
    }
    // Rows of the innermost axis, each one where_row (a causal mask [T, T]
    // over scores [B, H, T, T]: the mask's row, the scores' row, a scalar).
    const int64_t inner = shape[rank - 1];
    if (inner >= kRowAtLeast) {
      const int last = rank - 1;
      parallel_for(
          n / inner, std::max<int64_t>(1, kCheapGrain / inner), [&](int64_t begin, int64_t end) {
            for (int64_t r = begin; r < end; ++r) {
              int64_t offset[3] = {0, 0, 0};
              int64_t rest = r;
              for (int axis = last - 1; axis >= 0; --axis) {
                const int64_t i = rest % shape[axis];
                rest /= shape[axis];
                for (int k = 0; k < 3; ++k) offset[k] += i * strides[k][axis];
              }
              where_row(cond + offset[0], strides[0][last], a + offset[1], strides[1][last],
                        b + offset[2], strides[2][last], dst + r * inner, inner);
            }
          });
      return;
    }
    parallel_for(n, kCheapGrain, [&](int64_t begin, int64_t end) {
      // The multi-index of element `begin`, and each input's offset there.
      Strides index(rank, 0);
      int64_t offset[3] = {0, 0, 0};
      int64_t rest = begin;
      for (int axis = rank - 1; axis >= 0; --axis) {
        index[axis] = rest % shape[axis];
        rest /= shape[axis];
        for (int k = 0; k < 3; ++k) offset[k] += index[axis] * strides[k][axis];
      }
      for (int64_t i = begin; i < end; ++i) {
        dst[i] = select(cond[offset[0]], a[offset[1]], b[offset[2]]);
        // Advance the multi-index (innermost axis first) with carries.
        for (int axis = rank - 1; axis >= 0; --axis) {
          for (int k = 0; k < 3; ++k) offset[k] += strides[k][axis];
          if (++index[axis] < shape[axis]) break;
          for (int k = 0; k < 3; ++k) offset[k] -= strides[k][axis] * shape[axis];
          index[axis] = 0;
        }
      }
    });
  });
}

// Between floating dtypes the gradient casts back; anything else (to or from
// an integer or bool) has no gradient.
std::vector<Tensor> cast_gradient(const GradContext& c) {
  DType from = c.inputs[0].dtype();
  if (!is_floating_point(from) || !is_floating_point(c.outputs[0].dtype())) return {Tensor()};
  return {nested_call1(cast_op(), {c.grad_outputs[0]}, {{"dtype", from}})};
}

std::vector<Tensor> where_gradient(const GradContext& c) {
  const Tensor& cond = c.inputs[0];
  const Tensor& g = c.grad_outputs[0];
  Tensor zero = scalar_like(0, g);
  return {Tensor(), sum_to(nested_call1("where", {cond, g, zero}), c.inputs[1].shape()),
          sum_to(nested_call1("where", {cond, zero, g}), c.inputs[2].shape())};
}

}  // namespace

const OpDef& cast_op() { return op_def<"cast">(); }
const OpDef& where_op() { return op_def<"where">(); }

void register_elementwise_unary_ops(Registry& registry) {
  register_unary_ops(registry, static_cast<elementwise::UnaryOps*>(nullptr));
  registry.add({.name = "cast",
                .attrs = {{.name = "dtype", .default_value = DType::kFloat32, .required = true}},
                .infer = infer_cast,
                .cpu = cast_kernel,
                .gradient = cast_gradient,
                .doc = "x converted to `dtype` (see Note [Cast semantics])"});
  registry.add({.name = "where",
                .num_inputs = 3,
                .attrs = {},
                .infer = infer_where,
                .cpu = where_kernel,
                .gradient = where_gradient,
                .doc = "cond ? a : b, broadcasting all three"});
}

}  // namespace tandem::kernels
