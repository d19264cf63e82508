// The tracer: what it records for ops, views, captured state and rebinding,
// and the error for reading values while tracing.
#include "trace/tracer.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/allocator.h"
#include "core/engine/engine.h"
#include "core/error.h"
#include "kernels/dispatch.h"
#include "trace/executor.h"

namespace tandem::trace {
namespace {

using ::testing::HasSubstr;

Tensor vec(std::vector<float> v) {
  const auto n = static_cast<int64_t>(v.size());
  return Tensor::from_vector<float>(v, {n});
}

TEST(TracerTest, RecordsOpsAndReplaysThem) {
  Tensor x = vec({1, -2, 3, -4});
  Tensor w = vec({10, 20, 30, 40});  // Captured: becomes a state input.
  Tracer tracer;
  tracer.add_input(x, "x");
  Tensor y = kernels::call1("mul", {kernels::call1("relu", {x}), w});
  tracer.add_output(y, "y");
  Trace t = tracer.finish();
  verify(t.graph);
  ASSERT_EQ(t.graph.nodes.size(), 2u);
  ASSERT_EQ(t.state.size(), 1u);
  EXPECT_EQ(t.state[0].impl_ptr(), w.impl_ptr());
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{10, 0, 90, 0}));  // Ran eagerly.

  Executor exec(std::move(t.graph));
  EXPECT_EQ(exec.run({vec({-1, 2, -3, 4}), w})[0].to_vector<float>(),
            (std::vector<float>{0, 40, 0, 160}));
}

// Verifies that state inputs take the namer's names, and that a name some
// input already has (a data input's, another state's) falls back to a free
// state<k>: graph inputs are named uniquely.
TEST(TracerTest, NamesStateInputsUniquely) {
  Tensor x = vec({1, 2}), a = vec({3, 4}), b = vec({5, 6}), c = vec({7, 8}), d = vec({9, 1});
  Tracer tracer;
  tracer.set_state_namer([&](const Tensor& t) -> std::string {
    if (t.impl_ptr() == a.impl_ptr()) return "fc.weight";
    if (t.impl_ptr() == b.impl_ptr()) return "fc.weight";  // Taken by a.
    if (t.impl_ptr() == c.impl_ptr()) return "x";          // A data input's name.
    return "state0";                                       // d: the name the fallback would give b.
  });
  tracer.add_input(x, "x");
  Tensor y = kernels::call1("add", {x, a});
  for (const Tensor& t : {b, c, d}) y = kernels::call1("add", {y, t});
  tracer.add_output(y, "y");
  Trace t = tracer.finish();
  verify(t.graph);
  std::vector<std::string> names;
  for (const GraphInput& input : t.graph.inputs) names.push_back(input.name);
  EXPECT_EQ(names, (std::vector<std::string>{"x", "fc.weight", "state1", "state2", "state0"}));
}

TEST(TracerTest, RecordsViewsAsOps) {
  Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tracer tracer;
  tracer.add_input(x, "x");
  Tensor e = kernels::call1("exp", {x});
  Tensor row = e[1];             // A view: not an op.
  Tensor flat = e.reshape({6});  // Another view.
  Tensor y = kernels::call1(
      "add", {row, kernels::call1("sum", {flat},
                                  {{"axes", std::vector<int64_t>{0}}, {"keepdims", true}})});
  tracer.add_output(y, "y");
  Trace t = tracer.finish();
  verify(t.graph);
  EXPECT_TRUE(t.state.empty());  // Views of traced data are not state.
  Executor exec(std::move(t.graph));
  Tensor x2 = Tensor::from_vector<float>({0, 0, 0, 1, 1, 1}, {2, 3});
  std::vector<float> got = exec.run({x2})[0].to_vector<float>();
  const float e1 = std::exp(1.0f), total = 3 + 3 * e1;
  ASSERT_EQ(got.size(), 3u);
  for (float v : got) EXPECT_NEAR(v, e1 + total, 1e-4);
}

