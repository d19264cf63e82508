// fork() with engines running: the child's ops run, the parent keeps
// working, ops pending at the fork finish first, and a fork from inside an
// op leaves the child a clear error (Note [Engines across fork] in
// threaded_engine.cc). Every child ends itself with _exit, and an alarm
// turns a hang into a failure.
//
// Not under ThreadSanitizer: it refuses to start threads in a child forked
// from a threaded process, which is what the engine does.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>

#include "tests/core/engine/engine_test_util.h"

namespace tandem::engine::testing {
namespace {

using ::testing::HasSubstr;

// Runs `body` in a child process and returns its exit status, or -1 when
// it did not exit normally (a signal, the alarm of a hang).
int status_of_child(const std::function<int()>& body) {
  pid_t pid = fork();
  if (pid == 0) {
    alarm(20);
    int status = 1;
    try {
      status = body();
    } catch (...) {
      status = 2;
    }
    _exit(status);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

class EngineForkTest : public ::testing::TestWithParam<EngineConfig> {
 protected:
  void SetUp() override {
#if defined(__SANITIZE_THREAD__)
    GTEST_SKIP() << "ThreadSanitizer does not start threads in a forked child";
#endif
  }
  std::unique_ptr<Engine> engine_ = GetParam().make();
};

// Verifies that the child runs ops on data the parent computed, and that
// the parent's engine still runs ops after the fork.
TEST_P(EngineForkTest, ChildAndParentBothRunOps) {
  VarSet v(*engine_, 2);
  int value = 0;
  engine_->push([&](const RunContext&) { value = 1; }, Device::cpu(), {}, {v[0]}, "parent");
  engine_->wait(v[0]);
  EXPECT_EQ(status_of_child([&] {
              engine_->push([&](const RunContext&) { value += 10; }, Device::cpu(), {v[0]}, {v[1]},
                            "child");
              engine_->wait(v[1]);
              return value == 11 ? 0 : 1;
            }),
            0);
  engine_->push([&](const RunContext&) { value += 100; }, Device::cpu(), {v[0]}, {v[1]},
                "parent_after_fork");
  engine_->wait(v[1]);
  EXPECT_EQ(value, 101);
}

// Verifies that ops pending when fork() is called finish before it returns,
// in the parent and (their results copied) in the child.
TEST_P(EngineForkTest, PendingOpsFinishBeforeTheFork) {
  VarSet v(*engine_, 1);
  std::atomic<int> done{0};
  for (int i = 0; i < 10; ++i) {
    engine_->push(
        [&](const RunContext&) {
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
          ++done;
        },
        Device::cpu(), {}, {v[0]}, "pending_at_fork");
  }
  EXPECT_EQ(status_of_child([&] { return done == 10 ? 0 : 1; }), 0);
  EXPECT_EQ(done, 10);
}

// Verifies that a fork from inside an op leaves a child whose engine refuses
// ops with an error that says why, and a parent that works on.
TEST_P(EngineForkTest, ForkInsideAnOpLeavesTheChildAClearError) {
  if (GetParam().kind == EngineKind::kNaive) GTEST_SKIP() << "no worker to fork from";
  VarSet v(*engine_, 2);
  int child_status = -2;
  engine_->push(
      [&](const RunContext&) {
        child_status = status_of_child([&] {
          try {
            engine_->push([](const RunContext&) {}, Device::cpu(), {}, {v[1]}, "in_child");
          } catch (const Error& e) {
            return e.message().find("forked from inside an op") != std::string::npos ? 0 : 3;
          }
          return 4;
        });
      },
      Device::cpu(), {}, {v[0]}, "forks");
  engine_->wait(v[0]);
  EXPECT_EQ(child_status, 0);
  std::atomic<int> ran{0};
  engine_->push([&](const RunContext&) { ++ran; }, Device::cpu(), {}, {v[1]}, "after");
  engine_->wait(v[1]);
  EXPECT_EQ(ran, 1);
}

INSTANTIATE_TEST_SUITE_P(Engines, EngineForkTest, ::testing::ValuesIn(all_configs()), config_name);

}  // namespace
}  // namespace tandem::engine::testing
