// Elementwise fusion on hand-built graphs: what it fuses, what stops it, and
// that the fused graph computes what the unfused one did, through the
// executor.
#include "trace/passes/elementwise_fusion.h"

#include <cmath>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/error.h"
#include "kernels/dispatch.h"
#include "tests/trace/graph_test_util.h"
#include "trace/executor.h"
#include "trace/graph.h"
#include "trace/passes/pipeline.h"

namespace tandem::trace {
namespace {

using ::testing::HasSubstr;

using testing::op_def;

ValueId node(Graph& g, const char* name, std::vector<ValueId> inputs, kernels::Attrs attrs = {},
             std::source_location where = std::source_location::current()) {
  return g.add_node(op_def(name), attrs, std::move(inputs), where)[0];
}

// relu(exp(x) * s + y), s a scalar: four fusable nodes in a chain.
Graph chain_graph(int64_t n, DType dtype = DType::kFloat32) {
  Graph g;
  ValueId x = g.add_input("x", InputKind::kData, Shape{n}, dtype);
  ValueId s = g.add_input("s", InputKind::kData, Shape{}, dtype);
  ValueId y = g.add_input("y", InputKind::kData, Shape{n}, dtype);
  ValueId v = node(g, "exp", {x});
  v = node(g, "mul", {v, s});
  v = node(g, "add", {v, y});
  v = node(g, "relu", {v});
  g.add_output(v, "out");
  return g;
}

int count(const Graph& g, const char* name) {
  int n = 0;
  for (const Node& node : g.nodes) n += node.op->name == name;
  return n;
}

// Verifies that a chain becomes one node, at the last node's line.
TEST(ElementwiseFusionTest, FusesAChainIntoOneNode) {
  Graph g = chain_graph(8);
  const int line = static_cast<int>(g.nodes.back().where.line());
  EXPECT_EQ(ElementwiseFusion().run(g), 3);
  verify(g);
  ASSERT_EQ(g.nodes.size(), 1u);
  const Node& fused = g.nodes[0];
  EXPECT_EQ(fused.op->name, "fused_elementwise");
  EXPECT_EQ(fused.attrs.get_string("program"),
            "r0=exp(i0);r1=mul(r0,i1);r2=add(r1,i2);r3=relu(r2)");
  EXPECT_EQ(fused.inputs, (std::vector<ValueId>{0, 1, 2}));
  EXPECT_EQ(static_cast<int>(fused.where.line()), line);
  EXPECT_EQ(g.outputs[0].value, fused.outputs[0]);
}

// Verifies that a diamond (one value read twice inside the group) fuses,
// with float parameters written exactly.
TEST(ElementwiseFusionTest, FusesADiamond) {
  Graph g;
  ValueId x = g.add_input("x", InputKind::kData, Shape{2, 3}, DType::kFloat64);
  ValueId a = node(g, "exp", {x});
  ValueId b = node(g, "leaky_relu", {a}, {{"alpha", 0.1}});
  ValueId c = node(g, "clip", {a}, {{"min", -1.0}, {"max", 2.5}});
  g.add_output(node(g, "mul", {b, c}), "y");
  EXPECT_EQ(ElementwiseFusion().run(g), 3);
  verify(g);
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].attrs.get_string("program"),
            "r0=exp(i0);r1=leaky_relu(r0,alpha=0.1);r2=clip(r0,max=2.5,min=-1);r3=mul(r1,r2)");
}

