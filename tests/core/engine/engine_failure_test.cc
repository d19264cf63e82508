// Failures: an op that throws fails the vars it writes; dependents are skipped
// and inherit the failure; waits throw it, naming the op and the push line;
// the engine keeps working; a later successful write heals the var.
#include <atomic>
#include <random>
#include <set>
#include <stdexcept>

#include "tests/core/engine/engine_test_util.h"

namespace tandem::engine::testing {
namespace {

using ::testing::HasSubstr;

class EngineFailureTest : public ::testing::TestWithParam<EngineConfig> {
 protected:
  bool naive() const { return GetParam().kind == EngineKind::kNaive; }

  // Pushes an op; on the naive engine a failure is thrown right here, which
  // these tests then treat like the threaded engine's later failure.
  void push_allowing_failure(OpFn fn, VarSpan reads, VarSpan writes, const char* name,
                             std::source_location where = std::source_location::current()) {
    try {
      engine_->push(std::move(fn), Device::cpu(), reads, writes, name, where);
    } catch (const Error&) {
      EXPECT_TRUE(naive()) << "the threaded engine threw at push";
    }
  }

  // The error a wait on `var` throws; fails the test if it does not throw.
  Error wait_error(Var* var) {
    try {
      engine_->wait(var);
    } catch (const Error& e) {
      return e;
    }
    ADD_FAILURE() << "wait did not throw";
    return Error("");
  }

