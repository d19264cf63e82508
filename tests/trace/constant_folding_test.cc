// Constant folding on hand-built graphs: what folds, what must stay a node,
// and that folding changes no result and no input position.
#include "trace/passes/constant_folding.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

#include "kernels/dispatch.h"
#include "tests/trace/graph_test_util.h"
#include "trace/executor.h"
#include "trace/graph.h"

namespace tandem::trace {
namespace {

using Ints = std::vector<int64_t>;

using testing::op_def;

// x * exp(full(2) + arange(4)), the constant part a chain of four nodes.
Graph creation_chain() {
  Graph g;
  ValueId x = g.add_input("x", InputKind::kData, Shape{4}, DType::kFloat32);
  ValueId two = g.add_node(op_def("full"), {{"shape", Ints{4}}, {"value", 2.0}}, {})[0];
  ValueId steps = g.add_node(op_def("arange"), {{"stop", 4.0}}, {})[0];
  ValueId sum = g.add_node(op_def("add"), {}, {two, steps})[0];
  ValueId e = g.add_node(op_def("exp"), {}, {sum})[0];
  g.add_output(g.add_node(op_def("mul"), {}, {x, e})[0], "y");
  return g;
}

// Verifies that a chain of creation and elementwise nodes becomes one
// constant, and that the folded graph computes what the original did.
TEST(ConstantFoldingTest, FoldsCreationAndElementwiseChain) {
  Graph original = creation_chain();
  Graph g = original;
  EXPECT_EQ(ConstantFolding().run(g), 4);
  verify(g);
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].op->name, "mul");
  // Only exp's value is read by a kept node, so only it is materialized.
  ASSERT_EQ(g.inputs.size(), 2u);
  EXPECT_EQ(g.inputs[1].kind, InputKind::kConstant);
  EXPECT_EQ(g.nodes[0].inputs[1], g.inputs[1].value);

  Tensor x = Tensor::from_vector<float>({1, -2, 0.5f, 3}, {4});
  std::vector<float> want = Executor(std::move(original)).run({x})[0].to_vector<float>();
  std::vector<float> got = Executor(std::move(g)).run({x})[0].to_vector<float>();
  EXPECT_EQ(got, want);
}

// Verifies that random ops (seeded per call by the executor) and what reads
// them stay nodes.
TEST(ConstantFoldingTest, KeepsRandomOps) {
  Graph g;
  ValueId r = g.add_node(op_def("rand"), {{"shape", Ints{3}}, {"seed", int64_t{7}}}, {})[0];
  ValueId e = g.add_node(op_def("exp"), {}, {r})[0];
  g.add_output(g.add_node(op_def("neg"), {}, {e})[0], "y");
  EXPECT_EQ(ConstantFolding().run(g), 0);
  EXPECT_EQ(g.nodes.size(), 3u);
  EXPECT_TRUE(g.inputs.empty());
}

// Verifies that a node whose output exceeds kMaxFoldedElements (an expand to
// a big shape) stays a node, while its small constant input folds.
TEST(ConstantFoldingTest, KeepsLargeOutputsAsNodes) {
  Graph g;
  ValueId row = g.add_node(op_def("full"), {{"shape", Ints{1024}}, {"value", 1.0}}, {})[0];
  ValueId big = g.add_node(op_def("expand"), {{"shape", Ints{2048, 1024}}}, {row})[0];
  ValueId total = g.add_node(op_def("sum"), {}, {big})[0];
  g.add_output(g.add_node(op_def("neg"), {}, {total})[0], "y");
  ASSERT_GT(g.value(big).shape.numel(), kMaxFoldedElements);
  EXPECT_EQ(ConstantFolding().run(g), 1);
  verify(g);
  ASSERT_EQ(g.nodes.size(), 3u);
  EXPECT_EQ(g.nodes[0].op->name, "expand");
  ASSERT_EQ(g.inputs.size(), 1u);
  EXPECT_EQ(g.inputs[0].constant.numel(), 1024);
}

// Verifies that existing inputs keep their positions, names and kinds (new
// constants are appended), that nodes reading state stay, and that the
// folded graph runs with the same call inputs.
TEST(ConstantFoldingTest, KeepsInputPositionsAndState) {
  Graph g;
  ValueId x = g.add_input("x", InputKind::kData, Shape{3}, DType::kFloat32);
  ValueId w = g.add_input("w", InputKind::kState, Shape{3}, DType::kFloat32);
  ValueId unused = g.add_input("unused", InputKind::kData, Shape{1}, DType::kFloat32);
  (void)unused;
  ValueId half = g.add_node(op_def("full"), {{"shape", Ints{3}}, {"value", 0.5}}, {})[0];
  ValueId scaled = g.add_node(op_def("mul"), {}, {w, half})[0];  // Reads state: stays.
  ValueId y = g.add_node(op_def("add"), {}, {x, scaled})[0];
  g.add_output(y, "y");
  Graph original = g;

  EXPECT_EQ(ConstantFolding().run(g), 1);
  verify(g);
  ASSERT_EQ(g.inputs.size(), 4u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(g.inputs[i].name, original.inputs[i].name);
    EXPECT_EQ(g.inputs[i].kind, original.inputs[i].kind);
  }
  EXPECT_EQ(g.inputs[3].kind, InputKind::kConstant);
  EXPECT_EQ(g.nodes.size(), 2u);

  std::vector<Tensor> call = {Tensor::from_vector<float>({1, 2, 3}, {3}),
                              Tensor::from_vector<float>({4, 6, 8}, {3}),
                              Tensor::from_vector<float>({0}, {1})};
  EXPECT_EQ(Executor(std::move(g)).run(call)[0].to_vector<float>(), (std::vector<float>{3, 5, 7}));
}

// Verifies that a node writing a graph output stays (the executor returns
// fresh output tensors each call), while its constant inputs fold.
TEST(ConstantFoldingTest, KeepsNodesWritingGraphOutputs) {
  Graph g;
  ValueId a = g.add_node(op_def("full"), {{"shape", Ints{2}}, {"value", 3.0}}, {})[0];
  ValueId b = g.add_node(op_def("neg"), {}, {a})[0];
  g.add_output(b, "b");
  EXPECT_EQ(ConstantFolding().run(g), 1);
  verify(g);
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].op->name, "neg");
  EXPECT_EQ(Executor(std::move(g)).run({})[0].to_vector<float>(), (std::vector<float>{-3, -3}));
}

}  // namespace
}  // namespace tandem::trace