// Verifies that a value read outside the group (by another op or as a graph
// output) is not fused away: it stays a node and splits the chain.
TEST(ElementwiseFusionTest, AValueReadOutsideStopsFusion) {
  Graph g;
  ValueId x = g.add_input("x", InputKind::kData, Shape{4}, DType::kFloat32);
  ValueId a = node(g, "exp", {x});
  ValueId b = node(g, "neg", {a});
  ValueId c = node(g, "tanh", {b});
  ValueId d = node(g, "sqrt", {c});
  ValueId e = node(g, "abs", {d});
  g.add_output(e, "e");
  g.add_output(b, "b");  // b leaves: {exp, neg} fuse.
  g.add_output(node(g, "sum", {d}, {{"axes", std::vector<int64_t>{0}}}), "s");  // d leaves too.
  EXPECT_EQ(ElementwiseFusion().run(g), 2);
  verify(g);
  EXPECT_EQ(count(g, "fused_elementwise"), 2);  // {exp, neg}, {tanh, sqrt}; abs alone.
  EXPECT_EQ(count(g, "abs"), 1);
  EXPECT_EQ(count(g, "sum"), 1);
}

// Verifies that broadcasting other than by scalars, integer dtypes and a
// lone node are left alone.
TEST(ElementwiseFusionTest, LeavesBroadcastsIntegersAndSingletons) {
  Graph g;
  ValueId x = g.add_input("x", InputKind::kData, Shape{2, 3}, DType::kFloat32);
  ValueId row = g.add_input("row", InputKind::kData, Shape{3}, DType::kFloat32);
  ValueId i = g.add_input("i", InputKind::kData, Shape{3}, DType::kInt32);
  ValueId a = node(g, "add", {node(g, "exp", {x}), row});  // exp alone, add broadcasts.
  g.add_output(a, "a");
  g.add_output(node(g, "relu", {node(g, "neg", {i})}), "i");
  EXPECT_EQ(ElementwiseFusion().run(g), 0);
  EXPECT_EQ(g.nodes.size(), 4u);
  verify(g);  // Untouched nodes are intact, not moved-from shells.
}

// Verifies that the pass fuses every op fused programs have (the fusable ops
// of kernels/elementwise_ops.h, read from the registry), with its parameters.
TEST(ElementwiseFusionTest, FusesEveryFusableOp) {
  int fused = 0;
  for (const kernels::OpDef* def : kernels::Registry::global().all()) {
    if (def->elementwise == nullptr || !def->elementwise->fusable) continue;
    SCOPED_TRACE(def->name);
    Graph g;
    ValueId x = g.add_input("x", InputKind::kData, Shape{4}, DType::kFloat32);
    std::vector<ValueId> operands(static_cast<size_t>(def->elementwise->arity), x);
    g.add_output(node(g, "neg", {g.add_node(*def, {}, operands)[0]}), "y");
    EXPECT_EQ(ElementwiseFusion().run(g), 1);
    ASSERT_EQ(g.nodes.size(), 1u);
    EXPECT_THAT(g.nodes[0].attrs.get_string("program"), HasSubstr(str_cat("r0=", def->name, "(")));
    ++fused;
  }
  EXPECT_GE(fused, 20);
}

// Verifies that the pipeline fuses (after cse: the two equal exps merge).
TEST(ElementwiseFusionTest, RunsInThePipeline) {
  Graph g;
  ValueId x = g.add_input("x", InputKind::kData, Shape{4}, DType::kFloat32);
  g.add_output(node(g, "add", {node(g, "exp", {x}), node(g, "exp", {x})}), "y");
  optimize(g);
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].attrs.get_string("program"), "r0=exp(i0);r1=add(r0,r0)");
}

// Verifies that a bad program in a graph is an error naming the problem.
TEST(ElementwiseFusionTest, BadProgramsAreErrors) {
  Graph g;
  ValueId x = g.add_input("x", InputKind::kData, Shape{4}, DType::kFloat32);
  try {
    g.add_node(op_def("fused_elementwise"),
               {{"program", std::string("r0=exp(i0);r1=frobnicate(r0)")}}, {x});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("fused_elementwise"));
    EXPECT_THAT(e.what(), HasSubstr("instruction 1 'r1=frobnicate(r0)': unknown op 'frobnicate'"));
  }
}