  std::unique_ptr<Engine> engine_ = GetParam().make();
};

OpFn throws_runtime_error(const char* message) {
  return [message](const RunContext&) { throw std::runtime_error(message); };
}

// Verifies that a failure travels down a chain, skipping every dependent
// kernel, and that the wait names the failing op and the line that pushed it.
TEST_P(EngineFailureTest, PropagatesAlongAChain) {
  VarSet v(*engine_, 4);
  std::atomic<int> ran{0};
  int push_line = __LINE__ + 1;
  push_allowing_failure(throws_runtime_error("boom"), {}, {v[0]}, "exploding_op");
  for (int i = 0; i < 3; ++i) {
    push_allowing_failure([&](const RunContext&) { ++ran; }, {v[i]}, {v[i + 1]}, "dependent");
  }
  Error e = wait_error(v[3]);
  EXPECT_EQ(ran, 0) << "a dependent of a failed op ran";
  EXPECT_EQ(e.op(), "exploding_op");
  EXPECT_EQ(e.message(), "boom");
  EXPECT_EQ(e.where().line(), static_cast<unsigned>(push_line));
  EXPECT_THAT(e.what(), HasSubstr("engine_failure_test.cc"));
}

// Verifies that a failed var stays failed for every wait until rewritten,
// and that a successful write heals it.
TEST_P(EngineFailureTest, FailedVarIsStickyUntilOverwritten) {
  VarSet v(*engine_, 1);
  push_allowing_failure(throws_runtime_error("bad"), {}, {v[0]}, "fails");
  EXPECT_EQ(wait_error(v[0]).message(), "bad");
  EXPECT_EQ(wait_error(v[0]).message(), "bad");
  int value = 0;
  engine_->push([&](const RunContext&) { value = 5; }, Device::cpu(), {}, {v[0]}, "heals");
  EXPECT_NO_THROW(engine_->wait(v[0]));
  EXPECT_EQ(value, 5);
}

// Verifies that an op that only reads a failed var is skipped, while an
// unrelated op on the same engine still runs.
TEST_P(EngineFailureTest, EngineStaysUsable) {
  VarSet v(*engine_, 3);
  push_allowing_failure(throws_runtime_error("bad"), {}, {v[0]}, "fails");
  bool reader_ran = false, other_ran = false;
  push_allowing_failure([&](const RunContext&) { reader_ran = true; }, {v[0]}, {v[1]}, "reader");
  engine_->push([&](const RunContext&) { other_ran = true; }, Device::cpu(), {}, {v[2]}, "other");
  EXPECT_NO_THROW(engine_->wait(v[2]));
  EXPECT_TRUE(other_ran);
  EXPECT_EQ(wait_error(v[1]).op(), "fails");
  EXPECT_FALSE(reader_ran);
}

// Verifies that wait_all throws the first unreported failure once, then is
// clean; and that a failure already thrown by a wait is not thrown again.
TEST_P(EngineFailureTest, WaitAllReportsEachFailureOnce) {
  if (naive()) GTEST_SKIP() << "the naive engine throws at push; wait_all has nothing to report";
  VarSet v(*engine_, 3);
  engine_->push(throws_runtime_error("first"), Device::cpu(), {}, {v[0]}, "one");
  engine_->push(throws_runtime_error("second"), Device::cpu(), {v[0]}, {v[1]}, "two");
  try {
    engine_->wait_all();
    ADD_FAILURE() << "wait_all did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.op(), "one");  // "two" was skipped: it inherits, it does not fail anew.
  }
  EXPECT_NO_THROW(engine_->wait_all());

  engine_->push(throws_runtime_error("third"), Device::cpu(), {}, {v[2]}, "three");
  EXPECT_EQ(wait_error(v[2]).op(), "three");
  EXPECT_NO_THROW(engine_->wait_all()) << "a failure thrown by wait was thrown again";
}

// Verifies that every kind of exception becomes an Error, never a crash.
TEST_P(EngineFailureTest, AnyExceptionBecomesAnError) {
  VarSet v(*engine_, 3);
  push_allowing_failure([](const RunContext&) { throw 42; }, {}, {v[0]}, "throws_int");
  push_allowing_failure([](const RunContext&) { throw Error("checked"); }, {}, {v[1]},
                        "throws_error");
  push_allowing_failure([](const RunContext&) { throw std::bad_alloc(); }, {}, {v[2]},
                        "throws_bad_alloc");
  EXPECT_THAT(wait_error(v[0]).message(), HasSubstr("unknown exception"));
  EXPECT_EQ(wait_error(v[1]).message(), "checked");
  EXPECT_EQ(wait_error(v[1]).op(), "throws_error");
  EXPECT_THAT(wait_error(v[2]).message(), HasSubstr("bad_alloc"));
  try {
    engine_->wait_all();
  } catch (const Error&) {
  }
}

// Verifies that the naive engine throws at the push itself, at the user's
// line, and that a dependent push throws the inherited failure.
TEST(NaiveEngineTest, ThrowsAtThePushLine) {
  auto engine = make_engine(EngineKind::kNaive);
  VarSet v(*engine, 2);
  int line = 0;
  try {
    line = __LINE__ + 1;
    engine->push(throws_runtime_error("now"), Device::cpu(), {}, {v[0]}, "naive_op");
    ADD_FAILURE() << "push did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.op(), "naive_op");
    EXPECT_EQ(e.where().line(), static_cast<unsigned>(line));
  }
  bool ran = false;
  try {
    engine->push([&](const RunContext&) { ran = true; }, Device::cpu(), {v[0]}, {v[1]}, "next");
    ADD_FAILURE() << "push of a dependent did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.op(), "naive_op");
  }
  EXPECT_FALSE(ran);
}

// Verifies that pushing to a device without workers fails at the push, on
// the caller's thread, naming the device.
TEST_P(EngineFailureTest, UnknownDeviceFailsAtPush) {
  VarSet v(*engine_, 1);
  try {
    engine_->push([](const RunContext&) {}, Device::cuda(0), {}, {v[0]}, "gpu_op");
    ADD_FAILURE() << "push to cuda:0 did not throw";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("cuda:0"));
  }
}

// Verifies that an op which waits for other ops fails with an Error naming
// it, on every engine, instead of deadlocking its worker.
TEST_P(EngineFailureTest, WaitInsideAnOpIsRefused) {
  VarSet v(*engine_, 2);
  Engine* engine = engine_.get();
  push_allowing_failure([engine, &v](const RunContext&) { engine->wait(v[0]); }, {}, {v[1]},
                        "impatient_op");
  Error e = wait_error(v[1]);
  EXPECT_EQ(e.op(), "impatient_op");
  EXPECT_THAT(e.message(), HasSubstr("from inside op 'impatient_op'"));
  try {
    engine_->wait_all();
  } catch (const Error&) {
  }
}

// A random program in which some ops fail. Verifies, against a sequential
// interpretation, that exactly the vars downstream of a failure are failed,
// each naming the op whose failure reached it; that skipped kernels never
// ran; that every other var holds its sequential value; and that the engine
// works afterwards.
TEST_P(EngineFailureTest, RandomProgramWithFaults) {
  constexpr int kVars = 40;
  constexpr int kOps = 3000;
  VarSet v(*engine_, kVars);
  std::mt19937 rng(1234);

  struct Expected {
    int64_t value = 0;
    int failed_by = -1;  // Op index whose failure reached the var, or -1.
  };
  std::vector<Expected> expected(kVars);
  std::vector<int64_t> actual(kVars, 0);
  std::vector<std::string> names(kOps);
  std::vector<int> ran(kOps, 0);
  std::vector<bool> should_run(kOps);

  for (int op = 0; op < kOps; ++op) {
    int a = rng() % kVars, b = rng() % kVars, out = rng() % kVars;
    bool fails = rng() % 50 == 0;
    names[op] = "op" + std::to_string(op);
    // Sequential semantics (Note [Failures] in engine.h).
    int inherited = expected[a].failed_by >= 0 ? expected[a].failed_by : expected[b].failed_by;
    should_run[op] = inherited < 0;
    if (inherited >= 0) {
      expected[out].failed_by = inherited;
    } else if (fails) {
      expected[out].failed_by = op;
    } else {
      expected[out] = {(expected[a].value * 7 + expected[b].value + op) % 999983, -1};
    }
    push_allowing_failure(
        [&actual, &ran, a, b, out, op, fails](const RunContext&) {
          ++ran[op];
          if (fails) throw std::runtime_error("injected fault");
          actual[out] = (actual[a] * 7 + actual[b] + op) % 999983;
        },
        {v[a], v[b]}, {v[out]}, names[op].c_str());
  }
  for (int i = 0; i < kVars; ++i) {
    if (expected[i].failed_by >= 0) {
      EXPECT_EQ(wait_error(v[i]).op(), names[expected[i].failed_by]) << "var " << i;
    } else {
      EXPECT_NO_THROW(engine_->wait(v[i])) << "var " << i;
      EXPECT_EQ(actual[i], expected[i].value) << "var " << i;
    }
  }
  try {
    engine_->wait_all();
  } catch (const Error&) {
  }
  for (int op = 0; op < kOps; ++op) EXPECT_EQ(ran[op], should_run[op] ? 1 : 0) << "op " << op;
  int value = 0;
  engine_->push([&](const RunContext&) { value = 1; }, Device::cpu(), {}, {v[0]}, "after");
  EXPECT_NO_THROW(engine_->wait(v[0]));
  EXPECT_EQ(value, 1);
}

INSTANTIATE_TEST_SUITE_P(Engines, EngineFailureTest, ::testing::ValuesIn(all_configs()),
                         config_name);

}  // namespace
}  // namespace tandem::engine::testing
