// Exit with work pending: the process-wide engine finishes it before any
// static object is destroyed, and a thread still pushing afterwards gets a
// tandem::Error, never a crash (Note [Draining at exit] in engine.cc).
//
// Each death test runs in a child process that exits with ops pending, after
// constructing a static (as oneDNN builds its JIT kernels, after the engine
// started). An op that runs once that static is destroyed ends the child
// with status 3; a child that hangs is ended by an alarm.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>

#include "tests/core/engine/engine_test_util.h"

namespace tandem::engine::testing {
namespace {

using ::testing::ExitedWithCode;
using ::testing::HasSubstr;
using namespace std::chrono_literals;

// Trivially destructible: still readable while statics are destroyed.
std::atomic<bool> watched_destroyed{false};

struct Watched {
  ~Watched() {
    watched_destroyed = true;
    // Time for an op that would run during static destruction to do so.
    std::this_thread::sleep_for(20ms);
  }
};

// A static constructed now, after the engine started.
void construct_watched_static() { [[maybe_unused]] static Watched watched; }

OpFn check_statics_alive(std::chrono::microseconds busy) {
  return [busy](const RunContext&) {
    std::this_thread::sleep_for(busy);
    if (watched_destroyed) _exit(3);
  };
}

// The start of every child: a hang fails the test within seconds.
void start_child(EngineKind kind) {
  alarm(20);
  configure(kind);
  construct_watched_static();
}

class EngineExitTest : public ::testing::TestWithParam<EngineKind> {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

// Verifies that ops still pending when the main thread exits all run, and
// run before statics constructed after the engine started are destroyed.
TEST_P(EngineExitTest, PendingOpsFinishBeforeStaticsAreDestroyed) {
  EXPECT_EXIT(
      {
        start_child(GetParam());
        Var* var = new_var();
        for (int i = 0; i < 20; ++i) {
          current().push(check_statics_alive(1ms), Device::cpu(), {}, {var}, "pending_at_exit");
        }
        std::exit(0);
      },
      ExitedWithCode(0), "");
}

// Verifies that a detached thread still pushing ops when the main thread
// exits gets a tandem::Error from its push once exit began, and that none of
// its ops runs once statics are destroyed.
TEST_P(EngineExitTest, PushesFromAThreadStillRunningAreRefused) {
  EXPECT_EXIT(
      {
        start_child(GetParam());
        std::thread([] {
          Var* var = new_var();
          try {
            for (;;) {
              current().push(check_statics_alive(100us), Device::cpu(), {}, {var}, "late");
            }
          } catch (const Error&) {
            // The refusal. The thread waits here for the process to end.
          }
          for (;;) std::this_thread::sleep_for(1s);
        }).detach();
        std::this_thread::sleep_for(20ms);
        std::exit(0);
      },
      ExitedWithCode(0), "");
}

// Verifies that an op that calls exit() ends the process instead of waiting
// for itself in the exit drain.
TEST_P(EngineExitTest, ExitFromInsideAnOpDoesNotHang) {
  EXPECT_EXIT(
      {
        start_child(GetParam());
        Var* var = new_var();
        current().push([](const RunContext&) { std::exit(0); }, Device::cpu(), {}, {var}, "exits");
        current().wait(var);
        std::exit(4);  // Not reached: the op exits first.
      },
      ExitedWithCode(0), "");
}

// Verifies the state shutdown_at_exit leaves: pushes are refused with an
// error that says why, data already computed can still be waited for, and
// vars can still be deleted (tensors freed by static destructors).
TEST_P(EngineExitTest, AfterTheExitDrainPushesAreRefusedAndWaitsWork) {
  std::unique_ptr<Engine> engine = make_engine(GetParam());
  Var* var = new_var();
  std::atomic<int> ran{0};
  engine->push([&](const RunContext&) { ++ran; }, Device::cpu(), {}, {var}, "before");
  engine->shutdown_at_exit();
  EXPECT_EQ(ran, 1);
  EXPECT_NO_THROW(engine->wait(var));
  try {
    engine->push([&](const RunContext&) { ++ran; }, Device::cpu(), {}, {var}, "after");
    ADD_FAILURE() << "a push after the exit drain did not throw";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("the process is exiting"));
    EXPECT_EQ(e.op(), "after");
  }
  EXPECT_FALSE(engine->run_if_free([&](const RunContext&) { ++ran; }, {}, {var}, "inline",
                                   std::source_location::current()));
  EXPECT_EQ(ran, 1);
  engine->delete_var(var);
}

INSTANTIATE_TEST_SUITE_P(Engines, EngineExitTest,
                         ::testing::Values(EngineKind::kThreaded, EngineKind::kNaive),
                         [](const ::testing::TestParamInfo<EngineKind>& info) {
                           return info.param == EngineKind::kNaive ? "naive" : "threaded";
                         });

}  // namespace
}  // namespace tandem::engine::testing
