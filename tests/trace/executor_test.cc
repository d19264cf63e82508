// The executor against eager calls of the same ops: results, overlapping
// calls sharing planned buffers, bad inputs, reseeded random ops, failures.
#include "trace/executor.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/engine/engine.h"
#include "core/engine/var.h"
#include "core/error.h"
#include "kernels/dispatch.h"
#include "tests/trace/graph_test_util.h"

namespace tandem::trace {
namespace {

using ::testing::HasSubstr;

using testing::op_def;

// y = sum(relu(x @ w + b) * 2, axes=1): a few ops, two state inputs.
Graph mlp_graph(int64_t batch) {
  Graph g;
  ValueId x = g.add_input("x", InputKind::kData, Shape{batch, 3}, DType::kFloat32);
  ValueId w = g.add_input("w", InputKind::kState, Shape{4, 3}, DType::kFloat32);
  ValueId b = g.add_input("b", InputKind::kState, Shape{4}, DType::kFloat32);
  ValueId h = g.add_node(op_def("linear"), {}, {x, w, b})[0];
  ValueId r = g.add_node(op_def("relu"), {}, {h})[0];
  ValueId two =
      g.add_node(op_def("full"), {{"shape", std::vector<int64_t>{}}, {"value", 2.0}}, {})[0];
  ValueId m = g.add_node(op_def("mul"), {}, {r, two})[0];
  g.add_output(g.add_node(op_def("sum"), {{"axes", std::vector<int64_t>{1}}}, {m})[0], "y");
  return g;
}

Tensor eager_mlp(const Tensor& x, const Tensor& w, const Tensor& b) {
  Tensor h = kernels::call1("linear", {x, w, b});
  Tensor r = kernels::call1("relu", {h});
  Tensor two = kernels::call1("full", {}, {{"shape", std::vector<int64_t>{}}, {"value", 2.0}});
  return kernels::call1("sum", {kernels::call1("mul", {r, two})},
                        {{"axes", std::vector<int64_t>{1}}});
}

using testing::random_tensor;

TEST(ExecutorTest, MatchesEagerCalls) {
  Executor exec(mlp_graph(5));
  Tensor x = random_tensor({5, 3}, 1), w = random_tensor({4, 3}, 2), b = random_tensor({4}, 3);
  std::vector<Tensor> out = exec.run({x, w, b});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].to_vector<float>(), eager_mlp(x, w, b).to_vector<float>());
}

// On a GPU: the first call runs node by node, the second is captured as a
// CUDA graph and launched, later ones launch it (Note [One launch per
// call]); every call must match the CPU, with its own inputs.
TEST(ExecutorTest, ReplaysOnCudaMatchingTheCpu) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine";
  const Device cuda = Device::cuda(0);
  auto to = [](const Tensor& t, Device d) {
    return kernels::call1("to_device", {t}, {{"device", d.to_string()}});
  };
  for (bool cuda_graph : {true, false}) {
    SCOPED_TRACE(cuda_graph ? "as a CUDA graph" : "node by node");
    Executor exec(mlp_graph(5), {.device = cuda, .cuda_graph = cuda_graph});
    Tensor w = random_tensor({4, 3}, 2), b = random_tensor({4}, 3);
    for (int call = 0; call < 4; ++call) {
      Tensor x = random_tensor({5, 3}, 10 + call);
      std::vector<Tensor> out = exec.run({to(x, cuda), to(w, cuda), to(b, cuda)});
      ASSERT_EQ(out[0].device(), cuda);
      std::vector<float> got = out[0].to_vector<float>();
      std::vector<float> want = eager_mlp(x, w, b).to_vector<float>();
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4) << "call " << call;
    }
  }
}

// Pushes an op that writes `t`'s var (its data untouched) and runs until
// `release` is set: what a busy worker, or a tensor still being computed,
// looks like.
void push_gate(const Tensor& t, const std::atomic<bool>& release) {
  engine::current().push(
      [&release](const engine::RunContext&) {
        while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      },
      Device::cpu(), {}, {t.var()}, "gate");
}

// Verifies Note [Small calls run on the caller]: a call of a small graph
// whose vars are free has run when run() returns, even while the worker is
// busy; a call whose input is still being written, or of a graph too big to
// run on the caller, is pushed, and gives the same answer.
TEST(ExecutorTest, SmallCallsRunOnTheCaller) {
  Tensor w = random_tensor({4, 3}, 2), b = random_tensor({4}, 3);
  Tensor x = random_tensor({4, 3}, 1), pending = random_tensor({4, 3}, 4);
  Tensor big = random_tensor({100000, 3}, 5);
  engine::current().wait_all();
  Executor small(mlp_graph(4)), large(mlp_graph(100000));
  std::atomic<bool> release{false};
  push_gate(Tensor::empty({1}), release);  // The worker is busy from now on.
  std::vector<Tensor> now = small.run({x, w, b});
  EXPECT_TRUE(now[0].var()->readable_now()) << "the small call did not run on the caller";
  push_gate(pending, release);
  std::vector<Tensor> queued = small.run({pending, w, b});
  EXPECT_FALSE(queued[0].var()->readable_now()) << "ran before its input was written";
  std::vector<Tensor> pushed = large.run({big, w, b});
  EXPECT_FALSE(pushed[0].var()->readable_now()) << "the large call ran on the caller";
  release = true;
  EXPECT_EQ(now[0].to_vector<float>(), eager_mlp(x, w, b).to_vector<float>());
  EXPECT_EQ(queued[0].to_vector<float>(), eager_mlp(pending, w, b).to_vector<float>());
  EXPECT_EQ(pushed[0].to_vector<float>(), eager_mlp(big, w, b).to_vector<float>());
}

