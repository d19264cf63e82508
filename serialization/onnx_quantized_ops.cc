// ONNX's linear quantization on Tandem's float ops: QuantizeLinear,
// DequantizeLinear, DynamicQuantizeLinear, and the integer products
// MatMulInteger, ConvInteger, QLinearMatMul and QLinearConv.
//
// Tandem has no quantized kernels, so these run as the arithmetic they
// stand for. Quantized values are uint8 (Tandem has no int8 tensors: files
// that use it are refused when they are read). The integer products run in
// float64, which holds every sum of products of 9-bit differences exactly
// for any size Tandem can hold (each product is below 2^17, so 2^36 terms
// stay below 2^53), and so give the integers ONNX specifies.
#include <optional>
#include <string_view>

#include "core/error.h"
#include "kernels/known_ops.h"
#include "serialization/onnx_convert.h"

namespace tandem::serialization::onnx_convert {
namespace {

void check_uint8(Node& n, const OnnxValue& v, std::string_view what) {
  const DType dtype = n.meta(v).dtype;
  if (dtype != DType::kUInt8) {
    n.refuse(
        str_cat(what, " must be uint8 (Tandem's only 8-bit integers), not ", dtype_name(dtype)));
  }
}

bool per_tensor(Node& n, const OnnxValue& v) { return n.meta(v).shape.numel() == 1; }

// A scale or zero point given per slice along `axis` ([C]) reshaped to
// broadcast against a tensor of rank `rank`; a per-tensor one as it is.
OnnxValue along_axis(Node& n, const OnnxValue& v, int64_t axis, int64_t rank) {
  const Shape s = n.meta(v).shape;
  if (per_tensor(n, v)) return v;
  if (s.rank() != 1) n.refuse("a per-axis scale or zero point must be 1-D");
  Ints dims(static_cast<size_t>(rank), 1);
  dims[size_t(axis)] = s[0];
  return reshape(n, v, dims);
}

// x - zero_point in float64 (exact for uint8 and int32).
OnnxValue shifted(Node& n, const OnnxValue& x, const std::optional<OnnxValue>& zero_point) {
  const OnnxValue wide = cast(n, x, DType::kFloat64);
  if (!zero_point) return wide;
  return ew2<ew::Sub>(n, wide, cast(n, *zero_point, DType::kFloat64));
}

// saturate(round(y) + zero_point) as uint8: rounding halves to even, as
// ONNX specifies.
OnnxValue saturated_uint8(Node& n, const OnnxValue& y, const std::optional<OnnxValue>& zero_point) {
  OnnxValue q = ew1<ew::Round>(n, y);
  if (zero_point) q = ew2<ew::Add>(n, q, cast(n, *zero_point, n.meta(q).dtype));
  q = ew1<ew::Clip>(n, q, {{"min", 0.0}, {"max", 255.0}});
  return cast(n, q, DType::kUInt8);
}

// A scale or zero point of (De)QuantizeLinear, per tensor or (opset 13
// on) per slice along the node's axis.
OnnxValue along_node_axis(Node& n, const OnnxValue& v, int64_t rank) {
  if (per_tensor(n, v)) return v;
  if (n.opset() < 13) n.refuse("per-axis quantization needs opset 13");
  return along_axis(n, v, normalize_axis(n, n.attr_int("axis", 1), rank), rank);
}

void convert_quantize_linear(Node& n) {
  const OnnxValue x = n.input(0);
  const int64_t rank = n.meta(x).shape.rank();
  const std::optional<OnnxValue> zero_point = optional_input(n, 2);
  if (zero_point) check_uint8(n, *zero_point, "y_zero_point");
  if (!is_floating_point(n.meta(x).dtype)) n.refuse("x must be a float tensor");
  const OnnxValue scale = along_node_axis(n, cast(n, n.input(1), n.meta(x).dtype), rank);
  n.set_output(0, saturated_uint8(n, ew2<ew::Div>(n, x, scale),
                                  zero_point ? std::optional(along_node_axis(n, *zero_point, rank))
                                             : std::nullopt));
}

void convert_dequantize_linear(Node& n) {
  const OnnxValue x = n.input(0);
  const int64_t rank = n.meta(x).shape.rank();
  const DType out = n.dtype(1);
  if (!is_floating_point(out)) n.refuse("x_scale must be a float tensor");
  const std::optional<OnnxValue> zero_point = optional_input(n, 2);
  OnnxValue y = cast(n, x, out);
  if (zero_point) y = ew2<ew::Sub>(n, y, cast(n, along_node_axis(n, *zero_point, rank), out));
  n.set_output(0, ew2<ew::Mul>(n, y, along_node_axis(n, n.input(1), rank)));
}

// The scale and zero point that map [min(x, 0), max(x, 0)] onto 0..255,
// then x quantized with them (ONNX's definition, step by step).
void convert_dynamic_quantize_linear(Node& n) {
  const OnnxValue x = n.input(0);
  if (n.meta(x).dtype != DType::kFloat32) n.refuse("x must be float32");
  const kernels::Attrs all{{"axes", all_axes(n.meta(x).shape.rank())}, {"keepdims", false}};
  const OnnxValue zero = scalar_like(n, x, 0);
  const OnnxValue low = ew2<ew::Minimum>(n, n.op(kernels::min_op(), all, {x}), zero);
  const OnnxValue high = ew2<ew::Maximum>(n, n.op(kernels::max_op(), all, {x}), zero);
  const OnnxValue scale = ew2<ew::Div>(n, ew2<ew::Sub>(n, high, low), scalar_like(n, x, 255));
  const OnnxValue zero_point =
      saturated_uint8(n, ew2<ew::Sub>(n, zero, ew2<ew::Div>(n, low, scale)), std::nullopt);
  n.set_output(0, saturated_uint8(n, ew2<ew::Div>(n, x, scale), zero_point));
  n.set_output(1, scale);
  n.set_output(2, zero_point);
}

// A's zero point per row ([M] for A of [M, K]) as [M, 1]; B's per column
// ([N]) broadcasts as it is.
std::optional<OnnxValue> row_zero_point(Node& n, size_t i) {
  std::optional<OnnxValue> zp = optional_input(n, i);
  if (zp && n.meta(*zp).shape.rank() == 1 && n.meta(*zp).shape[0] != 1) {
    zp = reshape(n, *zp, {n.meta(*zp).shape[0], 1});
  }
  return zp;
}

// (A - a_zero_point) x (B - b_zero_point), exactly, in float64.
OnnxValue integer_matmul(Node& n, size_t a, std::optional<OnnxValue> a_zero_point, size_t b,
                         std::optional<OnnxValue> b_zero_point) {
  check_uint8(n, n.input(a), "A");
  check_uint8(n, n.input(b), "B");
  return n.op(kernels::matmul_op(), {},
              {shifted(n, n.input(a), a_zero_point), shifted(n, n.input(b), b_zero_point)});
}

void convert_matmul_integer(Node& n) {
  n.set_output(0, cast(n, integer_matmul(n, 0, row_zero_point(n, 2), 1, optional_input(n, 3)),
                       DType::kInt32));
}

// (x - x_zero_point) convolved with (w - w_zero_point), exactly, in float64;
// w's zero point may be per output channel.
OnnxValue integer_conv(Node& n, size_t x, std::optional<OnnxValue> x_zero_point, size_t w,
                       std::optional<OnnxValue> w_zero_point, std::optional<OnnxValue> bias) {
  check_uint8(n, n.input(x), "x");
  check_uint8(n, n.input(w), "w");
  const int64_t rank = n.meta(n.input(w)).shape.rank();
  if (w_zero_point) w_zero_point = along_axis(n, *w_zero_point, 0, rank);
  if (bias) bias = cast(n, *bias, DType::kFloat64);
  return convolution(n, shifted(n, n.input(x), x_zero_point), shifted(n, n.input(w), w_zero_point),
                     bias);
}

void convert_conv_integer(Node& n) {
  n.set_output(
      0, cast(n, integer_conv(n, 0, optional_input(n, 2), 1, optional_input(n, 3), std::nullopt),
              DType::kInt32));
}

// An exact integer product requantized: saturate(round(product * a_scale *
// b_scale / y_scale) + y_zero_point), the scales combined in float32 as
// ONNX's reference does, the product scaled in float64.
OnnxValue requantized(Node& n, const OnnxValue& product, const OnnxValue& input_scales,
                      size_t y_scale, size_t y_zero_point) {
  check_uint8(n, n.input(y_zero_point), "y_zero_point");
  const OnnxValue scale = ew2<ew::Div>(n, input_scales, n.input(y_scale));
  return saturated_uint8(n, ew2<ew::Mul>(n, product, cast(n, scale, DType::kFloat64)),
                         n.input(y_zero_point));
}

void convert_qlinear_matmul(Node& n) {
  const OnnxValue product = integer_matmul(n, 0, row_zero_point(n, 2), 3, optional_input(n, 5));
  const Shape a_scale = n.shape(1);
  OnnxValue scale_a = n.input(1);
  if (a_scale.rank() == 1 && a_scale[0] != 1) scale_a = reshape(n, scale_a, {a_scale[0], 1});
  n.set_output(0, requantized(n, product, ew2<ew::Mul>(n, scale_a, n.input(4)), 6, 7));
}

void convert_qlinear_conv(Node& n) {
  const OnnxValue product = integer_conv(n, 0, n.input(2), 3, n.input(5), optional_input(n, 8));
  // The weight's scale per output channel: axis 1 of the output.
  const OnnxValue w_scale = along_axis(n, n.input(4), 1, n.meta(product).shape.rank());
  n.set_output(0, requantized(n, product, ew2<ew::Mul>(n, n.input(1), w_scale), 6, 7));
}

}  // namespace

void add_quantized_converters(ConverterTable& table) {
  table.insert({
      {"QuantizeLinear", convert_quantize_linear},
      {"DequantizeLinear", convert_dequantize_linear},
      {"DynamicQuantizeLinear", convert_dynamic_quantize_linear},
      {"MatMulInteger", convert_matmul_integer},
      {"ConvInteger", convert_conv_integer},
      {"QLinearMatMul", convert_qlinear_matmul},
      {"QLinearConv", convert_qlinear_conv},
  });
}

}  // namespace tandem::serialization::onnx_convert
