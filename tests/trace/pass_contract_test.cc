// The contract of every pass the pipeline runs (trace/passes/pass.h), on
// generated graphs that hold what each pass looks for: the pass leaves a
// valid graph that computes the same values, it is idempotent (a second run
// reports no change and changes nothing), and on a graph optimize() returned
// it finds nothing left to do. Then the pipeline's own promises: it cycles
// until the passes settle, and it reports each pass's changes.
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/error.h"
#include "tests/scoped_env.h"
#include "tests/trace/graph_test_util.h"
#include "trace/graph.h"
#include "trace/passes/pass.h"
#include "trace/passes/pipeline.h"

namespace tandem::trace {
namespace {

using Ints = std::vector<int64_t>;
using testing::op_def;
using testing::random_tensor;

constexpr int64_t kBatch = 4, kWidth = 6;
constexpr int kGraphsPerPass = 40;

// A random graph over float32 [kBatch, kWidth] values: elementwise chains
// (elementwise fusion), linear layers followed by an activation (activation
// fusion) or an eval batch_norm (batch-norm folding), repeated nodes (cse),
// subgraphs over constants and creation ops (constant folding) and nodes
// nothing reads (dead code), mixed at random.
class GraphGenerator {
 public:
  explicit GraphGenerator(uint64_t seed) : rng_(seed) {
    values_.push_back(
        graph_.add_input("x", InputKind::kData, Shape{kBatch, kWidth}, DType::kFloat32));
  }

  Graph generate() {
    const int steps = pick(4, 14);
    for (int s = 0; s < steps; ++s) {
      // Each step's nodes as one module's, as a traced model's are.
      const size_t first = graph_.nodes.size();
      step();
      for (size_t n = first; n < graph_.nodes.size(); ++n) graph_.nodes[n].scope = str_cat("m", s);
    }
    graph_.add_output(values_.back(), "y");
    if (pick(0, 2) == 0) graph_.add_output(any_value(), "z");
    return std::move(graph_);
  }

 private:
  int pick(int low, int high) { return std::uniform_int_distribution<int>(low, high)(rng_); }
  ValueId any_value() { return values_[static_cast<size_t>(pick(0, int(values_.size()) - 1))]; }
  ValueId last() const { return values_.back(); }

  ValueId add(const char* name, kernels::Attrs attrs, std::vector<ValueId> inputs) {
    return graph_.add_node(op_def(name), std::move(attrs), std::move(inputs))[0];
  }
  ValueId state(const std::string& name, Shape shape) {
    return graph_.add_input(str_cat(name, graph_.inputs.size()), InputKind::kState,
                            std::move(shape), DType::kFloat32);
  }

  void step() {
    // Bounded ops only, so that no value overflows however they chain.
    static const char* const kUnary[] = {"relu", "tanh",     "sigmoid", "neg",        "abs",
                                         "sin",  "softsign", "gelu",    "leaky_relu", "elu"};
    static const char* const kBinary[] = {"add", "sub", "mul", "maximum", "minimum"};
    static const char* const kActivation[] = {"relu", "tanh", "sigmoid", "gelu", "leaky_relu"};
    switch (pick(0, 7)) {
      case 0:
      case 1:
        values_.push_back(add(kUnary[pick(0, 9)], {}, {last()}));
        break;
      case 2:
        values_.push_back(add(kBinary[pick(0, 4)], {}, {last(), any_value()}));
        break;
      case 3: {  // A layer, often with its activation.
        ValueId w = state("w", Shape{kWidth, kWidth}), b = state("b", Shape{kWidth});
        ValueId h = add("linear", {}, {last(), w, b});
        values_.push_back(pick(0, 2) > 0 ? add(kActivation[pick(0, 4)], {}, {h}) : h);
        break;
      }
      case 4: {  // Batch norm in evaluation mode, mostly after a layer (or a chain of them).
        ValueId h = last();
        if (pick(0, 2) > 0) {
          ValueId w = state("w", Shape{kWidth, kWidth}), b = state("b", Shape{kWidth});
          h = add("linear", {}, {h, w, b});
        }
        std::vector<ValueId> stats{state("gamma", Shape{kWidth}), state("beta", Shape{kWidth}),
                                   state("mean", Shape{kWidth}), state("var", Shape{kWidth})};
        values_.push_back(graph_.add_node(op_def("batch_norm"),
                                          {{"training", false}, {"eps", 1e-3}},
                                          {h, stats[0], stats[1], stats[2], stats[3]})[0]);
        break;
      }
      case 5: {  // The same node twice; or a binary op with its operands swapped.
        const char* name = kUnary[pick(0, 9)];
        ValueId from = any_value();
        ValueId a = add(name, {}, {from}), b = add(name, {}, {from});
        if (pick(0, 1) == 0) {
          const char* binary = kBinary[pick(0, 4)];
          ValueId other = any_value();
          a = add(binary, {}, {from, other});
          b = add(binary, {}, {other, from});
        }
        values_.push_back(add("add", {}, {a, b}));
        break;
      }
      case 6: {  // Work on constants: a creation op, or a constant input.
        ValueId c = pick(0, 1) == 0
                        ? add("full", {{"shape", Ints{}}, {"value", 0.25 * pick(1, 4)}}, {})
                        : graph_.add_constant(str_cat("c", graph_.inputs.size()),
                                              random_tensor(Shape{kBatch, kWidth}, pick(1, 1000)));
        ValueId folded = add(kUnary[pick(0, 9)], {}, {c});
        values_.push_back(add(kBinary[pick(0, 4)], {}, {last(), folded}));
        break;
      }
      default:  // Nothing reads this.
        add(kUnary[pick(0, 9)], {}, {any_value()});
        break;
    }
  }

