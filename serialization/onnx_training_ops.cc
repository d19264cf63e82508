// The optimizers of ONNX's ai.onnx.preview.training domain: Adagrad, Adam
// and Momentum (standard and Nesterov), one update step each, as Tandem's
// elementwise ops.
//
// Their inputs are R (the learning rate) and T (the step count, int64),
// both scalars, then the tensors to update as groups of equal length: X
// (the parameters), G (their gradients) and each optimizer's state (V, H).
// The outputs are the groups' new values in the same order: new X, then the
// new state. Step-dependent choices (T > 0) are `where` on the data, so an
// imported update step runs at every T.
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/known_ops.h"
#include "serialization/onnx_convert.h"

namespace tandem::serialization::onnx_convert {
namespace {

// The groups after R and T: groups[g][i] is tensor i of group g.
std::vector<std::vector<OnnxValue>> groups_of(Node& n, size_t count) {
  if (n.num_inputs() < 2 + count || (n.num_inputs() - 2) % count != 0) {
    n.refuse(str_cat(n.num_inputs(), " inputs are not R, T and ", count, " groups of tensors"));
  }
  const size_t size = (n.num_inputs() - 2) / count;
  if (n.num_outputs() != (count - 1) * size) {
    n.refuse(str_cat(n.num_outputs(), " outputs for ", size, " tensors to update"));
  }
  std::vector<std::vector<OnnxValue>> groups(count);
  for (size_t g = 0; g < count; ++g) {
    for (size_t i = 0; i < size; ++i) {
      const OnnxValue v = n.input(2 + g * size + i);
      if (!is_floating_point(n.meta(v).dtype)) n.refuse("the tensors to update must be floats");
      groups[g].push_back(v);
    }
  }
  return groups;
}

// R and T as scalars of x's dtype, and whether T > 0.
struct Step {
  OnnxValue rate, count, started;
};

Step step_of(Node& n, const OnnxValue& like) {
  const DType dtype = n.meta(like).dtype;
  if (n.shape(0).numel() != 1 || n.shape(1).numel() != 1) n.refuse("R and T must be scalars");
  const OnnxValue t = n.input(1);
  return {reshape(n, cast(n, n.input(0), dtype), {}), reshape(n, cast(n, t, dtype), {}),
          reshape(n, n.op(kernels::gt_op(), {}, {t, n.scalar(0, n.meta(t).dtype)}), {})};
}

OnnxValue times(Node& n, double c, const OnnxValue& x) {
  return ew2<ew::Mul>(n, scalar_like(n, x, c), x);
}
OnnxValue add(Node& n, const OnnxValue& a, const OnnxValue& b) { return ew2<ew::Add>(n, a, b); }
OnnxValue sub(Node& n, const OnnxValue& a, const OnnxValue& b) { return ew2<ew::Sub>(n, a, b); }
OnnxValue mul(Node& n, const OnnxValue& a, const OnnxValue& b) { return ew2<ew::Mul>(n, a, b); }
OnnxValue div(Node& n, const OnnxValue& a, const OnnxValue& b) { return ew2<ew::Div>(n, a, b); }

// G + norm_coefficient * X.
OnnxValue regularized(Node& n, const OnnxValue& x, const OnnxValue& g) {
  return add(n, times(n, n.attr_float("norm_coefficient", 0), x), g);
}

// r = R / (1 + T decay); H' = H + G^2; X' = X - r G / (sqrt(H') + eps).
void convert_adagrad(Node& n) {
  const auto groups = groups_of(n, 3);
  const size_t size = groups[0].size();
  const double decay = n.attr_float("decay_factor", 0), epsilon = n.attr_float("epsilon", 1e-6);
  const Step s = step_of(n, groups[0][0]);
  const OnnxValue rate =
      div(n, s.rate, add(n, scalar_like(n, s.count, 1), times(n, decay, s.count)));
  for (size_t i = 0; i < size; ++i) {
    const OnnxValue &x = groups[0][i], &h = groups[2][i];
    const OnnxValue g = regularized(n, x, groups[1][i]);
    const OnnxValue h_new = add(n, h, mul(n, g, g));
    const OnnxValue scale = add(n, ew1<ew::Sqrt>(n, h_new), scalar_like(n, h_new, epsilon));
    n.set_output(i, sub(n, x, div(n, mul(n, rate, g), scale)));
    n.set_output(size + i, h_new);
  }
}

// V' = a V + (1 - a) G; H' = b H + (1 - b) G^2; X' = (X - r V' / (sqrt(H') +
// eps)) (1 - post), r = R sqrt(1 - b^T) / (1 - a^T) once T > 0, else R.
void convert_adam(Node& n) {
  const auto groups = groups_of(n, 4);
  const size_t size = groups[0].size();
  const double alpha = n.attr_float("alpha", 0.9), beta = n.attr_float("beta", 0.999);
  const double epsilon = n.attr_float("epsilon", 1e-6);
  const double post = n.attr_float("norm_coefficient_post", 0);
  const Step s = step_of(n, groups[0][0]);
  auto power = [&](double base) { return ew2<ew::Pow>(n, scalar_like(n, s.count, base), s.count); };
  const OnnxValue one = scalar_like(n, s.rate, 1);
  const OnnxValue corrected =
      div(n, mul(n, s.rate, ew1<ew::Sqrt>(n, sub(n, one, power(beta)))), sub(n, one, power(alpha)));
  const OnnxValue rate = n.op(kernels::where_op(), {}, {s.started, corrected, s.rate});
  for (size_t i = 0; i < size; ++i) {
    const OnnxValue &x = groups[0][i], &v = groups[2][i], &h = groups[3][i];
    const OnnxValue g = regularized(n, x, groups[1][i]);
    const OnnxValue v_new = add(n, times(n, alpha, v), times(n, 1 - alpha, g));
    const OnnxValue h_new = add(n, times(n, beta, h), times(n, 1 - beta, mul(n, g, g)));
    const OnnxValue scale = add(n, ew1<ew::Sqrt>(n, h_new), scalar_like(n, h_new, epsilon));
    const OnnxValue x_new = sub(n, x, mul(n, rate, div(n, v_new, scale)));
    n.set_output(i, times(n, 1 - post, x_new));
    n.set_output(size + i, v_new);
    n.set_output(2 * size + i, h_new);
  }
}

// V' = a V + b' G, b' = b once T > 0, else 1; X' = X - R V' (standard) or
// X - R (G + a V') (nesterov).
void convert_momentum(Node& n) {
  const auto groups = groups_of(n, 3);
  const size_t size = groups[0].size();
  const onnx::AttributeProto* alpha_attr = n.attr("alpha");
  const onnx::AttributeProto* beta_attr = n.attr("beta");
  if (alpha_attr == nullptr || beta_attr == nullptr || n.attr("mode") == nullptr ||
      n.attr("norm_coefficient") == nullptr) {
    n.refuse("alpha, beta, mode and norm_coefficient are required");
  }
  const double alpha = n.attr_float("alpha", 0), beta = n.attr_float("beta", 0);
  const std::string mode = n.attr_string("mode", "");
  if (mode != "standard" && mode != "nesterov") n.refuse(str_cat("mode '", mode, "'"));
  const Step s = step_of(n, groups[0][0]);
  const OnnxValue g_scale =
      n.op(kernels::where_op(), {},
           {s.started, scalar_like(n, s.rate, beta), scalar_like(n, s.rate, 1)});
  for (size_t i = 0; i < size; ++i) {
    const OnnxValue &x = groups[0][i], &v = groups[2][i];
    const OnnxValue g = regularized(n, x, groups[1][i]);
    const OnnxValue v_new = add(n, times(n, alpha, v), mul(n, g_scale, g));
    const OnnxValue direction = mode == "standard" ? v_new : add(n, g, times(n, alpha, v_new));
    n.set_output(i, sub(n, x, mul(n, s.rate, direction)));
    n.set_output(size + i, v_new);
  }
}

}  // namespace

void add_training_converters(ConverterTable& table) {
  table.insert({
      {"Adagrad", convert_adagrad},
      {"Adam", convert_adam},
      {"Momentum", convert_momentum},
  });
}

}  // namespace tandem::serialization::onnx_convert
