// Each pass on hand-built graphs: what it removes, what it must keep, and the
// memory plan's reuse.
#include <unistd.h>

#include <filesystem>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/error.h"
#include "kernels/dispatch.h"
#include "tests/scoped_env.h"
#include "tests/trace/graph_test_util.h"
#include "trace/graph.h"
#include "trace/passes/common_subexpression.h"
#include "trace/passes/dead_code.h"
#include "trace/passes/memory_plan.h"
#include "trace/passes/pipeline.h"

namespace tandem::trace {
namespace {

using testing::op_def;

// Verifies that TANDEM_DUMP_GRAPHS writes every step of a graph whose name
// holds folder separators (a module path), inside the dump folder.
TEST(PipelineTest, DumpsGraphsWhoseNamesHoldASlash) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / str_cat("tandem-dump-", ::getpid());
  fs::remove_all(dir);
  ::tandem::testing::ScopedEnv dump("TANDEM_DUMP_GRAPHS", dir.string());
  Graph g;
  ValueId x = g.add_input("x", InputKind::kData, Shape{4}, DType::kFloat32);
  g.add_output(g.add_node(op_def("exp"), {}, {x})[0], "y");
  optimize(g, {.name = "net/../encoder"});
  EXPECT_TRUE(fs::exists(dir / "net_.._encoder.0.traced.txt"));
  EXPECT_TRUE(fs::exists(dir / "net_.._encoder.0.traced.dot"));
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir)) files += entry.is_regular_file();
  EXPECT_GT(files, 2);
  // A name longer than a file name may be (a loaded model's path) keeps its end.
  optimize(g, {.name = std::string(300, 'a') + "/model.json"});
  EXPECT_TRUE(fs::exists(dir / (std::string(181, 'a') + "_model.json.0.traced.txt")));
  fs::remove_all(dir);
  EXPECT_FALSE(fs::exists(dir.parent_path() / "encoder.0.traced.txt"));
}

TEST(DeadCodeTest, RemovesNodesThatReachNoOutputAndKeepsInputs) {
  Graph g;
  ValueId x = g.add_input("x", InputKind::kData, Shape{4}, DType::kFloat32);
  ValueId unused = g.add_input("unused", InputKind::kData, Shape{4}, DType::kFloat32);
  ValueId a = g.add_node(op_def("exp"), {}, {x})[0];
  ValueId dead = g.add_node(op_def("tanh"), {}, {a})[0];
  g.add_node(op_def("relu"), {}, {dead});  // A chain of two dead nodes.
  ValueId b = g.add_node(op_def("neg"), {}, {a})[0];
  g.add_output(b, "b");
  (void)unused;
  EXPECT_EQ(DeadCodeElimination().run(g), 2);
  verify(g);
  ASSERT_EQ(g.nodes.size(), 2u);
  EXPECT_EQ(g.nodes[0].op->name, "exp");
  EXPECT_EQ(g.nodes[1].op->name, "neg");
  EXPECT_EQ(g.inputs.size(), 2u);
}

// Verifies that a constant nothing reads is dropped (folding passes leave
// the weights they replaced so) while unread data and state inputs stay.
TEST(DeadCodeTest, DropsUnreadConstantsAndKeepsOtherInputs) {
  Graph g;
  ValueId x = g.add_input("x", InputKind::kData, Shape{4}, DType::kFloat32);
  g.add_input("unused_state", InputKind::kState, Shape{4}, DType::kFloat32);
  ValueId c = g.add_constant("c", kernels::call1("full", {}, {{"shape", std::vector<int64_t>{4}}}));
  g.add_constant("unused", kernels::call1("full", {}, {{"shape", std::vector<int64_t>{2}}}));
  g.add_output(g.add_node(op_def("add"), {}, {x, c})[0], "y");
  EXPECT_EQ(DeadCodeElimination().run(g), 1);
  verify(g);
  ASSERT_EQ(g.inputs.size(), 3u);
  EXPECT_EQ(g.inputs[0].name, "x");
  EXPECT_EQ(g.inputs[1].name, "unused_state");
  EXPECT_EQ(g.inputs[2].name, "c");
}

TEST(CommonSubexpressionTest, MergesEqualCallsAndRewiresReaders) {
  Graph g;
  ValueId x = g.add_input("x", InputKind::kData, Shape{4}, DType::kFloat32);
  ValueId a1 = g.add_node(op_def("exp"), {}, {x})[0];
  ValueId a2 = g.add_node(op_def("exp"), {}, {x})[0];
  ValueId s = g.add_node(op_def("add"), {}, {a1, a2})[0];
  g.add_output(s, "s");
  g.add_output(a2, "a2");
  EXPECT_EQ(CommonSubexpressionElimination().run(g), 1);
  verify(g);
  ASSERT_EQ(g.nodes.size(), 2u);
  EXPECT_EQ(g.nodes[1].inputs[0], g.nodes[1].inputs[1]);
  EXPECT_EQ(g.outputs[1].value, g.nodes[0].outputs[0]);
}

TEST(CommonSubexpressionTest, KeepsCallsWhoseAttributesDifferBeyondPrintedDigits) {
  Graph g;
  ValueId x = g.add_input("x", InputKind::kData, Shape{4}, DType::kFloat32);
  // Both print as 0.1 with six digits; they are different calls.
  ValueId a = g.add_node(op_def("leaky_relu"), {{"alpha", 0.1}}, {x})[0];
  ValueId b = g.add_node(op_def("leaky_relu"), {{"alpha", 0.1000001}}, {x})[0];
  g.add_output(g.add_node(op_def("add"), {}, {a, b})[0], "s");
  EXPECT_EQ(CommonSubexpressionElimination().run(g), 0);
}

