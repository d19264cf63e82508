// ONNX's GridSample (opset 16, 2-D: X [N, C, H, W], grid [N, Ho, Wo, 2])
// as Tandem's elementwise ops and gathers: the output at each grid point is
// a weighted sum of taps of X, one per neighbour of the point (1 nearest, 4
// bilinear, 16 bicubic), each tap one gather of every channel.
//
// As ONNX's reference defines it: grid values in [-1, 1] map to pixel
// centres (align_corners = 1) or edges (0); a point beyond those "border"
// moves to the nearest pixel and "reflection" mirrors at them; then each
// tap outside the image reads 0 ("zeros"), its nearest pixel ("border") or
// its mirror image ("reflection").
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/known_ops.h"
#include "serialization/onnx_convert.h"

namespace tandem::serialization::onnx_convert {
namespace {

enum class Padding { kZeros, kBorder, kReflection };

// One image axis: its size and the interval points are mirrored in.
struct Axis {
  int64_t size;
  double low, high;
};

OnnxValue clipped(Node& n, const OnnxValue& x, double low, double high) {
  return ew1<ew::Clip>(n, x, {{"min", low}, {"max", high}});
}

// x mirrored at the ends of [low, high] until it lies inside: periodic with
// period 2 (high - low), so one floored remainder does it.
OnnxValue reflected(Node& n, const OnnxValue& x, const Axis& a) {
  const double span = a.high - a.low;
  if (span <= 0) {  // A single pixel, with align_corners: everything mirrors onto it.
    return n.op(kernels::full_op(),
                {{"shape", dims_of(n.meta(x).shape)}, {"dtype", n.meta(x).dtype}, {"value", a.low}},
                {});
  }
  const OnnxValue z = ew2<ew::Sub>(n, x, scalar_like(n, x, a.low));
  const OnnxValue period = scalar_like(n, x, 2 * span);
  const OnnxValue y =
      ew2<ew::Sub>(n, z, ew2<ew::Mul>(n, period, ew1<ew::Floor>(n, ew2<ew::Div>(n, z, period))));
  const OnnxValue folded = n.op(
      kernels::where_op(), {},
      {n.op(kernels::le_op(), {}, {y, scalar_like(n, y, span)}), y, ew2<ew::Sub>(n, period, y)});
  return ew2<ew::Add>(n, folded, scalar_like(n, x, a.low));
}

// A tap's pixel index along one axis ([N, Ho, Wo], integral floats) and
// whether it reads inside the image (zeros padding only).
struct TapIndex {
  OnnxValue index;
  std::optional<OnnxValue> inside;
};

TapIndex tap_index(Node& n, const OnnxValue& i, const Axis& a, Padding padding) {
  switch (padding) {
    case Padding::kZeros: {
      const OnnxValue inside =
          n.op(kernels::where_op(), {},
               {n.op(kernels::ge_op(), {}, {i, scalar_like(n, i, 0)}),
                n.op(kernels::lt_op(), {}, {i, scalar_like(n, i, double(a.size))}),
                n.scalar(0, DType::kBool)});
      return {clipped(n, i, 0, double(a.size - 1)), inside};
    }
    case Padding::kBorder:
      return {clipped(n, i, 0, double(a.size - 1)), std::nullopt};
    case Padding::kReflection:
      return {clipped(n, ew1<ew::Trunc>(n, reflected(n, i, a)), 0, double(a.size - 1)),
              std::nullopt};
  }
  return {i, std::nullopt};
}

// Keys' cubic convolution weights (A = -0.75) of the taps at floor(x) - 1
// .. floor(x) + 2, t = x - floor(x).
std::vector<OnnxValue> cubic_weights(Node& n, const OnnxValue& t) {
  const double a = -0.75;
  auto c = [&](double v) { return scalar_like(n, t, v); };
  auto mul = [&](const OnnxValue& p, const OnnxValue& q) { return ew2<ew::Mul>(n, p, q); };
  auto add = [&](const OnnxValue& p, const OnnxValue& q) { return ew2<ew::Add>(n, p, q); };
  auto sub = [&](const OnnxValue& p, const OnnxValue& q) { return ew2<ew::Sub>(n, p, q); };
  // Far taps (distance d in [1, 2]): ((A d - 5A) d + 8A) d - 4A; near ones
  // (d in [0, 1]): ((A + 2) d - (A + 3)) d^2 + 1.
  auto far = [&](const OnnxValue& d) {
    return sub(mul(add(mul(sub(mul(c(a), d), c(5 * a)), d), c(8 * a)), d), c(4 * a));
  };
  auto near = [&](const OnnxValue& d) {
    return add(mul(sub(mul(c(a + 2), d), c(a + 3)), mul(d, d)), c(1));
  };
  return {far(add(t, c(1))), near(t), near(sub(c(1), t)), far(sub(c(2), t))};
}

void convert_grid_sample(Node& n) {
  const OnnxValue x = n.input(0), grid = n.input(1);
  const Shape xs = n.shape(0), gs = n.shape(1);
  if (xs.rank() != 4 || gs.rank() != 4 || gs[3] != 2 || gs[0] != xs[0]) {
    n.refuse(str_cat("X must be [N, C, H, W] and grid [N, Ho, Wo, 2], not ", xs.to_string(),
                     " and ", gs.to_string()));
  }
  if (!is_floating_point(n.dtype(0)) || n.dtype(1) != n.dtype(0)) {
    n.refuse("X and grid must be floats of one dtype");
  }
  const std::string mode = n.attr_string("mode", "bilinear");
  const std::string padding_name = n.attr_string("padding_mode", "zeros");
  const bool corners = n.attr_int("align_corners", 0) != 0;
  if (mode != "bilinear" && mode != "nearest" && mode != "bicubic") {
    n.refuse(str_cat("mode '", mode, "'"));
  }
  Padding padding = Padding::kZeros;
  if (padding_name == "border") {
    padding = Padding::kBorder;
  } else if (padding_name == "reflection") {
    padding = Padding::kReflection;
  } else if (padding_name != "zeros") {
    n.refuse(str_cat("padding_mode '", padding_name, "'"));
  }
  const int64_t batch = xs[0], channels = xs[1], height = xs[2], width = xs[3];
  const int64_t points = checked_mul(gs[1], gs[2], "the grid's points");
  // The grid's x (width) and y (height) as pixel coordinates, [N, Ho, Wo].
  auto coordinate = [&](int64_t k, int64_t size) {
    const OnnxValue g = slice_at(n, grid, 3, k);
    const OnnxValue shifted = ew2<ew::Add>(n, g, scalar_like(n, g, 1));
    OnnxValue p =
        corners ? ew2<ew::Mul>(n, shifted, scalar_like(n, g, (size - 1) / 2.0))
                : ew2<ew::Mul>(
                      n,
                      ew2<ew::Sub>(n, ew2<ew::Mul>(n, shifted, scalar_like(n, g, double(size))),
                                   scalar_like(n, g, 1)),
                      scalar_like(n, g, 0.5));
    if (mode == "nearest") p = ew1<ew::Round>(n, p);
    const Axis a{size, corners ? 0.0 : -0.5, corners ? size - 1.0 : size - 0.5};
    if (padding == Padding::kBorder) {
      // Points outside [low, high] move to the nearest pixel; those inside
      // stay (without align_corners they may lie half a pixel out, where
      // bicubic taps still differ).
      auto beyond = [&](const kernels::OpDef& compare, double edge) {
        return n.op(compare, {}, {p, scalar_like(n, p, edge)});
      };
      p = n.op(kernels::where_op(), {},
               {beyond(kernels::lt_op(), a.low), scalar_like(n, p, 0),
                n.op(kernels::where_op(), {},
                     {beyond(kernels::gt_op(), a.high), scalar_like(n, p, double(size - 1)), p})});
    }
    if (padding == Padding::kReflection) p = reflected(n, p, a);
    return std::pair(p, a);
  };
  const auto [px, ax] = coordinate(0, width);
  const auto [py, ay] = coordinate(1, height);
  const OnnxValue flat_x = reshape(n, x, {batch, channels, checked_mul(height, width, "X")});
  // The taps along one axis: index and weight.
  struct Tap {
    OnnxValue at, weight;
  };
  auto taps = [&](const OnnxValue& p) {
    std::vector<Tap> t;
    if (mode == "nearest") return std::vector<Tap>{{ew1<ew::Trunc>(n, p), scalar_like(n, p, 1)}};
    const OnnxValue base = ew1<ew::Floor>(n, p);
    const OnnxValue frac = ew2<ew::Sub>(n, p, base);
    if (mode == "bilinear") {
      return std::vector<Tap>{{base, ew2<ew::Sub>(n, scalar_like(n, p, 1), frac)},
                              {ew2<ew::Add>(n, base, scalar_like(n, p, 1)), frac}};
    }
    const std::vector<OnnxValue> w = cubic_weights(n, frac);
    for (int k = 0; k < 4; ++k) {
      t.push_back({ew2<ew::Add>(n, base, scalar_like(n, p, double(k - 1))), w[size_t(k)]});
    }
    return t;
  };
  std::optional<OnnxValue> sum;
  for (const Tap& ty : taps(py)) {
    const TapIndex iy = tap_index(n, ty.at, ay, padding);
    for (const Tap& tx : taps(px)) {
      const TapIndex ix = tap_index(n, tx.at, ax, padding);
      const OnnxValue flat = ew2<ew::Add>(
          n, ew2<ew::Mul>(n, iy.index, scalar_like(n, iy.index, double(width))), ix.index);
      const OnnxValue index = n.op(kernels::expand_op(), {{"shape", Ints{batch, channels, points}}},
                                   {reshape(n, cast(n, flat, DType::kInt64), {batch, 1, points})});
      const OnnxValue picked = n.op(kernels::gather_op(), {{"axis", int64_t{2}}}, {flat_x, index});
      OnnxValue weight = ew2<ew::Mul>(n, ty.weight, tx.weight);
      for (const std::optional<OnnxValue>& inside : {iy.inside, ix.inside}) {
        if (inside) {
          weight = n.op(kernels::where_op(), {}, {*inside, weight, scalar_like(n, weight, 0)});
        }
      }
      // Nearest taps outside zeros padding weigh 1 everywhere: a scalar.
      if (n.meta(weight).shape.rank() != 0) weight = reshape(n, weight, {batch, 1, points});
      const OnnxValue term = ew2<ew::Mul>(n, picked, weight);
      sum = sum ? ew2<ew::Add>(n, *sum, term) : term;
    }
  }
  n.set_output(0, reshape(n, *sum, {batch, channels, gs[1], gs[2]}));
}

}  // namespace

void add_grid_sample_converter(ConverterTable& table) {
  table.insert({"GridSample", convert_grid_sample});
}

}  // namespace tandem::serialization::onnx_convert
