// Batch-norm folding on hand-built inference graphs: a conv2d (or linear)
// followed by an evaluation-mode batch_norm computes the same values after
// folding, and every condition the rewrite needs is checked.
#include "trace/passes/batch_norm_folding.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "gtest/gtest.h"

#include "core/error.h"
#include "kernels/dispatch.h"
#include "tests/trace/graph_test_util.h"
#include "trace/executor.h"
#include "trace/graph.h"
#include "trace/passes/pipeline.h"

namespace tandem::trace {
namespace {

using Ints = std::vector<int64_t>;

using testing::op_def;

using testing::random_tensor;

struct Case {
  bool training = false;
  bool layer_output_read_twice = false;  // The conv's output also a graph output.
  bool stats_read = false;               // batch_norm's mean read by a node.
  bool linear = false;
  // The layer carries a fused activation (as after activation_fusion): what
  // an exported graph holds when batch_norm follows conv -> relu.
  const char* activation = "none";
};

// x -> conv2d (or linear) -> batch_norm -> relu -> y; every parameter and
// running statistic is a state input, as in a traced inference graph.
Graph layer_norm_graph(const Case& c) {
  Graph g;
  const int64_t o = 4;
  ValueId x = c.linear ? g.add_input("x", InputKind::kData, Shape{5, 3}, DType::kFloat32)
                       : g.add_input("x", InputKind::kData, Shape{2, 3, 6, 6}, DType::kFloat32);
  ValueId w = c.linear ? g.add_input("w", InputKind::kState, Shape{o, 3}, DType::kFloat32)
                       : g.add_input("w", InputKind::kState, Shape{o, 3, 3, 3}, DType::kFloat32);
  ValueId b = g.add_input("b", InputKind::kState, Shape{o}, DType::kFloat32);
  ValueId gamma = g.add_input("gamma", InputKind::kState, Shape{o}, DType::kFloat32);
  ValueId beta = g.add_input("beta", InputKind::kState, Shape{o}, DType::kFloat32);
  ValueId mean = g.add_input("mean", InputKind::kState, Shape{o}, DType::kFloat32);
  ValueId var = g.add_input("var", InputKind::kState, Shape{o}, DType::kFloat32);
  ValueId h =
      c.linear ? g.add_node(op_def("linear"), {{"activation", c.activation}}, {x, w, b})[0]
               : g.add_node(op_def("conv2d"),
                            {{"padding", Ints{1, 1}}, {"activation", c.activation}}, {x, w, b})[0];
  std::vector<ValueId> bn = g.add_node(
      op_def("batch_norm"), {{"training", c.training}, {"eps", 1e-3}}, {h, gamma, beta, mean, var});
  g.add_output(g.add_node(op_def("relu"), {}, {bn[0]})[0], "y");
  if (c.layer_output_read_twice) g.add_output(h, "h");
  if (c.stats_read) g.add_output(g.add_node(op_def("neg"), {}, {bn[1]})[0], "mean");
  return g;
}

std::vector<Tensor> call_inputs(const Graph& g) {
  std::vector<Tensor> inputs;
  int64_t seed = 1;
  for (const GraphInput& input : g.inputs) {
    const Shape& shape = g.value(input.value).shape;
    // Variances positive; everything else centred on zero.
    inputs.push_back(random_tensor(shape, seed++, input.name.starts_with("var") ? 0.5 : -0.5));
  }
  return inputs;
}

void expect_same_results(Graph original, Graph folded) {
  std::vector<Tensor> inputs = call_inputs(original);
  testing::expect_same_results(std::move(original), std::move(folded), inputs, 1e-4);
}

bool has_op(const Graph& g, const char* name) {
  return std::any_of(g.nodes.begin(), g.nodes.end(),
                     [&](const Node& n) { return n.op->name == name; });
}

// Verifies that conv2d + eval batch_norm becomes one conv2d with folded
// weight and bias nodes, computing the same outputs.
TEST(BatchNormFoldingTest, FoldsIntoConv2dAndMatches) {
  Graph original = layer_norm_graph({});
  Graph g = original;
  EXPECT_EQ(BatchNormFolding().run(g), 1);
  verify(g);
  EXPECT_FALSE(has_op(g, "batch_norm"));
  EXPECT_EQ(g.inputs.size(), original.inputs.size());
  expect_same_results(std::move(original), std::move(g));
}

// Verifies the same for linear with a [N, features] output.
TEST(BatchNormFoldingTest, FoldsIntoLinearAndMatches) {
  Graph original = layer_norm_graph({.linear = true});
  Graph g = original;
  EXPECT_EQ(BatchNormFolding().run(g), 1);
  verify(g);
  EXPECT_FALSE(has_op(g, "batch_norm"));
  expect_same_results(std::move(original), std::move(g));
}

// Verifies that two stacked pairs both fold, each replacement placed where
// its batch_norm was (the second conv reads the first pair's result).
TEST(BatchNormFoldingTest, FoldsStackedPairs) {
  Graph original;
  Graph& g = original;
  ValueId v = g.add_input("x", InputKind::kData, Shape{2, 3, 5, 5}, DType::kFloat32);
  for (int layer = 0; layer < 2; ++layer) {
    const int64_t in = layer == 0 ? 3 : 4;
    auto state = [&](const char* name, Shape shape) {
      return g.add_input(str_cat(name, layer), InputKind::kState, std::move(shape),
                         DType::kFloat32);
    };
    ValueId w = state("w", Shape{4, in, 3, 3}), b = state("b", Shape{4});
    ValueId gamma = state("gamma", Shape{4}), beta = state("beta", Shape{4});
    ValueId mean = state("mean", Shape{4}), var = state("var", Shape{4});
    ValueId h = g.add_node(op_def("conv2d"), {{"padding", Ints{1, 1}}}, {v, w, b})[0];
    v = g.add_node(op_def("batch_norm"), {}, {h, gamma, beta, mean, var})[0];
  }
  g.add_output(v, "y");
  Graph folded = original;
  EXPECT_EQ(BatchNormFolding().run(folded), 2);
  verify(folded);
  EXPECT_FALSE(has_op(folded, "batch_norm"));
  expect_same_results(std::move(original), std::move(folded));
}

// Verifies that batch norms in a row after one layer fold one per run, and
// all of them under FixedPoint (as the pipeline runs the pass), so that a
// second run (a loader optimizing an exported graph again) finds nothing
// left to fold.
TEST(BatchNormFoldingTest, FoldsAChainOfBatchNormsToAFixedPoint) {
  Graph original;
  Graph& g = original;
  ValueId v = g.add_input("x", InputKind::kData, Shape{3, 6}, DType::kFloat32);
  ValueId w = g.add_input("w", InputKind::kState, Shape{4, 6}, DType::kFloat32);
  ValueId b = g.add_input("b", InputKind::kState, Shape{4}, DType::kFloat32);
  v = g.add_node(op_def("linear"), {}, {v, w, b})[0];
  for (int k = 0; k < 3; ++k) {
    auto state = [&](const char* name) {
      return g.add_input(str_cat(name, k), InputKind::kState, Shape{4}, DType::kFloat32);
    };
    ValueId gamma = state("gamma"), beta = state("beta"), mean = state("mean"), var = state("var");
    v = g.add_node(op_def("batch_norm"), {}, {v, gamma, beta, mean, var})[0];
  }
  g.add_output(v, "y");
  Graph once = original;
  EXPECT_EQ(BatchNormFolding().run(once), 1);
  EXPECT_TRUE(has_op(once, "batch_norm"));
  Graph folded = original;
  FixedPoint fold(std::make_unique<BatchNormFolding>());
  EXPECT_EQ(fold.run(folded), 3);
  EXPECT_FALSE(has_op(folded, "batch_norm"));
  EXPECT_EQ(fold.run(folded), 0);
  expect_same_results(std::move(original), std::move(folded));
}

// Verifies that the pipeline folds batch norm for inference and leaves the
// eps as a folded constant, with the same results.
TEST(BatchNormFoldingTest, PipelineFoldsForInference) {
  Graph original = layer_norm_graph({});
  Graph g = original;
  optimize(g, {.inference = true});
  EXPECT_FALSE(has_op(g, "batch_norm"));
  EXPECT_FALSE(has_op(g, "full"));
  EXPECT_EQ(g.inputs.size(), original.inputs.size() + 1);
  EXPECT_EQ(g.inputs.back().kind, InputKind::kConstant);
  expect_same_results(std::move(original), std::move(g));
}

// Verifies that nothing folds unless the graph is for inference.
TEST(BatchNormFoldingTest, KeepsBatchNormWithoutInference) {
  Graph g = layer_norm_graph({});
  optimize(g);
  EXPECT_TRUE(has_op(g, "batch_norm"));
}

// Verifies that a training-mode batch_norm (batch statistics) stays.
TEST(BatchNormFoldingTest, KeepsTrainingModeBatchNorm) {
  Graph g = layer_norm_graph({.training = true});
  EXPECT_EQ(BatchNormFolding().run(g), 0);
  EXPECT_TRUE(has_op(g, "batch_norm"));
}

// Verifies that the pair stays when the conv's output has another reader,
// which needs the unnormalized values.
TEST(BatchNormFoldingTest, KeepsConvWithAnotherReader) {
  Graph g = layer_norm_graph({.layer_output_read_twice = true});
  EXPECT_EQ(BatchNormFolding().run(g), 0);
  EXPECT_TRUE(has_op(g, "batch_norm"));
}

// Verifies that the pair stays when batch_norm's mean output is read.
TEST(BatchNormFoldingTest, KeepsBatchNormWhoseStatisticsAreRead) {
  Graph g = layer_norm_graph({.stats_read = true});
  EXPECT_EQ(BatchNormFolding().run(g), 0);
  EXPECT_TRUE(has_op(g, "batch_norm"));
}

// Verifies that a layer with a fused activation keeps its batch_norm:
// bn(relu(conv(x))) is not an affine function of conv(x). Folding it anyway
// was how a loaded model (optimized at export and again at load) gave wrong
// answers.
TEST(BatchNormFoldingTest, KeepsLayerWithFusedActivation) {
  for (const char* activation : {"relu", "sigmoid", "leaky_relu"}) {
    for (bool linear : {false, true}) {
      SCOPED_TRACE(str_cat(activation, linear ? " linear" : " conv2d"));
      Graph original = layer_norm_graph({.linear = linear, .activation = activation});
      Graph g = original;
      EXPECT_EQ(BatchNormFolding().run(g), 0);
      EXPECT_TRUE(has_op(g, "batch_norm"));
      // And the whole pipeline, run on it, changes no value.
      optimize(g, {.inference = true});
      expect_same_results(std::move(original), std::move(g));
    }
  }
}

}  // namespace
}  // namespace tandem::trace