// Verifies that add(a, b) and add(b, a) are one computation, and that an op
// that is not commutative keeps both orders: sub, and maximum, whose result
// for signed zeros and whose gradient on ties depend on the order.
TEST(CommonSubexpressionTest, MergesSwappedOperandsOfCommutativeOpsOnly) {
  for (const char* name : {"add", "mul", "sub", "maximum"}) {
    SCOPED_TRACE(name);
    Graph g;
    ValueId a = g.add_input("a", InputKind::kData, Shape{4}, DType::kFloat32);
    ValueId b = g.add_input("b", InputKind::kData, Shape{4}, DType::kFloat32);
    ValueId ab = g.add_node(op_def(name), {}, {a, b})[0];
    ValueId ba = g.add_node(op_def(name), {}, {b, a})[0];
    g.add_output(g.add_node(op_def("div"), {}, {ab, ba})[0], "q");
    const bool commutative = std::string(name) == "add" || std::string(name) == "mul";
    EXPECT_EQ(CommonSubexpressionElimination().run(g), commutative ? 1 : 0);
    verify(g);
  }
}

TEST(CommonSubexpressionTest, KeepsRandomOpsWithDifferentSeeds) {
  Graph g;
  ValueId r1 =
      g.add_node(op_def("rand"), {{"shape", std::vector<int64_t>{3}}, {"seed", int64_t{1}}}, {})[0];
  ValueId r2 =
      g.add_node(op_def("rand"), {{"shape", std::vector<int64_t>{3}}, {"seed", int64_t{2}}}, {})[0];
  g.add_output(g.add_node(op_def("add"), {}, {r1, r2})[0], "s");
  EXPECT_EQ(CommonSubexpressionElimination().run(g), 0);
}

// x -> n unary ops in a chain -> output: at most two intermediates are alive
// at once, so two buffers suffice.
Graph chain(int n, int64_t size) {
  Graph g;
  ValueId v = g.add_input("x", InputKind::kData, Shape{size}, DType::kFloat32);
  for (int i = 0; i < n; ++i) v = g.add_node(op_def(i % 2 ? "neg" : "exp"), {}, {v})[0];
  g.add_output(v, "y");
  return g;
}

TEST(MemoryPlanTest, ChainReusesTwoBuffers) {
  Graph g = chain(10, 1024);
  MemoryPlan plan = plan_memory(g);
  EXPECT_EQ(plan.buffer_bytes.size(), 2u);
  EXPECT_EQ(plan.unplanned_bytes, 9u * 4096u);
  EXPECT_EQ(plan.planned_bytes, 2u * 4096u);
  // Inputs and outputs are bound per call, not planned.
  EXPECT_EQ(plan.buffer_of[g.inputs[0].value], -1);
  EXPECT_EQ(plan.buffer_of[g.outputs[0].value], -1);
}

TEST(MemoryPlanTest, NeverGivesTwoLiveValuesOneBuffer) {
  // x -> a, b, c (all read by the last node): three intermediates live at once.
  Graph g;
  ValueId x = g.add_input("x", InputKind::kData, Shape{8}, DType::kFloat32);
  ValueId a = g.add_node(op_def("exp"), {}, {x})[0];
  ValueId b = g.add_node(op_def("neg"), {}, {x})[0];
  ValueId c = g.add_node(op_def("relu"), {}, {x})[0];
  ValueId ab = g.add_node(op_def("add"), {}, {a, b})[0];
  ValueId abc = g.add_node(op_def("add"), {}, {ab, c})[0];
  g.add_output(abc, "y");
  MemoryPlan plan = plan_memory(g);
  EXPECT_NE(plan.buffer_of[a], plan.buffer_of[b]);
  EXPECT_NE(plan.buffer_of[a], plan.buffer_of[c]);
  EXPECT_NE(plan.buffer_of[b], plan.buffer_of[c]);
  // ab may not take a's or b's buffer (a node never writes what it reads)
  // nor c's (still to be read): a fourth buffer.
  for (ValueId live : {a, b, c}) EXPECT_NE(plan.buffer_of[ab], plan.buffer_of[live]);
  EXPECT_EQ(plan.buffer_bytes.size(), 4u);
}

TEST(MemoryPlanTest, GrowsAFreeBufferForALargerValue) {
  Graph g;
  ValueId x = g.add_input("x", InputKind::kData, Shape{2, 8}, DType::kFloat32);
  ValueId small = g.add_node(op_def("sum"), {{"axes", std::vector<int64_t>{1}}}, {x})[0];  // [2]
  ValueId big = g.add_node(op_def("expand"), {{"shape", std::vector<int64_t>{64, 2}}}, {small})[0];
  ValueId e = g.add_node(op_def("exp"), {}, {big})[0];
  g.add_output(g.add_node(op_def("sum"), {}, {e})[0], "y");
  MemoryPlan plan = plan_memory(g);
  // small is freed after expand; exp's output takes the buffer and grows it.
  EXPECT_EQ(plan.buffer_bytes.size(), 2u);
  EXPECT_LT(plan.planned_bytes, plan.unplanned_bytes);
}

TEST(PipelineTest, OptimizesAndKeepsTheGraphValid) {
  Graph g;
  ValueId x = g.add_input("x", InputKind::kData, Shape{4}, DType::kFloat32);
  ValueId a1 = g.add_node(op_def("exp"), {}, {x})[0];
  ValueId a2 = g.add_node(op_def("exp"), {}, {x})[0];
  g.add_node(op_def("tanh"), {}, {a2});  // Dead.
  g.add_output(g.add_node(op_def("add"), {}, {a1, a2})[0], "y");
  optimize(g);
  // CSE merges the two exps, dead code drops tanh, fusion makes exp + add one node.
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].op->name, "fused_elementwise");
}

}  // namespace
}  // namespace tandem::trace
