// Ops that finish later (Note [Ops that finish later] in core/engine/
// engine.h): the worker is free while the op waits for its Completion; what
// reads the op's writes still waits for it; a failure handed to the
// Completion fails the op like a throw.
#include <atomic>
#include <future>
#include <stdexcept>
#include <thread>

#include "tests/core/engine/engine_test_util.h"

namespace tandem::engine::testing {
namespace {

using ::testing::HasSubstr;

// One worker, so that an op that held it would block everything else.
std::unique_ptr<Engine> one_worker_engine() {
  return make_engine(EngineKind::kThreaded, {.cpu_workers = 1});
}

// Pushes an op that defers and hands its Completion to `handed`.
void push_deferring(Engine& engine, Var* writes, std::promise<Completion>& handed,
                    const char* name = "deferring") {
  engine.push(
      [&handed](const RunContext& run) {
        ASSERT_NE(run.deferral, nullptr);
        handed.set_value(run.deferral->defer());
      },
      Device::cpu(), {}, {&writes, 1}, name);
}

TEST(EngineDeferralTest, TheWorkerRunsOtherOpsWhileAnOpWaits) {
  std::unique_ptr<Engine> engine = one_worker_engine();
  VarSet v(*engine, 3);
  std::promise<Completion> handed;
  push_deferring(*engine, v[0], handed);
  Completion done = handed.get_future().get();
  std::atomic<bool> dependent_ran{false};
  engine->push([&](const RunContext&) { dependent_ran = true; }, Device::cpu(), {v[0]}, {v[1]},
               "reads_the_deferred");
  std::atomic<bool> independent_ran{false};
  engine->push([&](const RunContext&) { independent_ran = true; }, Device::cpu(), {}, {v[2]},
               "independent");
  engine->wait(v[2]);  // Would never return if the deferred op held the one worker.
  EXPECT_TRUE(independent_ran);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_FALSE(dependent_ran) << "an op read a var whose writer had not finished";
  std::thread finisher([&done] { done(); });  // From another thread, as a communicator does.
  engine->wait(v[1]);
  EXPECT_TRUE(dependent_ran);
  finisher.join();
}

TEST(EngineDeferralTest, AFailureGivenToTheCompletionFailsTheOpAndItsReaders) {
  std::unique_ptr<Engine> engine = one_worker_engine();
  VarSet v(*engine, 2);
  std::promise<Completion> handed;
  push_deferring(*engine, v[0], handed, "exchange");
  std::atomic<bool> reader_ran{false};
  engine->push([&](const RunContext&) { reader_ran = true; }, Device::cpu(), {v[0]}, {v[1]},
               "reader");
  handed.get_future().get()(std::make_exception_ptr(std::runtime_error("peer 3 vanished")));
  try {
    engine->wait(v[1]);
    ADD_FAILURE() << "wait did not throw";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("peer 3 vanished"));
    EXPECT_THAT(e.what(), HasSubstr("exchange"));
  }
  EXPECT_FALSE(reader_ran);
  engine->wait_all();  // Already reported by the wait (Note [Failures]).
}

TEST(EngineDeferralTest, ACompletionCalledBeforeTheFunctionReturnsFinishesTheOp) {
  std::unique_ptr<Engine> engine = one_worker_engine();
  VarSet v(*engine, 1);
  Var* written = v[0];
  for (int i = 0; i < 100; ++i) {
    engine->push([](const RunContext& run) { run.deferral->defer()(); }, Device::cpu(), {},
                 {&written, 1}, "done_at_once");
  }
  engine->wait(v[0]);
  engine->wait_all();
}

TEST(EngineDeferralTest, AThrowAfterDeferringWaitsForTheCompletionAndFails) {
  std::unique_ptr<Engine> engine = one_worker_engine();
  VarSet v(*engine, 1);
  Var* written = v[0];
  std::promise<Completion> handed;
  engine->push(
      [&handed](const RunContext& run) {
        handed.set_value(run.deferral->defer());
        throw std::runtime_error("late throw");
      },
      Device::cpu(), {}, {&written, 1}, "thrower");
  Completion done = handed.get_future().get();
  std::thread finisher([&done] {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    done();
  });
  try {
    engine->wait(v[0]);
    ADD_FAILURE() << "wait did not throw";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("late throw"));
  }
  finisher.join();
  engine->wait_all();
}

TEST(EngineDeferralTest, TheNaiveEngineOffersNoDeferral) {
  std::unique_ptr<Engine> engine = make_engine(EngineKind::kNaive);
  VarSet v(*engine, 1);
  Var* written = v[0];
  bool saw_null = false;
  engine->push([&](const RunContext& run) { saw_null = run.deferral == nullptr; }, Device::cpu(),
               {}, {&written, 1}, "naive");
  EXPECT_TRUE(saw_null);
}

}  // namespace
}  // namespace tandem::engine::testing