TEST(ExecutorTest, OverlappingCallsEachGetTheirOwnResult) {
  // Calls pushed back to back share the planned buffers; the engine must
  // order them so that no call reads another's intermediates.
  Executor exec(mlp_graph(64));
  Tensor w = random_tensor({4, 3}, 2), b = random_tensor({4}, 3);
  std::vector<Tensor> xs, ys;
  for (int i = 0; i < 50; ++i) {
    xs.push_back(random_tensor({64, 3}, 100 + i));
    ys.push_back(exec.run({xs.back(), w, b})[0]);
  }
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(ys[i].to_vector<float>(), eager_mlp(xs[i], w, b).to_vector<float>()) << "call " << i;
  }
}

TEST(ExecutorTest, PlannedAndUnplannedGiveTheSameResult) {
  Tensor x = random_tensor({7, 3}, 1), w = random_tensor({4, 3}, 2), b = random_tensor({4}, 3);
  Executor planned(mlp_graph(7)), unplanned(mlp_graph(7), {.plan_memory = false});
  EXPECT_LE(planned.memory_plan().planned_bytes, unplanned.memory_plan().planned_bytes);
  EXPECT_EQ(planned.run({x, w, b})[0].to_vector<float>(),
            unplanned.run({x, w, b})[0].to_vector<float>());
}

TEST(ExecutorTest, RejectsInputsThatDifferFromTheGraph) {
  Executor exec(mlp_graph(5));
  Tensor w = random_tensor({4, 3}, 2), b = random_tensor({4}, 3);
  try {
    exec.run({random_tensor({6, 3}, 1), w, b});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("input 'x' is float32[6, 3]"));
    EXPECT_THAT(e.what(), HasSubstr("built for float32[5, 3]"));
    EXPECT_THAT(e.what(), HasSubstr("executor_test.cc"));
  }
  EXPECT_THROW(exec.run({w, b}), Error);
}

TEST(ExecutorTest, OutputsMayBeInputsOrRepeated) {
  Graph g;
  ValueId x = g.add_input("x", InputKind::kData, Shape{2}, DType::kFloat32);
  ValueId e = g.add_node(op_def("exp"), {}, {x})[0];
  ValueId c = g.add_constant("c", Tensor::from_vector<float>({7, 8}, {2}));
  g.add_output(x, "x");
  g.add_output(e, "e1");
  g.add_output(e, "e2");
  g.add_output(c, "c");
  Executor exec(std::move(g));
  Tensor in = Tensor::from_vector<float>({0, 1}, {2});
  std::vector<Tensor> out = exec.run({in});
  EXPECT_EQ(out[0].to_vector<float>(), in.to_vector<float>());
  EXPECT_EQ(out[1].to_vector<float>(), out[2].to_vector<float>());
  EXPECT_EQ(out[3].to_vector<float>(), (std::vector<float>{7, 8}));
}

TEST(ExecutorTest, RandomOpsRepeatTheTracedSeedUnlessReseeded) {
  Graph g;
  g.add_output(
      g.add_node(op_def("rand"), {{"shape", std::vector<int64_t>{8}}, {"seed", int64_t{7}}}, {})[0],
      "r");
  Executor exec(std::move(g));
  std::vector<float> a = exec.run({})[0].to_vector<float>();
  EXPECT_EQ(exec.run({})[0].to_vector<float>(), a);
  int64_t seed = 100;
  std::vector<float> b = exec.run({}, [&](int64_t) { return seed++; })[0].to_vector<float>();
  std::vector<float> c = exec.run({}, [&](int64_t) { return seed++; })[0].to_vector<float>();
  EXPECT_NE(b, a);
  EXPECT_NE(c, b);
}

TEST(ExecutorTest, KernelFailuresNameTheOpAndTheTracedLine) {
  Graph g;
  ValueId x = g.add_input("x", InputKind::kData, Shape{3}, DType::kInt64);
  ValueId i = g.add_input("i", InputKind::kData, Shape{1}, DType::kInt64);
  const int line = __LINE__ + 1;
  g.add_output(g.add_node(op_def("take"), {}, {x, i}, std::source_location::current())[0], "y");
  Executor exec(std::move(g));
  std::vector<Tensor> out = exec.run(
      {Tensor::from_vector<int64_t>({1, 2, 3}, {3}), Tensor::from_vector<int64_t>({9}, {1})});
  try {
    out[0].wait_to_read();
    FAIL() << "expected the kernel's error";
  } catch (const Error& e) {
    EXPECT_EQ(e.op(), "take");
    EXPECT_THAT(e.what(), HasSubstr(str_cat("executor_test.cc:", line)));
  }
}

}  // namespace
}  // namespace tandem::trace
