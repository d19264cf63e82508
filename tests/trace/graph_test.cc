// The graph IR: building, the verifier's refusals (each names the node and
// the line), compaction, and the dumps.
#include "trace/graph.h"

#include <source_location>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/error.h"
#include "tests/trace/graph_test_util.h"

namespace tandem::trace {
namespace {

using ::testing::HasSubstr;

using testing::op_def;

std::string verify_error(const Graph& g) {
  try {
    verify(g);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// x[2,3] -> relu -> add(., y) -> output
Graph small_graph(std::source_location where = std::source_location::current()) {
  Graph g;
  ValueId x = g.add_input("x", InputKind::kData, Shape{2, 3}, DType::kFloat32);
  ValueId y = g.add_input("y", InputKind::kState, Shape{3}, DType::kFloat32);
  ValueId r = g.add_node(op_def("relu"), {}, {x}, where)[0];
  ValueId s = g.add_node(op_def("add"), {}, {r, y}, where)[0];
  g.add_output(s, "out");
  return g;
}

TEST(GraphTest, BuildsWithInferredShapes) {
  Graph g = small_graph();
  verify(g);
  ASSERT_EQ(g.nodes.size(), 2u);
  EXPECT_EQ(g.value(g.outputs[0].value).shape, (Shape{2, 3}));
  EXPECT_EQ(g.value(g.nodes[1].outputs[0]).node, 1);
}

TEST(GraphTest, AddNodeChecksInputsLikeAnEagerCall) {
  Graph g;
  ValueId a = g.add_input("a", InputKind::kData, Shape{2, 3}, DType::kFloat32);
  ValueId b = g.add_input("b", InputKind::kData, Shape{4, 5}, DType::kFloat32);
  try {
    g.add_node(op_def("matmul"), {}, {a, b});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.op(), "matmul");
  }
}

TEST(GraphTest, VerifyRejectsReadBeforeWrite) {
  Graph g = small_graph();
  std::swap(g.nodes[0], g.nodes[1]);  // add now reads relu's output before relu runs.
  g.relink();
  std::string error = verify_error(g);
  EXPECT_THAT(error, HasSubstr("before any node writes it"));
  EXPECT_THAT(error, HasSubstr("add"));
  EXPECT_THAT(error, HasSubstr("graph_test.cc"));  // The node's source line.
}

TEST(GraphTest, VerifyRejectsWrongArity) {
  Graph g = small_graph();
  g.nodes[1].inputs.pop_back();
  EXPECT_THAT(verify_error(g), HasSubstr("has 1 inputs, the op takes 2"));
}

TEST(GraphTest, VerifyRejectsMissingValues) {
  Graph g = small_graph();
  g.nodes[1].inputs[0] = 99;
  EXPECT_THAT(verify_error(g), HasSubstr("reads value %99, which does not exist"));
  Graph h = small_graph();
  h.outputs[0].value = -3;
  EXPECT_THAT(verify_error(h), HasSubstr("output 'out'"));
}

TEST(GraphTest, VerifyRejectsDeclaredShapesThatDisagreeWithInference) {
  Graph g = small_graph();
  g.values[static_cast<size_t>(g.nodes[0].outputs[0])].shape = Shape{3, 2};
  EXPECT_THAT(verify_error(g), HasSubstr("declared float32[3, 2] but the op infers float32[2, 3]"));
}

TEST(GraphTest, VerifyRejectsDuplicateInputNamesAndDoubleWrites) {
  Graph g = small_graph();
  g.inputs[1].name = "x";
  EXPECT_THAT(verify_error(g), HasSubstr("two inputs are named 'x'"));
  Graph h = small_graph();
  h.nodes[1].outputs[0] = h.nodes[0].outputs[0];
  EXPECT_THAT(verify_error(h), HasSubstr("already written"));
}

TEST(GraphTest, VerifyRejectsUnresolvedOrBadAttributes) {
  Graph g = small_graph();
  g.nodes[0].attrs.set("bogus", int64_t{1});
  EXPECT_THAT(verify_error(g), HasSubstr("relu"));
}

TEST(GraphTest, CompactDropsUnusedValuesAndRenumbers) {
  Graph g = small_graph();
  g.values.push_back({Shape{7}, DType::kFloat32, -1, 0});  // Referenced by nothing.
  g.compact();
  verify(g);
  EXPECT_EQ(g.values.size(), 4u);
}

TEST(GraphTest, TextAndDotDumpsNameEverything) {
  Graph g = small_graph();
  std::string text = to_text(g);
  EXPECT_THAT(text, HasSubstr("input %0 \"x\" data : float32[2, 3]"));
  EXPECT_THAT(text, HasSubstr("%3 = add(%2, %1) {} : float32[2, 3]"));
  EXPECT_THAT(text, HasSubstr("graph_test.cc:"));
  EXPECT_THAT(text, HasSubstr("output \"out\" = %3"));
  std::string dot = to_dot(g);
  EXPECT_THAT(dot, HasSubstr("digraph"));
  EXPECT_THAT(dot, HasSubstr("n0 -> n1"));
}

}  // namespace
}  // namespace tandem::trace
