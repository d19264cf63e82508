// How each ONNX op becomes Tandem ops: the importer's one table
// (onnx_ops.cc), written against the small builder below.
//
//   void convert_gemm(OnnxNodeBuilder& node) {
//     OnnxValue y = node.op(kernels::matmul_op(), {{"transpose_b", node.attr_int("transB", 0) !=
//     0}},
//                           {node.input(0), node.input(1)});
//     ...
//     node.set_output(0, y);
//   }
//
// A converter reads the node's inputs, attributes and opset, builds Tandem
// ops with op() and names its results with set_output(). Values are either
// in the graph or known at import (initializers, Constant nodes, and what
// ops compute from those and from the inputs' sizes); an op whose inputs
// are all known runs at import, so shape-computing subgraphs fold to
// numbers and a converter can ask for a known value where ONNX has an input
// but Tandem an attribute (Reshape's shape, Slice's starts). What a
// converter cannot express it refuses, with refuse("why"); the importer
// lists every refusal of a file at once (onnx_import.cc).
//
// Tandem ops are held by handle (kernels/known_ops.h, kernels/
// elementwise_ops.h), never by name; the ONNX names are written here only.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"
#include "kernels/attrs.h"
#include "kernels/registry.h"
#include "trace/graph.h"

#include "onnx/onnx_pb.h"

namespace tandem::serialization {

// A value while a graph is built: a tensor, or a sequence of them.
struct OnnxValue {
  trace::ValueId id = -1;  // In the graph, or -1 when only known.
  Tensor known;            // Its value, when known at import.
  // Computed from the data inputs' sizes (Shape, Size): a number that a
  // graph with free dimensions may hold in attributes only.
  bool from_sizes = false;
  // The data inputs an in-graph value is computed from: named when an op
  // needs its value, since binding them (OnnxImportOptions::known_inputs)
  // makes it known.
  std::set<std::string> data_inputs;
  // A sequence's elements: ONNX's sequences exist at import only, as lists
  // of values whose length and positions are known there.
  std::shared_ptr<const std::vector<OnnxValue>> elements;

  static OnnxValue in_graph(trace::ValueId id) { return {id, Tensor(), false, {}, nullptr}; }
  static OnnxValue of(Tensor value, bool from_sizes = false) {
    return {-1, std::move(value), from_sizes, {}, nullptr};
  }
  static OnnxValue sequence(std::vector<OnnxValue> elements) {
    return {-1,
            Tensor(),
            false,
            {},
            std::make_shared<const std::vector<OnnxValue>>(std::move(elements))};
  }
  bool is_known() const { return known.defined(); }
  bool is_sequence() const { return elements != nullptr; }
};

// Thrown by OnnxNodeBuilder::refuse: what Tandem cannot express, as a
// reason; the importer adds the node, its op type and the opset.
struct OnnxRefusal {
  std::string reason;
};

class OnnxGraphBuilder;

class OnnxNodeBuilder {
 public:
  OnnxNodeBuilder(OnnxGraphBuilder& graph, const onnx::NodeProto& node, int opset)
      : graph_(graph), node_(node), opset_(opset) {}

  const onnx::NodeProto& proto() const { return node_; }
  int opset() const { return opset_; }

  // Inputs as the node lists them; an empty name is an omitted optional input.
  size_t num_inputs() const { return static_cast<size_t>(node_.input_size()); }
  bool has_input(size_t i) const { return i < num_inputs() && !node_.input(int(i)).empty(); }
  // Refuses a missing input.
  OnnxValue input(size_t i) const;
  // Input i's elements; refuses one that is not a sequence.
  std::vector<OnnxValue> sequence(size_t i) const;
  kernels::TensorMeta meta(const OnnxValue& value) const;
  Shape shape(size_t i) const { return meta(input(i)).shape; }
  DType dtype(size_t i) const { return meta(input(i)).dtype; }
  // The value of input i, which must be known at import (refused otherwise:
  // "<what> must be a constant").
  Tensor known(size_t i, std::string_view what) const;
  // A known integer input's elements.
  std::vector<int64_t> known_ints(size_t i, std::string_view what) const;
  double known_scalar(size_t i, std::string_view what) const;

  size_t num_outputs() const { return static_cast<size_t>(node_.output_size()); }
  bool wants_output(size_t i) const { return i < num_outputs() && !node_.output(int(i)).empty(); }

  // Attributes; refuses one of another type.
  const onnx::AttributeProto* attr(std::string_view name) const;
  int64_t attr_int(std::string_view name, int64_t fallback) const;
  double attr_float(std::string_view name, double fallback) const;
  std::string attr_string(std::string_view name, std::string fallback) const;
  std::optional<std::vector<int64_t>> attr_ints(std::string_view name) const;
  std::optional<std::vector<float>> attr_floats(std::string_view name) const;
  Tensor attr_tensor(std::string_view name) const;

  // Builds one op; runs it at once when all its inputs are known.
  std::vector<OnnxValue> ops(const kernels::OpDef& op, const kernels::Attrs& attrs,
                             std::vector<OnnxValue> inputs);
  OnnxValue op(const kernels::OpDef& op, const kernels::Attrs& attrs,
               std::vector<OnnxValue> inputs);
  // The node's graph attribute `name` (a control-flow body) converted in
  // place with `inputs` as its inputs: its outputs.
  std::vector<OnnxValue> body(std::string_view name, const std::vector<OnnxValue>& inputs);
  // A known value (`from_sizes` when it is computed from the inputs' sizes).
  OnnxValue constant(Tensor value, bool from_sizes = false) const;
  // A scalar of `dtype`.
  OnnxValue scalar(double value, DType dtype) const;

  void set_output(size_t i, OnnxValue value);

  [[noreturn]] void refuse(std::string reason) const;

 private:
  OnnxGraphBuilder& graph_;
  const onnx::NodeProto& node_;
  int opset_;
};

// The converter of an ONNX op type of the standard domain, or null.
using OnnxConverter = void (*)(OnnxNodeBuilder& node);
OnnxConverter find_onnx_converter(std::string_view op_type);
// The converter of an op type of ai.onnx.preview.training, or null.
OnnxConverter find_onnx_training_converter(std::string_view op_type);

}  // namespace tandem::serialization
