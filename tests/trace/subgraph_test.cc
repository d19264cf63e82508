// Cutting a graph in two, as a differentiable hybridized block does.
#include "trace/subgraph.h"

#include <vector>

#include "gtest/gtest.h"

#include "core/error.h"
#include "tests/trace/graph_test_util.h"
#include "trace/executor.h"

namespace tandem::trace {
namespace {

using testing::op_def;

TEST(SubgraphTest, NodesNeededForStopsAtTheStopSet) {
  Graph g;
  ValueId x = g.add_input("x", InputKind::kData, Shape{4}, DType::kFloat32);
  ValueId a = g.add_node(op_def("exp"), {}, {x})[0];     // node 0
  ValueId b = g.add_node(op_def("neg"), {}, {a})[0];     // node 1
  g.add_node(op_def("tanh"), {}, {x});                   // node 2: not needed
  ValueId c = g.add_node(op_def("add"), {}, {a, b})[0];  // node 3
  EXPECT_EQ(nodes_needed_for(g, {c}), (std::vector<int>{0, 1, 3}));
  std::vector<bool> stop(g.nodes.size(), false);
  stop[0] = true;  // exp is computed elsewhere.
  EXPECT_EQ(nodes_needed_for(g, {c}, stop), (std::vector<int>{1, 3}));
}

TEST(SubgraphTest, ExtractedPiecesComputeWhatTheWholeDid) {
  Graph g;
  ValueId x = g.add_input("x", InputKind::kData, Shape{3}, DType::kFloat32);
  ValueId a = g.add_node(op_def("exp"), {}, {x})[0];
  ValueId b = g.add_node(op_def("mul"), {}, {a, x})[0];
  g.add_output(b, "b");
  // First piece: x -> a. Second: (a, x) -> b, with a as an input.
  Graph first = extract_subgraph(g, {0}, {g.inputs[0]}, {{a, "a"}});
  Graph second =
      extract_subgraph(g, {1}, {g.inputs[0], {a, "a", InputKind::kData, Tensor()}}, {{b, "b"}});
  verify(first);
  verify(second);
  Tensor in = Tensor::from_vector<float>({0, 1, 2}, {3});
  Tensor whole = Executor(g).run({in})[0];
  Tensor mid = Executor(std::move(first)).run({in})[0];
  Tensor out = Executor(std::move(second)).run({in, mid})[0];
  EXPECT_EQ(out.to_vector<float>(), whole.to_vector<float>());
}

}  // namespace
}  // namespace tandem::trace