TEST(TracerTest, ReadingAValueWhileTracingNamesTheLine) {
  Tensor x = vec({1, 2});
  Tracer tracer;
  tracer.add_input(x, "x");
  Tensor s = kernels::call1("sum", {x});
  const int line = __LINE__ + 2;
  try {
    (void)s.item<float>();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.op(), "item");
    EXPECT_THAT(e.what(), HasSubstr("cannot read a tensor's value while tracing"));
    EXPECT_THAT(e.what(), HasSubstr(str_cat("tracer_test.cc:", line)));
  }
  EXPECT_THROW(s.to_vector<float>(), Error);
  EXPECT_THROW(s.to_string(), Error);
}

TEST(TracerTest, ListsStateRebindingAsOutputs) {
  Tensor param = vec({1, 2, 3});
  Tensor untouched = vec({5, 5, 5});
  Tracer tracer;
  Tensor lr = vec({0.5, 0.5, 0.5});
  tracer.add_input(lr, "lr");
  Tensor temp = kernels::call1("add", {param, untouched});
  temp.assign_(kernels::call1("neg", {temp}));  // A temporary: not state.
  param.assign_(kernels::call1("sub", {param, lr}));
  untouched.assign_(untouched);  // Same data again: no write.
  Trace t = tracer.finish();
  ASSERT_EQ(t.state_writes.size(), 1u);
  EXPECT_EQ(t.state_writes[0].target.impl_ptr(), param.impl_ptr());
  EXPECT_EQ(t.graph.outputs[static_cast<size_t>(t.state_writes[0].output)].name, "state_write0");
  EXPECT_EQ(param.to_vector<float>(), (std::vector<float>{0.5, 1.5, 2.5}));
}

// Verifies that the tracer keeps no storage alive (Note [How traced values
// are identified]): a chain of temporaries, each dropped once the next is
// made, needs the memory of a few of them while traced, not of all of them,
// so that a traced training step frees its activations as an untraced one
// does. Also that the chain replays right, whatever addresses were reused.
TEST(TracerTest, KeepsNoTemporaryAlive) {
  constexpr int64_t kElements = int64_t{1} << 18;  // 1 MiB of float32.
  constexpr int kSteps = 32;
  Tensor x = Tensor::from_vector<float>(std::vector<float>(kElements, 1.0f), {kElements});
  engine::current().wait_all();
  Allocator& allocator = allocator_for(Device::cpu());
  allocator.reset_peak();
  const size_t before = allocator.stats().in_use;
  Tracer tracer;
  tracer.add_input(x, "x");
  Tensor y = x;
  for (int i = 0; i < kSteps; ++i) {
    y = kernels::call1("add", {y, x});
    engine::current().wait_all();  // The replaced temporary's memory returns now.
  }
  tracer.add_output(y, "y");
  Trace t = tracer.finish();
  const size_t peak = allocator.stats().peak_in_use - before;
  EXPECT_LE(peak, size_t{4} << 20)
      << "the trace held " << peak << " bytes of " << kSteps << " temporaries of 1 MiB";
  Executor exec(std::move(t.graph));
  Tensor two = Tensor::from_vector<float>(std::vector<float>(kElements, 2.0f), {kElements});
  std::vector<float> got = exec.run({two})[0].to_vector<float>();
  EXPECT_EQ(got.front(), 2.0f * (kSteps + 1));
  EXPECT_EQ(got.back(), 2.0f * (kSteps + 1));
}

TEST(TracerTest, StopsRecordingWhenFinishedOrDestroyed) {
  {
    Tracer tracer;
    EXPECT_TRUE(Tracer::active());
  }
  EXPECT_FALSE(Tracer::active());
  Tracer tracer;
  tracer.finish();
  EXPECT_FALSE(Tracer::active());
  EXPECT_NO_THROW(kernels::call1("exp", {vec({1})}).item<float>());
}

}  // namespace
}  // namespace tandem::trace
