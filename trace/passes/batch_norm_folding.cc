#include "trace/passes/batch_norm_folding.h"

#include <cstdint>
#include <utility>
#include <vector>

#include "kernels/elementwise_ops.h"
#include "kernels/known_ops.h"
#include "kernels/registry.h"

namespace tandem::trace {
namespace {

struct Match {
  size_t layer;  // The conv2d or linear node.
  size_t norm;   // The batch_norm node reading it.
  // The nodes replacing the pair, appended to graph.nodes, in order: the
  // half-open range [first, last).
  size_t first = 0, last = 0;
};

// Appends the nodes computing w' and b' and the new layer node, which writes
// the batch_norm's output value (so its readers need no rewiring). Node
// references are not held across add_node, which grows graph.nodes.
void rewrite(Graph& graph, Match& match) {
  const size_t first = graph.nodes.size();
  const Node layer = graph.nodes[match.layer];
  const Node norm = graph.nodes[match.norm];
  const ValueId x = layer.inputs[0], w = layer.inputs[1], b = layer.inputs[2];
  const ValueId gamma = norm.inputs[1], beta = norm.inputs[2];
  const ValueId mean = norm.inputs[3], var = norm.inputs[4];
  const DType dtype = graph.value(w).dtype;
  const std::source_location where = norm.where;
  auto add = [&](const kernels::OpDef& op, std::vector<ValueId> inputs,
                 const kernels::Attrs& attrs = {}) {
    return graph.add_node(op, attrs, std::move(inputs), where, norm.scope)[0];
  };
  namespace ew = kernels::elementwise;
  const kernels::OpDef& plus = kernels::op_def<ew::Add>();
  const kernels::OpDef& minus = kernels::op_def<ew::Sub>();
  const kernels::OpDef& times = kernels::op_def<ew::Mul>();

  const ValueId eps = add(kernels::full_op(), {},
                          {{"shape", std::vector<int64_t>{}},
                           {"dtype", dtype},
                           {"value", norm.attrs.get_float("eps")}});
  const ValueId inv_std = add(kernels::op_def<ew::Rsqrt>(), {add(plus, {var, eps})});
  const ValueId scale = add(times, {gamma, inv_std});  // [O]
  // Scale along the weight's axis 0 (output channels): [O, 1, ...].
  std::vector<int64_t> column(static_cast<size_t>(graph.value(w).shape.rank()), 1);
  column[0] = graph.value(w).shape[0];
  const ValueId w_folded =
      add(times, {w, add(kernels::reshape_op(), {scale}, {{"shape", column}})});
  const ValueId b_folded = add(plus, {add(times, {add(minus, {b, mean}), scale}), beta});
  graph.add_node(*layer.op, layer.attrs, {x, w_folded, b_folded}, layer.where, layer.scope);
  // The new layer's output has batch_norm's shape and dtype (both are x's);
  // its fresh value is left unreferenced and compacted away.
  graph.nodes.back().outputs[0] = norm.outputs[0];
  match.first = first;
  match.last = graph.nodes.size();
}

}  // namespace

// One sweep: folds every batch_norm whose input a layer makes right now.
int BatchNormFolding::run(Graph& graph) {
  const kernels::OpDef* batch_norm = &kernels::batch_norm_op();
  const kernels::OpDef* conv2d = &kernels::conv2d_op();
  const kernels::OpDef* linear = &kernels::linear_op();

  std::vector<int> readers(graph.values.size(), 0);
  for (const Node& node : graph.nodes) {
    for (ValueId id : node.inputs) ++readers[id];
  }
  for (const GraphOutput& output : graph.outputs) ++readers[output.value];

  std::vector<Match> matches;
  for (size_t n = 0; n < graph.nodes.size(); ++n) {
    const Node& norm = graph.nodes[n];
    if (norm.op != batch_norm || norm.attrs.get_bool("training")) continue;
    if (readers[norm.outputs[1]] > 0 || readers[norm.outputs[2]] > 0) continue;
    const ValueId y = norm.inputs[0];
    const Value& v = graph.value(y);
    if (v.node < 0 || readers[y] != 1) continue;
    const Node& layer = graph.nodes[static_cast<size_t>(v.node)];
    const bool channels_on_axis_1 =
        layer.op == conv2d || (layer.op == linear && v.shape.rank() == 2);
    if (!channels_on_axis_1) continue;
    if (layer.attrs.get_string("activation") != "none") continue;  // Fused earlier.
    matches.push_back({static_cast<size_t>(v.node), n});
  }
  if (matches.empty()) return 0;

  const size_t original = graph.nodes.size();
  for (Match& match : matches) rewrite(graph, match);

  // Each pair's replacement goes where its batch_norm was: every value the
  // pair read is written by then (the layer came earlier, and batch_norm's
  // own inputs are written before it), and every reader of batch_norm's
  // output comes later.
  std::vector<int> replaced_by(original, -1);  // Per batch_norm: its match.
  std::vector<bool> dropped(original, false);
  for (size_t m = 0; m < matches.size(); ++m) {
    replaced_by[matches[m].norm] = static_cast<int>(m);
    dropped[matches[m].layer] = true;
  }
  std::vector<Node> ordered;
  ordered.reserve(graph.nodes.size());
  for (size_t n = 0; n < original; ++n) {
    if (dropped[n]) continue;
    if (replaced_by[n] < 0) {
      ordered.push_back(std::move(graph.nodes[n]));
      continue;
    }
    const Match& match = matches[static_cast<size_t>(replaced_by[n])];
    for (size_t k = match.first; k < match.last; ++k) ordered.push_back(std::move(graph.nodes[k]));
  }
  graph.nodes = std::move(ordered);
  graph.compact();
  return static_cast<int>(matches.size());
}

}  // namespace tandem::trace
