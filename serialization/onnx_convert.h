// What the ONNX converters share: the building blocks every converter file
// uses, and how each family of ops joins the importer's one table
// (onnx_ops.cc). Internal to serialization/; the interface a converter is
// written against is onnx_ops.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"

#include "kernels/dispatch.h"
#include "kernels/elementwise_ops.h"
#include "serialization/onnx_ops.h"

namespace tandem::serialization::onnx_convert {

namespace ew = kernels::elementwise;
using Ints = std::vector<int64_t>;
using Node = OnnxNodeBuilder;
using ConverterTable = absl::flat_hash_map<std::string_view, OnnxConverter>;

template <class E>
OnnxValue ew1(Node& n, const OnnxValue& x, const kernels::Attrs& attrs = {}) {
  return n.op(kernels::op_def<E>(), attrs, {x});
}
template <class E>
OnnxValue ew2(Node& n, const OnnxValue& a, const OnnxValue& b) {
  return n.op(kernels::op_def<E>(), {}, {a, b});
}

OnnxValue reshape(Node& n, const OnnxValue& x, Ints dims);
// x[begin:end] along `axis`.
OnnxValue sliced(Node& n, const OnnxValue& x, int64_t axis, int64_t begin, int64_t end);
// Slice `at` of x along `axis`, without that axis.
OnnxValue slice_at(Node& n, const OnnxValue& x, int64_t axis, int64_t at);
OnnxValue cast(Node& n, const OnnxValue& x, DType dtype);
// A scalar of x's dtype.
OnnxValue scalar_like(Node& n, const OnnxValue& x, double value);

int64_t normalize_axis(Node& n, int64_t axis, int64_t rank, std::string_view what = "axis");
Ints all_axes(int64_t rank);
int64_t product(absl::Span<const int64_t> dims, size_t begin, size_t end);
Ints dims_of(const Shape& s);

// What the converters compute on the host (index lists, masks, taps) is
// bounded like what import computes with ops (onnx_import.cc), so that a
// small file declaring huge sizes cannot make them allocate without bound.
inline constexpr int64_t kMaxHostElements = int64_t{1} << 26;
void check_host_count(Node& n, int64_t count, std::string_view what);

// A double from the file as an integer, refused unless it is one that fits.
int64_t integral(Node& n, double v, std::string_view what);
// Input i, or nothing when the node omits it.
std::optional<OnnxValue> optional_input(Node& n, size_t i);
// Input i as a non-negative integer known at import, at most
// kMaxHostElements.
int64_t known_count(Node& n, size_t i, std::string_view what);

// What Tandem's kernels lack runs unrolled at import, a dozen nodes or so a
// step (GRU without linear_before_reset, LSTM peepholes, Loop, Scan): the
// steps are bounded so that the graph is.
inline constexpr int64_t kMaxUnrolledSteps = 4096;
void check_unrolled_steps(Node& n, int64_t steps, std::string_view what);

// Values of one shape stacked along a new axis `axis` (in [0, rank]);
// values of different shapes are refused.
OnnxValue stacked(Node& n, const std::vector<OnnxValue>& values, int64_t axis);

// ONNX's Conv on x and weight, with the node's attributes (kernel_shape,
// strides, dilations, pads, auto_pad, group), 1-D to 3-D; no bias adds
// nothing.
OnnxValue convolution(Node& n, const OnnxValue& x, const OnnxValue& weight,
                      std::optional<OnnxValue> bias);

// The families of ops kept in files of their own add their converters to
// the table here.
void add_quantized_converters(ConverterTable& table);
void add_signal_converters(ConverterTable& table);
void add_einsum_converter(ConverterTable& table);
void add_grid_sample_converter(ConverterTable& table);
void add_index_converters(ConverterTable& table);
void add_tfidf_converter(ConverterTable& table);
void add_control_flow_converters(ConverterTable& table);
void add_sequence_converters(ConverterTable& table);
void add_det_converter(ConverterTable& table);
void add_roi_align_converter(ConverterTable& table);
// The ops of ai.onnx.preview.training, a table of their own.
void add_training_converters(ConverterTable& table);

}  // namespace tandem::serialization::onnx_convert
