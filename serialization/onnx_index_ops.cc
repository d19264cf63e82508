// ONNX ops that move elements to positions computed from index data:
// ReverseSequence (a gather along time) and MaxUnpool (a scatter into
// zeros), both on Tandem's gather and scatter ops with index tensors built
// in the graph, so they follow the index data at every run; and Compress,
// whose condition decides the output's size and so must be known.
#include <vector>

#include "core/error.h"
#include "kernels/known_ops.h"
#include "serialization/onnx_convert.h"

namespace tandem::serialization::onnx_convert {
namespace {

// Each batch entry's first sequence_lens[b] steps reversed, the rest kept:
// out[t, b] = x[t < len[b] ? len[b] - 1 - t : t, b].
void convert_reverse_sequence(Node& n) {
  const OnnxValue x = n.input(0);
  const Shape xs = n.shape(0);
  const int64_t rank = xs.rank();
  if (rank < 2) n.refuse("the input needs a time and a batch axis");
  const int64_t time = normalize_axis(n, n.attr_int("time_axis", 0), rank, "time_axis");
  const int64_t batch = normalize_axis(n, n.attr_int("batch_axis", 1), rank, "batch_axis");
  if (time == batch || time > 1 || batch > 1) n.refuse("time_axis and batch_axis must be 0 and 1");
  const OnnxValue lengths = cast(n, n.input(1), DType::kInt64);
  if (n.meta(lengths).shape != Shape{xs[int(batch)]}) {
    n.refuse(str_cat("sequence_lens must be [", xs[int(batch)], "]"));
  }
  // Both as [T, B] (time first) or [B, T], 1 on the other axes.
  Ints along_time(size_t(rank), 1), along_batch(size_t(rank), 1);
  along_time[size_t(time)] = xs[int(time)];
  along_batch[size_t(batch)] = xs[int(batch)];
  check_host_count(n, xs[int(time)], "the time steps");
  Ints steps;
  for (int64_t t = 0; t < xs[int(time)]; ++t) steps.push_back(t);
  const OnnxValue t = n.constant(Tensor::from_vector<int64_t>(steps, Shape(along_time)));
  const OnnxValue len = reshape(n, lengths, along_batch);
  const OnnxValue reversed = ew2<ew::Sub>(n, ew2<ew::Sub>(n, len, n.scalar(1, DType::kInt64)), t);
  const OnnxValue index =
      n.op(kernels::where_op(), {}, {n.op(kernels::lt_op(), {}, {t, len}), reversed, t});
  n.set_output(0, n.op(kernels::gather_op(), {{"axis", time}},
                       {x, n.op(kernels::expand_op(), {{"shape", dims_of(xs)}}, {index})}));
}

// The inverse of MaxPool with Indices: each value of X at its index in the
// flattened output (ONNX's indices count the whole tensor), zeros elsewhere.
// Indices outside the output are an Error when the scatter runs.
void convert_max_unpool(Node& n) {
  const OnnxValue x = n.input(0), indices = n.input(1);
  const Shape xs = n.shape(0);
  const int64_t spatial = xs.rank() - 2;
  if (spatial < 1) n.refuse("X must be [N, C, spatial...]");
  if (n.meta(indices).shape != xs) n.refuse("I must have X's shape");
  const Ints kernel = n.attr_ints("kernel_shape").value_or(Ints{});
  const Ints strides = n.attr_ints("strides").value_or(Ints(size_t(spatial), 1));
  const Ints pads = n.attr_ints("pads").value_or(Ints(size_t(2 * spatial), 0));
  if (int64_t(kernel.size()) != spatial || int64_t(strides.size()) != spatial ||
      int64_t(pads.size()) != 2 * spatial) {
    n.refuse("kernel_shape, strides or pads do not match X's rank");
  }
  for (const Ints* attr : {&kernel, &strides, &pads}) {
    for (int64_t v : *attr) {
      if (v < (attr == &pads ? 0 : 1) || v > (int64_t{1} << 20)) {
        n.refuse(str_cat("kernel_shape, strides or pads hold ", v, ", outside [0 or 1, 2^20]"));
      }
    }
  }
  // The unpooled shape MaxPool's indices count in; output_shape may only
  // be larger (the values keep their coordinates, zeros fill the rest).
  Ints unpooled = {xs[0], xs[1]};
  for (int64_t i = 0; i < spatial; ++i) {
    const size_t s = size_t(i);
    const int64_t spread = checked_mul(xs[int(i) + 2] - 1, strides[s], "the unpooled size");
    unpooled.push_back(spread + kernel[s] - pads[s] - pads[s + size_t(spatial)]);
    if (unpooled.back() < 0) n.refuse("the output would have a negative size");
  }
  const Ints out = n.has_input(2) ? n.known_ints(2, "output_shape") : unpooled;
  if (out.size() != unpooled.size()) n.refuse("output_shape has the wrong rank");
  for (size_t a = 0; a < out.size(); ++a) {
    if (out[a] < unpooled[a] || (a < 2 && out[a] != unpooled[a])) {
      n.refuse(
          str_cat("output_shape must keep N and C and be at least ", Shape(unpooled).to_string()));
    }
  }
  OnnxValue at = cast(n, indices, DType::kInt64);
  if (out != unpooled) {
    // Each index's coordinates in the unpooled shape, flattened in out's.
    OnnxValue rest = at, moved;
    int64_t stride = 1;
    for (size_t a = out.size(); a-- > 0;) {
      const OnnxValue d = n.scalar(double(unpooled[a]), DType::kInt64);
      const OnnxValue quotient = ew2<ew::Div>(n, rest, d);
      const OnnxValue coordinate = ew2<ew::Sub>(n, rest, ew2<ew::Mul>(n, quotient, d));
      const OnnxValue term = ew2<ew::Mul>(n, coordinate, n.scalar(double(stride), DType::kInt64));
      moved = a + 1 == out.size() ? term : ew2<ew::Add>(n, moved, term);
      rest = quotient;
      stride = checked_mul(stride, out[a], "the output's size");
    }
    at = moved;
  }
  const int64_t total = product(out, 0, out.size());
  const OnnxValue zeros =
      n.op(kernels::full_op(), {{"shape", Ints{total}}, {"dtype", n.dtype(0)}, {"value", 0.0}}, {});
  const OnnxValue y = n.op(kernels::scatter_op(), {{"axis", int64_t{0}}},
                           {zeros, reshape(n, at, {xs.numel()}), reshape(n, x, {xs.numel()})});
  n.set_output(0, reshape(n, y, out));
}

// Compress: the slices along `axis` (of the flattened input without one)
// whose condition is true. The condition must be known at import: its true
// positions fix the output's size, which Tandem's graphs hold static; the
// input itself may change from run to run.
void convert_compress(Node& n) {
  OnnxValue x = n.input(0);
  int64_t axis = 0;
  if (n.attr("axis") != nullptr) {
    axis = normalize_axis(n, n.attr_int("axis", 0), n.shape(0).rank());
  } else {
    x = reshape(n, x, {n.shape(0).numel()});
  }
  const Tensor condition = n.known(1, "condition");
  if (condition.shape().rank() != 1) n.refuse("condition must be 1-D");
  const int64_t size = n.meta(x).shape[int(axis)];
  if (condition.numel() > size) {
    n.refuse(str_cat("condition has ", condition.numel(), " values for an axis of ", size));
  }
  const std::vector<int64_t> flags =
      kernels::call1(kernels::cast_op(), {condition}, {{"dtype", DType::kInt64}}, {})
          .to_vector<int64_t>();
  Ints kept;
  for (size_t i = 0; i < flags.size(); ++i) {
    if (flags[i] != 0) kept.push_back(int64_t(i));
  }
  n.set_output(0, n.op(kernels::take_op(), {{"axis", axis}},
                       {x, n.constant(Tensor::from_vector<int64_t>(
                               kept, Shape{static_cast<int64_t>(kept.size())}))}));
}

}  // namespace

void add_index_converters(ConverterTable& table) {
  table.insert({
      {"Compress", convert_compress},
      {"ReverseSequence", convert_reverse_sequence},
      {"MaxUnpool", convert_max_unpool},
  });
}

}  // namespace tandem::serialization::onnx_convert