Tensor random(Shape shape, DType dtype, int64_t seed, double low = -2, double high = 2) {
  std::vector<int64_t> dims(shape.begin(), shape.end());
  Tensor u = kernels::call1("rand", {}, {{"shape", dims}, {"seed", seed}, {"dtype", dtype}});
  Tensor scale = kernels::call1(
      "full", {}, {{"shape", std::vector<int64_t>{}}, {"value", high - low}, {"dtype", dtype}});
  Tensor shift = kernels::call1(
      "full", {}, {{"shape", std::vector<int64_t>{}}, {"value", low}, {"dtype", dtype}});
  return kernels::call1("add", {kernels::call1("mul", {u, scale}), shift});
}

// Runs `g` unfused and fused on the same inputs; the results must be equal.
void expect_same_results(Graph g, absl::Span<const Tensor> inputs) {
  Graph fused = g;
  ASSERT_GT(ElementwiseFusion().run(fused), 0);
  verify(fused);
  std::vector<Tensor> want = Executor(std::move(g)).run(inputs);
  std::vector<Tensor> got = Executor(std::move(fused)).run(inputs);
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k) {
    if (got[k].dtype() == DType::kFloat64) {
      EXPECT_EQ(got[k].to_vector<double>(), want[k].to_vector<double>()) << "output " << k;
    } else {
      EXPECT_EQ(got[k].to_vector<float>(), want[k].to_vector<float>()) << "output " << k;
    }
  }
}

// Verifies that the fused graph's results are the unfused graph's, bit for
// bit (same scalar math), in float32 and float64, small and large (many
// blocks, every core).
TEST(ElementwiseFusionTest, FusedResultsEqualUnfused) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    for (int64_t n : {int64_t{7}, int64_t{1000000}}) {
      SCOPED_TRACE(str_cat(dtype_name(dtype), " n=", n));
      expect_same_results(chain_graph(n, dtype),
                          {random({n}, dtype, 1), random({}, dtype, 2), random({n}, dtype, 3)});
    }
  }
}

// Verifies the same for every instruction in one DAG, with scalars on both
// sides of binary ops and the alternative output read by another op.
TEST(ElementwiseFusionTest, EveryInstructionMatchesUnfused) {
  for (DType dtype : {DType::kFloat32, DType::kFloat64}) {
    SCOPED_TRACE(dtype_name(dtype));
    const int64_t n = 100003;
    Graph g;
    ValueId x = g.add_input("x", InputKind::kData, Shape{n}, dtype);
    ValueId p = g.add_input("p", InputKind::kData, Shape{n}, dtype);  // Positive.
    ValueId s = g.add_input("s", InputKind::kData, Shape{1}, dtype);
    ValueId a = node(g, "add", {node(g, "neg", {x}), node(g, "abs", {x})});
    a = node(g, "sub", {node(g, "sign", {x}), a});
    a = node(g, "mul", {node(g, "square", {a}), node(g, "relu", {x})});
    a = node(g, "div", {a, node(g, "exp", {x})});
    ValueId b = node(g, "mul", {node(g, "log", {p}), node(g, "sqrt", {p})});
    b = node(g, "add", {b, node(g, "rsqrt", {p})});
    b = node(g, "pow", {p, node(g, "tanh", {b})});
    ValueId c = node(g, "maximum", {node(g, "sigmoid", {x}), node(g, "erf", {x})});
    c = node(g, "minimum", {s, node(g, "gelu", {c})});
    c = node(g, "leaky_relu", {node(g, "sub", {c, s})}, {{"alpha", 0.3}});
    c = node(g, "clip", {c}, {{"min", -0.2}, {"max", 0.7}});
    ValueId out = node(g, "add", {node(g, "add", {a, b}), c});
    g.add_output(out, "out");
    Graph copy = g;
    EXPECT_EQ(ElementwiseFusion().run(copy), static_cast<int>(g.nodes.size()) - 1);
    expect_same_results(std::move(g), {random({n}, dtype, 4), random({n}, dtype, 5, 0.5, 2),
                                       random({1}, dtype, 6)});
  }
}

}  // namespace
}  // namespace tandem::trace
