// Activation fusion on hand-built graphs: conv2d/linear followed by an
// activation becomes one layer node with the activation attribute, computes
// the same values through trace::Executor, and every condition the rewrite
// needs is checked.
#include "trace/passes/activation_fusion.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"

#include "core/error.h"
#include "kernels/dispatch.h"
#include "kernels/elementwise_ops.h"
#include "tests/trace/graph_test_util.h"
#include "trace/executor.h"
#include "trace/graph.h"
#include "trace/passes/batch_norm_folding.h"
#include "trace/passes/common_subexpression.h"
#include "trace/passes/constant_folding.h"
#include "trace/passes/dead_code.h"
#include "trace/passes/elementwise_fusion.h"
#include "trace/passes/pipeline.h"

namespace tandem::trace {
namespace {

using Ints = std::vector<int64_t>;

using testing::op_def;

using testing::random_tensor;

struct Case {
  std::string activation = "relu";
  bool linear = false;
  bool layer_output_read_twice = false;  // The layer's output also read by neg.
  bool layer_output_is_output = false;   // The layer's output also a graph output.
  DType dtype = DType::kFloat32;
};

// The value of an activation's parameter in these graphs (not a default).
constexpr double kAlpha = 0.2;

// x -> conv2d (or linear) -> activation -> y; parameters are state inputs.
Graph layer_activation_graph(const Case& c) {
  Graph g;
  const int64_t o = 4;
  ValueId x = c.linear ? g.add_input("x", InputKind::kData, Shape{5, 3}, c.dtype)
                       : g.add_input("x", InputKind::kData, Shape{2, 3, 6, 6}, c.dtype);
  ValueId w = c.linear ? g.add_input("w", InputKind::kState, Shape{o, 3}, c.dtype)
                       : g.add_input("w", InputKind::kState, Shape{o, 3, 3, 3}, c.dtype);
  ValueId b = g.add_input("b", InputKind::kState, Shape{o}, c.dtype);
  ValueId h = c.linear ? g.add_node(op_def("linear"), {}, {x, w, b})[0]
                       : g.add_node(op_def("conv2d"), {{"padding", Ints{1, 1}}}, {x, w, b})[0];
  kernels::Attrs attrs;
  const kernels::OpDef& activation = op_def(c.activation.c_str());
  if (activation.elementwise != nullptr && activation.elementwise->num_params == 1) {
    attrs.set(std::string(activation.elementwise->params[0].name), kAlpha);
  }
  g.add_output(g.add_node(activation, attrs, {h})[0], "y");
  if (c.layer_output_read_twice) g.add_output(g.add_node(op_def("neg"), {}, {h})[0], "neg_h");
  if (c.layer_output_is_output) g.add_output(h, "h");
  return g;
}

std::vector<Tensor> call_inputs(const Graph& g) {
  std::vector<Tensor> inputs;
  int64_t seed = 1;
  for (const GraphInput& input : g.inputs) {
    if (input.kind == InputKind::kConstant) continue;  // Not passed by the caller.
    Tensor t = random_tensor(g.value(input.value).shape, seed++, -0.5);
    if (g.value(input.value).dtype != t.dtype()) {
      t = kernels::call1("cast", {t}, {{"dtype", g.value(input.value).dtype}});
    }
    inputs.push_back(t);
  }
  return inputs;
}

void expect_same_results(Graph original, Graph fused) {
  std::vector<Tensor> inputs = call_inputs(original);
  testing::expect_same_results(std::move(original), std::move(fused), inputs, 1e-5);
}

using testing::count_op;

// Verifies that each activation (every elementwise op with a oneDNN post-op)
// fuses into conv2d and into linear, the activation node disappears, and the
// results match the unfused graph.
TEST(ActivationFusionTest, FusesEachActivationAndMatches) {
  std::vector<std::string> activations;
  for (const kernels::ElementwiseInfo& info : kernels::elementwise::UnaryOps::infos()) {
    if (info.post_op.algorithm != kernels::PostOpAlgorithm::kNone) {
      activations.emplace_back(info.name);
    }
  }
  EXPECT_GE(activations.size(), 5u);
  for (bool linear : {false, true}) {
    for (const std::string& activation : activations) {
      SCOPED_TRACE(str_cat(linear ? "linear" : "conv2d", " + ", activation));
      Graph original = layer_activation_graph({.activation = activation, .linear = linear});
      Graph g = original;
      EXPECT_EQ(ActivationFusion().run(g), 1);
      verify(g);
      ASSERT_EQ(g.nodes.size(), 1u);
      const Node& layer = g.nodes[0];
      EXPECT_EQ(layer.op->name, linear ? "linear" : "conv2d");
      EXPECT_EQ(layer.attrs.get_string("activation"), activation);
      if (op_def(activation.c_str()).elementwise->num_params == 1) {
        EXPECT_EQ(layer.attrs.get_float("alpha"), kAlpha);
      }
      EXPECT_EQ(layer.outputs[0], g.outputs[0].value);
      expect_same_results(std::move(original), std::move(g));
    }
  }
}

// Verifies that the pair stays when the layer's output has a second reader,
// which needs the pre-activation values.
TEST(ActivationFusionTest, KeepsLayerWithAnotherReader) {
  Graph g = layer_activation_graph({.layer_output_read_twice = true});
  EXPECT_EQ(ActivationFusion().run(g), 0);
  EXPECT_EQ(count_op(g, "relu"), 1);
  EXPECT_EQ(g.nodes[0].attrs.get_string("activation"), "none");
}

// Verifies that the pair stays when the layer's output is a graph output.
TEST(ActivationFusionTest, KeepsLayerWhoseOutputIsAGraphOutput) {
  Graph g = layer_activation_graph({.linear = true, .layer_output_is_output = true});
  EXPECT_EQ(ActivationFusion().run(g), 0);
  EXPECT_EQ(count_op(g, "relu"), 1);
}

// Verifies that float64 layers are left alone (only float32 runs on oneDNN).
TEST(ActivationFusionTest, KeepsFloat64) {
  Graph g = layer_activation_graph({.dtype = DType::kFloat64});
  EXPECT_EQ(ActivationFusion().run(g), 0);
}

// Verifies that a layer that already has an activation takes no second one.
TEST(ActivationFusionTest, FusesOneActivationPerLayer) {
  Graph original = layer_activation_graph({.activation = "tanh"});
  Graph g = original;
  ValueId y = g.outputs[0].value;
  g.outputs[0].value = g.add_node(op_def("relu"), {}, {y})[0];
  Graph unfused = g;
  EXPECT_EQ(ActivationFusion().run(g), 1);
  EXPECT_EQ(ActivationFusion().run(g), 0);
  verify(g);
  EXPECT_EQ(count_op(g, "relu"), 1);
  expect_same_results(std::move(unfused), std::move(g));
}

// Verifies that stacked layers each take their own activation.
TEST(ActivationFusionTest, FusesStackedLayers) {
  Graph original;
  Graph& g = original;
  ValueId v = g.add_input("x", InputKind::kData, Shape{3, 6}, DType::kFloat32);
  for (int layer = 0; layer < 3; ++layer) {
    ValueId w = g.add_input(str_cat("w", layer), InputKind::kState, Shape{6, 6}, DType::kFloat32);
    ValueId b = g.add_input(str_cat("b", layer), InputKind::kState, Shape{6}, DType::kFloat32);
    v = g.add_node(op_def("linear"), {}, {v, w, b})[0];
    v = g.add_node(op_def(layer == 1 ? "gelu" : "relu"), {}, {v})[0];
  }
  g.add_output(v, "y");
  Graph fused = original;
  EXPECT_EQ(ActivationFusion().run(fused), 3);
  verify(fused);
  EXPECT_EQ(fused.nodes.size(), 3u);
  expect_same_results(std::move(original), std::move(fused));
}

// Verifies that the inference pipeline turns conv2d -> batch_norm (eval) ->
// relu with constant parameters into one conv2d with activation=relu.
TEST(ActivationFusionTest, PipelineFusesAfterBatchNormFolding) {
  Graph original;
  Graph& g = original;
  const int64_t o = 4;
  ValueId x = g.add_input("x", InputKind::kData, Shape{2, 3, 6, 6}, DType::kFloat32);
  auto constant = [&](const char* name, Shape shape, int64_t seed, double low) {
    return g.add_constant(name, random_tensor(shape, seed, low));
  };
  ValueId w = constant("w", Shape{o, 3, 3, 3}, 1, -0.5), b = constant("b", Shape{o}, 2, -0.5);
  ValueId gamma = constant("gamma", Shape{o}, 3, 0.5), beta = constant("beta", Shape{o}, 4, -0.5);
  ValueId mean = constant("mean", Shape{o}, 5, -0.5), var = constant("var", Shape{o}, 6, 0.5);
  ValueId h = g.add_node(op_def("conv2d"), {{"padding", Ints{1, 1}}}, {x, w, b})[0];
  ValueId n =
      g.add_node(op_def("batch_norm"), {{"training", false}}, {h, gamma, beta, mean, var})[0];
  g.add_output(g.add_node(op_def("relu"), {}, {n})[0], "y");
  Graph optimized = original;
  optimize(optimized, {.inference = true});
  ASSERT_EQ(optimized.nodes.size(), 1u) << to_text(optimized);
  EXPECT_EQ(optimized.nodes[0].op->name, "conv2d");
  EXPECT_EQ(optimized.nodes[0].attrs.get_string("activation"), "relu");
  expect_same_results(std::move(original), std::move(optimized));
}

// Verifies that a bad activation name fails inference naming the op and the
// value.
TEST(ActivationFusionTest, RejectsBadActivationName) {
  Graph g;
  ValueId x = g.add_input("x", InputKind::kData, Shape{2, 3}, DType::kFloat32);
  ValueId w = g.add_input("w", InputKind::kState, Shape{4, 3}, DType::kFloat32);
  ValueId b = g.add_input("b", InputKind::kState, Shape{4}, DType::kFloat32);
  try {
    g.add_node(op_def("linear"), {{"activation", std::string("swish")}}, {x, w, b});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("linear"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'swish'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tandem::trace
