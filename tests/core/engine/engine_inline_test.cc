// The threaded engine's two frontend-side policies: tiny ops whose vars are
// free run on the pushing thread (Note [Tiny ops run inline]: run_if_free and
// push_tiny), and a pusher
// that runs too far ahead of the workers blocks (Note [Bounded run-ahead]).
#include <atomic>
#include <chrono>

#include "core/tensor.h"
#include "tests/core/engine/engine_test_util.h"

namespace tandem::engine::testing {
namespace {

using ::testing::HasSubstr;

// Waits until `count` reaches `expected` (a thread that is slow to start,
// on a loaded machine), then a little longer, so that a thread that was
// going to run past it has had the time to; returns the count then.
int settled_count(const std::atomic<int>& count, int expected) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (count.load() < expected && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  return count.load();
}

// Pushes an op that writes `var` and runs until `release` is set.
void push_gate(Engine& engine, Var* var, const std::atomic<bool>& release) {
  engine.push(
      [&release](const RunContext&) {
        while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      },
      Device::cpu(), {}, {var}, "gate");
}

// Verifies that a tiny op on free vars has run by the time push_tiny
// returns, on the pushing thread, and says so in its RunContext.
TEST(EngineInlineTest, TinyOpOnFreeVarsRunsOnThePushingThread) {
  auto engine = make_engine(EngineKind::kThreaded, {.cpu_workers = 2});
  VarSet v(*engine, 2);
  std::thread::id ran_on;
  int worker = 0;
  engine->push_tiny(
      [&](const RunContext& context) {
        ran_on = std::this_thread::get_id();
        worker = context.worker;
      },
      Device::cpu(), {v[0]}, {v[1]});
  EXPECT_EQ(ran_on, std::this_thread::get_id());  // No wait: it already ran.
  EXPECT_EQ(worker, RunContext::kPushingThread);
}

// Verifies that a tiny op behind a pending op is queued, not run by the
// pusher, and still runs after that op.
TEST(EngineInlineTest, TinyOpBehindPendingWorkGoesToAWorker) {
  auto engine = make_engine(EngineKind::kThreaded, {.cpu_workers = 1});
  VarSet v(*engine, 2);
  std::atomic<bool> release{false};
  push_gate(*engine, v[0], release);
  EventLog log;
  std::thread::id ran_on;
  engine->push_tiny(
      [&](const RunContext&) {
        ran_on = std::this_thread::get_id();
        log.begin(1);
        log.end(1);
      },
      Device::cpu(), {v[0]}, {v[1]}, "tiny");
  EXPECT_EQ(log.size(), 0u) << "the tiny op ran before the op it reads from";
  release = true;
  engine->wait(v[1]);
  EXPECT_EQ(log.size(), 2u);
  EXPECT_NE(ran_on, std::this_thread::get_id());
}

// Verifies that a tiny op that throws does not throw at push: its failure
// is stored on its outputs and thrown by a wait, as on a worker.
TEST(EngineInlineTest, TinyOpFailureIsDeliveredAtTheWait) {
  auto engine = make_engine(EngineKind::kThreaded, {.cpu_workers = 1});
  VarSet v(*engine, 2);
  EXPECT_NO_THROW(engine->push_tiny([](const RunContext&) { throw Error("tiny kernel failed"); },
                                    Device::cpu(), {}, {v[0]}, "failing_tiny"));
  bool ran = false;
  engine->push_tiny([&](const RunContext&) { ran = true; }, Device::cpu(), {v[0]}, {v[1]},
                    "reader");
  EXPECT_FALSE(ran) << "an op that reads a failed var ran";
  try {
    engine->wait(v[1]);
    ADD_FAILURE() << "the failure was lost";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("tiny kernel failed"));
    EXPECT_THAT(e.what(), HasSubstr("failing_tiny"));
  }
  EXPECT_NO_THROW(engine->wait_all()) << "a failure already thrown by a wait was thrown again";
}

// Verifies that run_if_free claims all of an op's vars or none: with one
// var busy it runs nothing and leaves the vars it had claimed free.
TEST(EngineInlineTest, RunIfFreeClaimsEveryVarOrNone) {
  auto engine = make_engine(EngineKind::kThreaded, {.cpu_workers = 1});
  VarSet v(*engine, 2);
  std::atomic<bool> release{false};
  push_gate(*engine, v[0], release);
  bool ran = false;
  auto mark = [&](const RunContext&) { ran = true; };
  // v[1] is free and claimed first; v[0] is busy, so the claim rolls back.
  EXPECT_FALSE(engine->run_if_free(mark, {v[1]}, {v[0]}, "blocked", {}));
  EXPECT_FALSE(ran);
  EXPECT_TRUE(engine->run_if_free(mark, {}, {v[1]}, "free", {})) << "v[1] was left claimed";
  EXPECT_TRUE(ran);
  release = true;
  engine->wait_all();
}

// Verifies that an inline run shares a var with running reads, and that a
// var both read and written is left to push (which queues it as a write).
TEST(EngineInlineTest, RunIfFreeSharesReadsAndDeclinesReadWrite) {
  auto engine = make_engine(EngineKind::kThreaded, {.cpu_workers = 1});
  VarSet v(*engine, 2);
  std::atomic<bool> reading{false}, release{false};
  engine->push(
      [&](const RunContext&) {
        reading = true;
        while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      },
      Device::cpu(), {v[0]}, {}, "long_read");
  while (!reading) std::this_thread::yield();
  auto nothing = [](const RunContext&) {};
  EXPECT_TRUE(engine->run_if_free(nothing, {v[0]}, {v[1]}, "second_read", {}));
  EXPECT_FALSE(engine->run_if_free(nothing, {v[1]}, {v[1]}, "in_place", {}));
  release = true;
  engine->wait_all();
  int value = 1;
  engine->push_tiny([&](const RunContext&) { value *= 3; }, Device::cpu(), {v[1]}, {v[1]},
                    "in_place");
  engine->wait(v[1]);
  EXPECT_EQ(value, 3);
}

// Verifies that an op pushed behind an inline run while it runs (a kernel
// that frees a tensor pushes such a deletion) starts when the run releases
// its vars.
TEST(EngineInlineTest, RunIfFreeStartsWhatQueuedBehindIt) {
  auto engine = make_engine(EngineKind::kThreaded, {.cpu_workers = 1});
  VarSet v(*engine, 1);
  EventLog log;
  auto outer = [&](const RunContext&) {
    log.begin(1);
    engine->push(
        [&](const RunContext&) {
          log.begin(2);
          log.end(2);
        },
        Device::cpu(), {}, {v[0]}, "behind");
    log.end(1);
  };
  EXPECT_TRUE(engine->run_if_free(outer, {}, {v[0]}, "outer", {}));
  engine->wait(v[0]);
  EXPECT_TRUE(log.ended_before_began(1, 2));
}

// Verifies that the naive engine, which runs every op inside push and
// throws there, leaves tiny ops to push.
TEST(EngineInlineTest, NaiveEngineNeverRunsIfFree) {
  auto engine = make_engine(EngineKind::kNaive);
  VarSet v(*engine, 1);
  EXPECT_FALSE(engine->run_if_free([](const RunContext&) {}, {}, {v[0]}, "op", {}));
}

// Verifies that with max_in_flight set, a pusher blocks once that many ops
// are pending, and resumes when the workers catch up.
TEST(EngineInlineTest, PusherBlocksWhenTooManyOpsArePending) {
  constexpr int64_t kBound = 16;
  auto engine = make_engine(EngineKind::kThreaded, {.cpu_workers = 1, .max_in_flight = kBound});
  VarSet v(*engine, 1);
  std::atomic<bool> release{false};
  std::atomic<int> pushed{0};
  std::atomic<int> ran{0};
  std::thread pusher([&] {
    push_gate(*engine, v[0], release);
    for (int i = 0; i < 10 * kBound; ++i) {
      engine->push([&](const RunContext&) { ++ran; }, Device::cpu(), {}, {v[0]}, "queued");
      ++pushed;
    }
  });
  EXPECT_LE(settled_count(pushed, kBound), kBound) << "the pusher ran past the bound";
  EXPECT_EQ(ran.load(), 0);
  release = true;
  pusher.join();
  engine->wait_all();
  EXPECT_EQ(ran.load(), 10 * kBound);
}

// Verifies that with max_bytes_in_flight set, a pusher blocks once the ops
// pending would write more new memory than that for the first time (vars
// made with bytes, as storages are), resumes when the workers catch up, and
// that rewriting memory already written does not count.
TEST(EngineInlineTest, PusherBlocksWhenTooManyNewBytesArePending) {
  constexpr size_t kMiB = 1 << 20;
  auto engine =
      make_engine(EngineKind::kThreaded,
                  {.cpu_workers = 1, .max_in_flight = 0, .max_bytes_in_flight = 4 * kMiB});
  VarSet gate(*engine, 1);
  std::vector<Var*> fresh;
  for (int i = 0; i < 20; ++i) fresh.push_back(new_var(Device::cpu(), kMiB));
  std::atomic<bool> release{false};
  std::atomic<int> pushed{0};
  std::thread pusher([&] {
    push_gate(*engine, gate[0], release);
    for (Var* var : fresh) {
      engine->push([](const RunContext&) {}, Device::cpu(), {gate[0]}, {var}, "first_write");
      ++pushed;
    }
  });
  // Four MiB pending is at the bound, a fifth is over it: the sixth push waits.
  EXPECT_EQ(settled_count(pushed, 5), 5) << "the pusher did not stop at the byte bound";
  release = true;
  pusher.join();
  engine->wait_all();
  // Rewrites of written memory: none is in flight, so none blocks.
  release = false;
  pushed = 0;
  std::thread rewriter([&] {
    push_gate(*engine, gate[0], release);
    for (int round = 0; round < 5; ++round) {
      for (Var* var : fresh) {
        engine->push([](const RunContext&) {}, Device::cpu(), {gate[0]}, {var}, "rewrite");
        ++pushed;
      }
    }
  });
  EXPECT_EQ(settled_count(pushed, 100), 100) << "rewrites were held back as new memory";
  release = true;
  rewriter.join();
  engine->wait_all();
  for (Var* var : fresh) engine->delete_var(var);
}

// Verifies that a new storage waits, before it allocates, while the ops
// pending are about to write more than max_bytes_in_flight of new memory:
// a frontend that allocates a step's buffers before it pushes the step's
// ops (a replayed graph) waits before holding a second step's memory.
TEST(EngineInlineTest, NewStorageWaitsWhileTooManyBytesArePending) {
  constexpr int64_t kMiB = 1 << 20;
  configure(EngineKind::kThreaded, {.max_in_flight = 0, .max_bytes_in_flight = kMiB});
  std::atomic<bool> release{false};
  Tensor pending = Tensor::empty({2 * kMiB / 4});  // 2 MiB of float32, not yet written.
  current().push(
      [&release](const RunContext&) {
        while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      },
      Device::cpu(), {}, {pending.var()}, "gate");
  std::atomic<int> started{0};
  std::atomic<bool> allocated{false};
  std::thread frontend([&] {
    started = 1;
    Tensor next = Tensor::empty({16});
    allocated = true;
  });
  settled_count(started, 1);
  EXPECT_FALSE(allocated.load()) << "the new storage did not wait";
  release = true;
  frontend.join();
  EXPECT_TRUE(allocated.load());
  current().wait_all();
  configure(EngineKind::kThreaded);
}

// Verifies that an op that pushes ops from inside (as a kernel's closure
// does when it releases the last handle on a tensor and so deletes its var)
// is never held back by the bound: with one worker, blocking it would wait
// for itself.
TEST(EngineInlineTest, BoundNeverBlocksAPushFromInsideAnOp) {
  auto engine = make_engine(EngineKind::kThreaded, {.cpu_workers = 1, .max_in_flight = 2});
  VarSet v(*engine, 2);
  std::atomic<int> ran{0};
  engine->push(
      [&](const RunContext&) {
        for (int i = 0; i < 8; ++i) {
          engine->push([&](const RunContext&) { ++ran; }, Device::cpu(), {}, {v[1]}, "inner");
        }
      },
      Device::cpu(), {}, {v[0]}, "outer");
  engine->wait_all();
  EXPECT_EQ(ran.load(), 8);
}

}  // namespace
}  // namespace tandem::engine::testing
