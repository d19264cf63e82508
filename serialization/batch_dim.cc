#include "serialization/batch_dim.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "core/error.h"
#include "kernels/known_ops.h"

namespace tandem::serialization {

namespace {

// The message for a node whose attributes fix rows of the batch dimension.
template <class... Args>
std::string pins_the_batch(const trace::Node& node, const Args&... what) {
  return str_cat(node.op->name,
                 node.where.line() == 0 ? std::string()
                                        : str_cat(" (traced at ", format_location(node.where), ")"),
                 " ", what...,
                 ", which another batch size would not follow: the graph does not work at other "
                 "batch sizes; export with ExportOptions{.dynamic_batch = false}");
}

}  // namespace

void generalize_batch(trace::Graph& graph, int64_t batch) {
  // Which values carry the batch in dimension 0: the data inputs, and the
  // outputs of nodes that read such a value and keep that dimension's size.
  std::vector<bool> batched(graph.values.size(), false);
  for (const trace::GraphInput& input : graph.inputs) {
    const Shape& shape = graph.value(input.value).shape;
    batched[input.value] = input.kind == trace::InputKind::kData && shape.rank() > 0;
  }
  for (trace::Node& node : graph.nodes) {
    bool reads_batch = false;
    for (trace::ValueId id : node.inputs) reads_batch = reads_batch || batched[id];
    if (!reads_batch) continue;
    const kernels::OpDef* op = node.op;
    const bool on_batch_axis =
        node.attrs.has("axis") && batched[node.inputs[0]] &&
        (node.attrs.get_int("axis") == 0 ||
         node.attrs.get_int("axis") == -graph.value(node.inputs[0]).shape.rank());
    if (op == &kernels::slice_op() && on_batch_axis) {
      // Rows [0, batch) of the batch: all of it, at any batch size. Any
      // other rows would stay those rows at another batch size, where eager
      // code (slicing by its own batch's size) would take others.
      TANDEM_CHECK(node.attrs.get_int("begin") == 0 && node.attrs.get_int("end") >= batch &&
                       node.attrs.get_int("step") == 1,
                   pins_the_batch(node, "takes rows [", node.attrs.get_int("begin"), ", ",
                                  node.attrs.get_int("end"), ") of the batch dimension"));
      node.attrs.set("end", std::numeric_limits<int64_t>::max());
    }
    TANDEM_CHECK(!(op == &kernels::split_op() && on_batch_axis),
                 pins_the_batch(node, "splits the batch dimension into fixed sizes"));
    const bool reshape = op == &kernels::reshape_op();
    if ((reshape || op == &kernels::expand_op()) && batched[node.inputs[0]]) {
      std::vector<int64_t> target = node.attrs.get_ints("shape");
      const bool has_inferred = std::find(target.begin(), target.end(), -1) != target.end();
      // reshape allows one -1; expand's -1 keeps the input's dimension at the
      // same place, which is dimension 0 only when the ranks agree.
      const bool applies =
          reshape ? !has_inferred
                  : graph.value(node.inputs[0]).shape.rank() == static_cast<int>(target.size());
      if (!target.empty() && target[0] == batch && applies) {
        target[0] = -1;
        node.attrs.set("shape", std::move(target));
      }
    }
    for (trace::ValueId id : node.outputs) {
      const Shape& shape = graph.value(id).shape;
      batched[id] = shape.rank() > 0 && shape[0] == batch;
    }
  }
}

trace::Graph with_input_shapes(const trace::Graph& graph, absl::Span<const Shape> data_shapes,
                               absl::Span<const std::string> sources) {
  trace::Graph out;
  std::vector<trace::ValueId> renumber(graph.values.size(), -1);
  size_t data = 0;
  for (const trace::GraphInput& input : graph.inputs) {
    const trace::Value& v = graph.value(input.value);
    if (input.kind == trace::InputKind::kConstant) {
      renumber[input.value] = out.add_constant(input.name, input.constant);
      continue;
    }
    Shape shape = v.shape;
    if (input.kind == trace::InputKind::kData) {
      TANDEM_INTERNAL_ASSERT(data < data_shapes.size(), "too few data shapes");
      shape = data_shapes[data++];
    }
    renumber[input.value] = out.add_input(input.name, input.kind, shape, v.dtype);
  }
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    const trace::Node& node = graph.nodes[n];
    std::vector<trace::ValueId> inputs;
    for (trace::ValueId id : node.inputs) inputs.push_back(renumber[id]);
    std::vector<trace::ValueId> outputs;
    try {
      outputs = out.add_node(*node.op, node.attrs, std::move(inputs), node.where, node.scope);
    } catch (const Error& e) {
      const std::string& source = n < sources.size() ? sources[n] : std::string();
      throw Error(str_cat("node ", n, " (", node.op->name,
                          source.empty() ? std::string() : str_cat(", traced at ", source),
                          ") cannot take the new input shapes: ", e.message()));
    }
    for (size_t k = 0; k < outputs.size(); ++k) renumber[node.outputs[k]] = outputs[k];
  }
  for (const trace::GraphOutput& output : graph.outputs) {
    out.add_output(renumber[output.value], output.name);
  }
  return out;
}

}  // namespace tandem::serialization
