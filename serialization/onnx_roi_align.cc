// ONNX's RoiAlign (average mode, a fixed sampling_ratio) as Tandem's
// elementwise ops and one gather per bilinear tap: every region of interest
// is cut into output_height x output_width bins, each bin sampled on a
// sampling_ratio x sampling_ratio grid, each sample bilinearly
// interpolated, the samples averaged. The regions are data: the sample
// positions are computed in the graph from them, as ONNX's reference
// computes them (a sample more than a pixel outside the image reads 0; one
// at the last row or column reads it alone).
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "kernels/known_ops.h"
#include "serialization/onnx_convert.h"

namespace tandem::serialization::onnx_convert {
namespace {

// One image axis of the samples: the two taps' positions and weights, and
// whether each sample lies near enough to the image to count.
struct AxisSamples {
  OnnxValue low, high;      // int64 pixel positions.
  OnnxValue w_low, w_high;  // Weights.
  OnnxValue valid;          // bool.
};

// Samples along an axis of `size` pixels for regions starting at `start`
// with bins of `bin` ([R, 1, 1]): [R, bins, ratio].
AxisSamples samples(Node& n, const OnnxValue& start, const OnnxValue& bin, int64_t bins,
                    int64_t ratio, int64_t size) {
  std::vector<double> offsets;
  for (int64_t b = 0; b < bins; ++b) {
    for (int64_t s = 0; s < ratio; ++s)
      offsets.push_back(double(b) + (double(s) + 0.5) / double(ratio));
  }
  const OnnxValue grid =
      cast(n, n.constant(Tensor::from_vector<double>(offsets, Shape{1, bins, ratio})),
           n.meta(start).dtype);
  auto c = [&](double v) { return scalar_like(n, start, v); };
  auto where = [&](const OnnxValue& cond, const OnnxValue& a, const OnnxValue& b) {
    return n.op(kernels::where_op(), {}, {cond, a, b});
  };
  OnnxValue p = ew2<ew::Add>(n, start, ew2<ew::Mul>(n, bin, grid));
  const OnnxValue valid =
      where(n.op(kernels::ge_op(), {}, {p, c(-1)}),
            n.op(kernels::le_op(), {}, {p, c(double(size))}), n.scalar(0, DType::kBool));
  p = ew2<ew::Maximum>(n, p, c(0));
  const OnnxValue floor = ew1<ew::Floor>(n, p);
  const OnnxValue edge = n.op(kernels::ge_op(), {}, {floor, c(double(size - 1))});
  const OnnxValue low = where(edge, c(double(size - 1)), floor);
  const OnnxValue high = where(edge, c(double(size - 1)), ew2<ew::Add>(n, floor, c(1)));
  const OnnxValue fraction = ew2<ew::Sub>(n, where(edge, low, p), low);
  return {cast(n, low, DType::kInt64), cast(n, high, DType::kInt64),
          ew2<ew::Sub>(n, c(1), fraction), fraction, valid};
}

void convert_roi_align(Node& n) {
  const OnnxValue x = n.input(0), rois = n.input(1);
  const Shape xs = n.shape(0), rs = n.meta(rois).shape;
  if (xs.rank() != 4 || rs.rank() != 2 || rs[1] != 4) {
    n.refuse(str_cat("X must be [N, C, H, W] and rois [R, 4], not ", xs.to_string(), " and ",
                     rs.to_string()));
  }
  if (!is_floating_point(n.dtype(0)) || n.meta(rois).dtype != n.dtype(0)) {
    n.refuse("X and rois must be floats of one dtype");
  }
  if (n.attr_string("mode", "avg") != "avg") n.refuse("mode 'max' is not supported");
  const int64_t ratio = n.attr_int("sampling_ratio", 0);
  if (ratio < 1) n.refuse("sampling_ratio 0 (from each region's size) is not supported");
  const int64_t out_h = n.attr_int("output_height", 1), out_w = n.attr_int("output_width", 1);
  if (out_h < 1 || out_w < 1 || ratio > 1024 || out_h > 1024 || out_w > 1024) {
    n.refuse("output_height, output_width or sampling_ratio is out of range");
  }
  const std::string mode = n.attr_string("coordinate_transformation_mode", "half_pixel");
  if (mode != "half_pixel" && mode != "output_half_pixel") {
    n.refuse(str_cat("coordinate_transformation_mode '", mode, "'"));
  }
  const bool half_pixel = mode == "half_pixel";
  const int64_t regions = rs[0], batch = xs[0], channels = xs[1], height = xs[2], width = xs[3];
  check_host_count(
      n,
      checked_mul(checked_mul(regions, out_h * ratio, "the samples"), out_w * ratio, "the samples"),
      "the samples");
  const double scale = n.attr_float("spatial_scale", 1.0);
  auto coordinate = [&](int64_t k) {
    const OnnxValue v = reshape(n, sliced(n, rois, 1, k, k + 1), {regions, 1, 1});
    return ew2<ew::Sub>(n, ew2<ew::Mul>(n, v, scalar_like(n, v, scale)),
                        scalar_like(n, v, half_pixel ? 0.5 : 0.0));
  };
  auto extent = [&](const OnnxValue& begin, const OnnxValue& end, int64_t bins) {
    OnnxValue e = ew2<ew::Sub>(n, end, begin);
    if (!half_pixel) e = ew2<ew::Maximum>(n, e, scalar_like(n, e, 1));
    return ew2<ew::Div>(n, e, scalar_like(n, e, double(bins)));
  };
  const OnnxValue x0 = coordinate(0), y0 = coordinate(1), x1 = coordinate(2), y1 = coordinate(3);
  AxisSamples along_y = samples(n, y0, extent(y0, y1, out_h), out_h, ratio, height);
  AxisSamples along_x = samples(n, x0, extent(x0, x1, out_w), out_w, ratio, width);
  // y things as [R, out_h, ratio, 1, 1], x things as [R, 1, 1, out_w, ratio].
  auto as_rows = [&](const OnnxValue& v) { return reshape(n, v, {regions, out_h, ratio, 1, 1}); };
  auto as_columns = [&](const OnnxValue& v) {
    return reshape(n, v, {regions, 1, 1, out_w, ratio});
  };
  const OnnxValue valid =
      cast(n,
           n.op(kernels::where_op(), {},
                {as_rows(along_y.valid), as_columns(along_x.valid), n.scalar(0, DType::kBool)}),
           n.dtype(0));
  // Each region's image: its first pixel's row in X as [N * H * W, C].
  const OnnxValue images =
      ew2<ew::Mul>(n, reshape(n, cast(n, n.input(2), DType::kInt64), {regions, 1, 1, 1, 1}),
                   n.scalar(double(height * width), DType::kInt64));
  const OnnxValue pixels =
      reshape(n, n.op(kernels::transpose_op(), {{"perm", Ints{0, 2, 3, 1}}}, {x}),
              {checked_mul(batch, height * width, "X's pixels"), channels});
  const OnnxValue row_stride = n.scalar(double(width), DType::kInt64);
  std::optional<OnnxValue> sum;
  for (const auto& [row, w_row] :
       {std::pair(along_y.low, along_y.w_low), std::pair(along_y.high, along_y.w_high)}) {
    for (const auto& [column, w_column] :
         {std::pair(along_x.low, along_x.w_low), std::pair(along_x.high, along_x.w_high)}) {
      const OnnxValue at = ew2<ew::Add>(
          n, images,
          ew2<ew::Add>(n, ew2<ew::Mul>(n, as_rows(row), row_stride), as_columns(column)));
      const OnnxValue value = n.op(kernels::take_op(), {{"axis", int64_t{0}}}, {pixels, at});
      const OnnxValue weight =
          ew2<ew::Mul>(n, ew2<ew::Mul>(n, as_rows(w_row), as_columns(w_column)), valid);
      const OnnxValue term =
          ew2<ew::Mul>(n, value, reshape(n, weight, {regions, out_h, ratio, out_w, ratio, 1}));
      sum = sum ? ew2<ew::Add>(n, *sum, term) : term;
    }
  }
  // [R, out_h, ratio, out_w, ratio, C] -> the mean over the samples.
  const OnnxValue mean =
      n.op(kernels::mean_op(), {{"axes", Ints{2, 4}}, {"keepdims", false}}, {*sum});
  n.set_output(0, n.op(kernels::transpose_op(), {{"perm", Ints{0, 3, 1, 2}}}, {mean}));
}

}  // namespace

void add_roi_align_converter(ConverterTable& table) {
  table.insert({"RoiAlign", convert_roi_align});
}

}  // namespace tandem::serialization::onnx_convert