  std::mt19937_64 rng_;
  Graph graph_;
  std::vector<ValueId> values_;
};

// Inputs for a call: random data and state, variances positive.
std::vector<Tensor> call_inputs(const Graph& g) {
  std::vector<Tensor> inputs;
  int64_t seed = 1;
  for (const GraphInput& input : g.inputs) {
    if (input.kind == InputKind::kConstant) continue;
    const Shape& shape = g.value(input.value).shape;
    inputs.push_back(random_tensor(shape, seed++, input.name.starts_with("var") ? 0.5 : -0.5));
  }
  return inputs;
}

void expect_same_results(const Graph& original, const Graph& rewritten) {
  // Batch-norm folding reassociates float arithmetic; the rest is exact.
  testing::expect_same_results(original, rewritten, call_inputs(original), 1e-4);
}

const OptimizeOptions kInference{.inference = true};

std::vector<std::string> pass_names() {
  std::vector<std::string> names;
  for (const auto& pass : optimization_passes(kInference)) names.emplace_back(pass->name());
  return names;
}

std::unique_ptr<Pass> pass_named(const std::string& name) {
  for (auto& pass : optimization_passes(kInference)) {
    if (pass->name() == name) return std::move(pass);
  }
  ADD_FAILURE() << "no pass " << name;
  return nullptr;
}

class PassContractTest : public ::testing::TestWithParam<std::string> {};

// Verifies that the pass keeps the values and is idempotent, on graphs
// where it has work to do and on graphs where it has none.
TEST_P(PassContractTest, KeepsValuesAndIsIdempotent) {
  std::unique_ptr<Pass> pass = pass_named(GetParam());
  ASSERT_NE(pass, nullptr);
  int graphs_changed = 0;
  for (uint64_t seed = 0; seed < kGraphsPerPass; ++seed) {
    SCOPED_TRACE(str_cat("graph seed ", seed));
    const Graph original = GraphGenerator(seed).generate();
    Graph g = original;
    graphs_changed += pass->run(g) > 0;
    verify(g, str_cat("after ", pass->name()));
    expect_same_results(original, g);
    for (const Node& node : g.nodes) {
      EXPECT_FALSE(node.scope.empty()) << node.op->name << " lost its module\n" << to_text(g);
    }
    const std::string once = to_text(g);
    EXPECT_EQ(pass->run(g), 0) << "a second run changed\n" << once << "into\n" << to_text(g);
    EXPECT_EQ(to_text(g), once);
  }
  // The generator is only a test of the pass if it gives the pass work.
  EXPECT_GT(graphs_changed, kGraphsPerPass / 4);
}

// Verifies that an optimized graph leaves the pass nothing to do: the
// pipeline stops only at a fixed point of every pass.
TEST_P(PassContractTest, FindsNothingInAnOptimizedGraph) {
  std::unique_ptr<Pass> pass = pass_named(GetParam());
  ASSERT_NE(pass, nullptr);
  for (uint64_t seed = 0; seed < kGraphsPerPass; ++seed) {
    SCOPED_TRACE(str_cat("graph seed ", seed));
    const Graph original = GraphGenerator(seed).generate();
    Graph g = original;
    optimize(g, kInference);
    expect_same_results(original, g);
    const std::string optimized = to_text(g);
    EXPECT_EQ(pass->run(g), 0) << optimized;
    EXPECT_EQ(to_text(g), optimized);
  }
}

INSTANTIATE_TEST_SUITE_P(Pipeline, PassContractTest, ::testing::ValuesIn(pass_names()),
                         [](const auto& info) { return info.param; });

// Verifies that the pipeline goes round again when a later pass opens work
// for an earlier one: constant folding leaves the constant it read unread,
// and dead code, which ran before it, removes it in the next lap.
TEST(PipelineTest, CyclesUntilThePassesSettle) {
  Graph g;
  ValueId x = g.add_input("x", InputKind::kData, Shape{kBatch, kWidth}, DType::kFloat32);
  ValueId c = g.add_constant("c", random_tensor(Shape{kBatch, kWidth}, 7));
  ValueId e = g.add_node(op_def("exp"), {}, {c})[0];
  g.add_output(g.add_node(op_def("mul"), {}, {x, e})[0], "y");
  const Graph original = g;
  const std::vector<PassRun> runs = optimize(g);
  ASSERT_EQ(g.inputs.size(), 2u);
  EXPECT_EQ(g.inputs[1].kind, InputKind::kConstant);
  EXPECT_NE(g.inputs[1].name, "c");
  expect_same_results(original, g);
  std::vector<int> dead_code_changes;
  for (const PassRun& run : runs) {
    if (run.pass == "dead_code") dead_code_changes.push_back(run.changes);
  }
  EXPECT_THAT(dead_code_changes, ::testing::ElementsAre(0, 1, 0));
  // It stopped after a full lap without a change.
  const size_t lap = optimization_passes({}).size();
  ASSERT_GE(runs.size(), lap);
  for (size_t r = runs.size() - lap; r < runs.size(); ++r) EXPECT_EQ(runs[r].changes, 0);
}

// Verifies that cse runs before activation fusion: two equal activations of
// one layer become one, which then fuses into the layer.
TEST(PipelineTest, FusesAnActivationThatCseMadeTheOnlyReader) {
  Graph g;
  ValueId x = g.add_input("x", InputKind::kData, Shape{kBatch, kWidth}, DType::kFloat32);
  ValueId w = g.add_input("w", InputKind::kState, Shape{kWidth, kWidth}, DType::kFloat32);
  ValueId b = g.add_input("b", InputKind::kState, Shape{kWidth}, DType::kFloat32);
  ValueId h = g.add_node(op_def("linear"), {}, {x, w, b})[0];
  ValueId r1 = g.add_node(op_def("relu"), {}, {h})[0], r2 = g.add_node(op_def("relu"), {}, {h})[0];
  g.add_output(g.add_node(op_def("mul"), {}, {r1, r2})[0], "y");
  const Graph original = g;
  optimize(g);
  EXPECT_EQ(testing::count_op(g, "relu"), 0);
  EXPECT_EQ(g.nodes[0].attrs.get_string("activation"), "relu");
  expect_same_results(original, g);
}

// Verifies that TANDEM_DUMP_GRAPHS gets a line per pass run: step, pass,
// changes and nodes left, as optimize() returned them.
TEST(PipelineTest, DumpsTheChangesOfEachPass) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / str_cat("tandem-pass-runs-", ::getpid());
  fs::remove_all(dir);
  ::tandem::testing::ScopedEnv dump("TANDEM_DUMP_GRAPHS", dir.string());
  Graph g = GraphGenerator(3).generate();
  const std::vector<PassRun> runs = optimize(g, {.name = "net"});
  std::ifstream file(dir / "net.passes.txt");
  ASSERT_TRUE(file.good());
  std::string header;
  std::getline(file, header);
  EXPECT_THAT(header, ::testing::StartsWith("#"));
  for (size_t step = 0; step < runs.size(); ++step) {
    std::string line;
    ASSERT_TRUE(std::getline(file, line)) << "no line for step " << step + 1;
    EXPECT_EQ(line, str_cat(step + 1, " ", runs[step].pass, " ", runs[step].changes, " ",
                            runs[step].nodes));
    EXPECT_TRUE(fs::exists(dir / str_cat("net.", step + 1, ".", runs[step].pass, ".txt")));
  }
  std::string extra;
  EXPECT_FALSE(std::getline(file, extra)) << extra;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace tandem::trace
