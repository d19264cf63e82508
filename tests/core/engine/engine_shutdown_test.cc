// Shutdown with pending work: finish it or cancel it, cleanly, without
// leaks (the AddressSanitizer run checks the "without leaks" part); and the
// deletion of vars that ops still use.
#include <atomic>
#include <chrono>

#include "tests/core/engine/engine_test_util.h"

namespace tandem::engine::testing {
namespace {

using ::testing::HasSubstr;

constexpr int kPendingOps = 10'000;

// Pushes kPendingOps ops in chains over a few vars; the first op of each
// chain blocks until `release` is set, so all of them are pending at once.
void push_pending_work(Engine& engine, const VarSet& vars, std::atomic<int>& ran,
                       std::atomic<bool>& release) {
  for (size_t v = 0; v < vars.size(); ++v) {
    engine.push(
        [&](const RunContext&) {
          while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        },
        Device::cpu(), {}, {vars[v]}, "gate");
  }
  for (int i = 0; i < kPendingOps; ++i) {
    engine.push([&](const RunContext&) { ++ran; }, Device::cpu(), {}, {vars[i % vars.size()]},
                "pending");
  }
}

// Verifies that destroying an engine runs every pending op first.
TEST(EngineShutdownTest, DestructionFinishesPendingOps) {
  std::atomic<int> ran{0};
  std::atomic<bool> release{false};
  // Unbounded: every op is pushed before the gates open.
  auto engine = make_engine(EngineKind::kThreaded, {.cpu_workers = 2, .max_in_flight = 0});
  std::vector<Var*> vars;
  for (int i = 0; i < 4; ++i) vars.push_back(new_var());
  for (Var* var : vars) {
    engine->push(
        [&](const RunContext&) {
          while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        },
        Device::cpu(), {}, {var}, "gate");
  }
  for (int i = 0; i < kPendingOps; ++i) {
    engine->push([&](const RunContext&) { ++ran; }, Device::cpu(), {}, {vars[i % 4]}, "pending");
  }
  for (Var* var : vars) engine->delete_var(var);  // Deferred behind the pending ops.
  release = true;
  engine.reset();  // With ~10^4 ops still queued.
  EXPECT_EQ(ran, kPendingOps);
}

// Verifies that shutdown(kCancel) skips ops that have not started, fails
// their vars as cancelled, runs no kernel after it returns, and that the
// engine refuses new work afterwards.
TEST(EngineShutdownTest, CancelSkipsPendingOps) {
  auto engine = make_engine(EngineKind::kThreaded, {.cpu_workers = 2, .max_in_flight = 0});
  std::atomic<int> ran{0};
  std::atomic<bool> release{false};
  VarSet vars(*engine, 4);
  push_pending_work(*engine, vars, ran, release);
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    release = true;
  });
  engine->shutdown(ShutdownMode::kCancel);
  releaser.join();
  int ran_at_shutdown = ran;
  EXPECT_LT(ran_at_shutdown, kPendingOps) << "nothing was cancelled";
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(ran, ran_at_shutdown) << "a kernel ran after shutdown returned";
  try {
    engine->wait(vars[0]);
    ADD_FAILURE() << "a var whose writer was cancelled is not failed";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("cancelled"));
  }
  try {
    engine->push([](const RunContext&) {}, Device::cpu(), {}, {vars[0]}, "late");
    ADD_FAILURE() << "push after shutdown did not throw";
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), HasSubstr("shut down"));
  }
  // The other cancellations are failures too, which wait_all reports.
  EXPECT_THROW(engine->wait_all(), Error);
}

// Verifies that deleting a var that ops still use waits for them: the
// deleter runs after the last of them.
TEST(EngineShutdownTest, DeleteVarWaitsForPendingOps) {
  auto engine = make_engine(EngineKind::kThreaded, {.cpu_workers = 2});
  Var* var = new_var();
  EventLog log;
  for (int i = 0; i < 5; ++i) engine->push(logged(log, i), Device::cpu(), {var}, {});
  engine->push(logged(log, 5), Device::cpu(), {}, {var});
  engine->delete_var(var, [&](const RunContext&) {
    log.begin(100);
    log.end(100);
  });
  engine->wait_all();
  for (int i = 0; i < 6; ++i) EXPECT_TRUE(log.ended_before_began(i, 100)) << i;
}

}  // namespace
}  // namespace tandem::engine::testing
