// The graph IR: what the tracer records, the passes rewrite, the executor
// replays and the serializer writes (docs/ARCHITECTURE.md, "Hybridize").
//
//   Graph g;
//   ValueId x = g.add_input("x", InputKind::kData, Shape{2, 3}, DType::kFloat32);
//   ValueId w = g.add_input("fc.weight", InputKind::kState, Shape{4, 3}, DType::kFloat32);
//   ValueId y = g.add_node(Registry::global().get("linear"), {}, {x, w}, where).front();
//   g.add_output(y, "y");
//   verify(g);                 // throws tandem::Error naming the node and its source line
//   std::cout << to_text(g);
//
// A graph is in SSA form: every value is written once, by one node or as a
// graph input, and nodes are kept in an order where each reads only values
// written before it (so the order is also an execution order). Nodes refer
// to registry ops (kernels/registry.h) with resolved attributes; nothing here
// switches on op names.
//
// Inputs are of three kinds. Data inputs are what the caller passes on each
// call. State inputs are tensors that live outside the graph and are read
// live on each call: parameters, buffers, optimizer state, and tensors the
// traced code captured (e.g. made with Tensor::from_vector). Constants are
// values fixed when the graph is built (constant folding's results). The graph's
// outputs include, besides the user's results, the new values of state the
// traced code rebound (optimizer updates) and parameter gradients; which is
// which is the caller's record (trace/tracer.h), not the graph's.
#pragma once

#include <cstdint>
#include <source_location>
#include <string>
#include <vector>

#include "absl/types/span.h"

#include "core/dtype.h"
#include "core/shape.h"
#include "core/tensor.h"
#include "kernels/attrs.h"
#include "kernels/registry.h"

namespace tandem::trace {

using ValueId = int32_t;

struct Value {
  Shape shape;
  DType dtype = DType::kFloat32;
  int node = -1;  // The node that writes it; -1 for graph inputs.
  int output_index = 0;
};

struct Node {
  const kernels::OpDef* op = nullptr;
  kernels::Attrs attrs;  // Resolved: every schema attribute present.
  std::vector<ValueId> inputs;
  std::vector<ValueId> outputs;
  // The user's line that called the op while tracing (line 0 if unknown, e.g.
  // a node a pass created from nothing): errors while optimizing or replaying
  // the node point there.
  std::source_location where;
  // The path of the module that made the node, relative to the traced one
  // ("features.0"; "" for the traced module's own ops): Note [Name scopes] in
  // core/error.h. Passes keep it on the nodes they rewrite.
  std::string scope;
};

// kData: passed by the caller on each call. kState: read live on each call
// from a tensor outside the graph. kConstant: fixed when the graph is built
// (constant folding makes these); `constant` holds the value.
enum class InputKind { kData, kState, kConstant };

struct GraphInput {
  ValueId value;
  std::string name;
  InputKind kind;
  Tensor constant;  // kConstant only.
};

struct GraphOutput {
  ValueId value;
  std::string name;
};

struct Graph {
  std::vector<Value> values;
  std::vector<Node> nodes;
  std::vector<GraphInput> inputs;
  std::vector<GraphOutput> outputs;

  ValueId add_input(std::string name, InputKind kind, Shape shape, DType dtype);
  ValueId add_constant(std::string name, Tensor value);
  // Appends a node reading `inputs`; its outputs get the shapes and dtypes the
  // op's inference gives (which checks the inputs, as at an eager call).
  // Returns the new output values.
  std::vector<ValueId> add_node(const kernels::OpDef& op, const kernels::Attrs& attrs,
                                std::vector<ValueId> inputs, std::source_location where = {},
                                std::string scope = {});
  // Appends a node whose outputs' shapes and dtypes are already known (the
  // tracer, which saw them at the eager call).
  std::vector<ValueId> add_node(const kernels::OpDef& op, kernels::Attrs attrs,
                                std::vector<ValueId> inputs,
                                absl::Span<const kernels::TensorMeta> outputs,
                                std::source_location where, std::string scope = {});
  void add_output(ValueId value, std::string name);

  // Recomputes every value's producer from `nodes`; passes that reorder or
  // drop nodes call it.
  void relink();
  // Drops values no node, input or output refers to and renumbers the rest.
  void compact();

  const Value& value(ValueId id) const { return values[static_cast<size_t>(id)]; }
  kernels::TensorMeta meta(ValueId id) const { return {value(id).shape, value(id).dtype}; }
};

// Throws tandem::Error unless `graph` is well formed: every reference in
// range, each value written once, nodes in dependency order (hence acyclic),
// arities and attributes as the op declares, and every node's output shapes
// and dtypes equal to what its op infers from its inputs. The message names
// the node, its op and the user's line. `stage` says who asks ("after cse").
void verify(const Graph& graph, std::string_view stage = "graph");

// One line per input, node and output:
//   %3 = linear(%0, %1, %2) {} : float32[8, 4]   # model.cc:12
std::string to_text(const Graph& graph);
// The same graph for Graphviz (`dot -Tsvg`).
std::string to_dot(const Graph& graph);

}  // namespace tandem::trace
