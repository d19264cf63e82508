// Parallelism: independent ops overlap on two workers; dependent ones never do.
#include <atomic>
#include <chrono>
#include <condition_variable>

#include "core/profiler.h"
#include "tests/core/engine/engine_test_util.h"

namespace tandem::engine::testing {
namespace {

struct Interval {
  int64_t begin_ns = 0;
  int64_t end_ns = 0;
};

bool overlap(const Interval& a, const Interval& b) {
  return a.begin_ns < b.end_ns && b.begin_ns < a.end_ns;
}

// Two parties meet here; each gives up after a timeout, so an engine that
// runs the ops one after the other makes the test fail instead of hang.
class Rendezvous {
 public:
  bool arrive_and_wait(std::chrono::seconds timeout) {
    std::unique_lock lock(mu_);
    ++arrived_;
    cv_.notify_all();
    return cv_.wait_for(lock, timeout, [&] { return arrived_ >= 2; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
};

// Verifies that two ops with no var in common run at the same time on two
// workers: each waits inside its body for the other to start, which can only
// succeed if both are running, and their recorded intervals intersect.
TEST(EngineParallelTest, IndependentOpsOverlapOnTwoWorkers) {
  auto engine = make_engine(EngineKind::kThreaded, {.cpu_workers = 2});
  VarSet v(*engine, 2);
  Rendezvous rendezvous;
  Interval intervals[2];
  std::atomic<int> met{0};
  for (int i = 0; i < 2; ++i) {
    engine->push(
        [&, i](const RunContext&) {
          intervals[i].begin_ns = profiler::now_ns();
          met += rendezvous.arrive_and_wait(std::chrono::seconds(20));
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
          intervals[i].end_ns = profiler::now_ns();
        },
        Device::cpu(), {}, {v[i]}, "long_op");
  }
  engine->wait_all();
  EXPECT_EQ(met, 2) << "the two independent ops never ran at the same time";
  EXPECT_TRUE(overlap(intervals[0], intervals[1]));
}

// Verifies that reads of one var run concurrently too.
TEST(EngineParallelTest, ReadsOfOneVarOverlap) {
  auto engine = make_engine(EngineKind::kThreaded, {.cpu_workers = 2});
  VarSet v(*engine, 3);
  Rendezvous rendezvous;
  std::atomic<int> met{0};
  for (int i = 0; i < 2; ++i) {
    engine->push(
        [&](const RunContext&) { met += rendezvous.arrive_and_wait(std::chrono::seconds(20)); },
        Device::cpu(), {v[0]}, {v[1 + i]}, "reader");
  }
  engine->wait_all();
  EXPECT_EQ(met, 2) << "two readers of one var never ran at the same time";
}

// Verifies that two dependent ops never overlap, even with idle workers.
TEST(EngineParallelTest, DependentOpsNeverOverlap) {
  auto engine = make_engine(EngineKind::kThreaded, {.cpu_workers = 2});
  VarSet v(*engine, 2);
  for (int round = 0; round < 50; ++round) {
    Interval first, second;
    engine->push(
        [&](const RunContext&) {
          first.begin_ns = profiler::now_ns();
          std::this_thread::sleep_for(std::chrono::microseconds(300));
          first.end_ns = profiler::now_ns();
        },
        Device::cpu(), {}, {v[0]});
    engine->push(
        [&](const RunContext&) {
          second.begin_ns = profiler::now_ns();
          second.end_ns = profiler::now_ns();
        },
        Device::cpu(), {v[0]}, {v[1]});
    engine->wait(v[1]);
    EXPECT_LE(first.end_ns, second.begin_ns) << "round " << round;
  }
}

// Verifies that each op runs on a worker thread, never on the pushing one.
TEST(EngineParallelTest, OpsRunOnWorkers) {
  auto engine = make_engine(EngineKind::kThreaded, {.cpu_workers = 2});
  EXPECT_EQ(engine->num_workers(Device::cpu()), 2);
  VarSet v(*engine, 1);
  std::thread::id ran_on;
  int worker = -1;
  engine->push(
      [&](const RunContext& context) {
        ran_on = std::this_thread::get_id();
        worker = context.worker;
      },
      Device::cpu(), {}, {v[0]});
  engine->wait(v[0]);
  EXPECT_NE(ran_on, std::this_thread::get_id());
  EXPECT_GE(worker, 0);
  EXPECT_LT(worker, 2);
}

// Verifies that the naive engine runs the op inside push, on the caller.
TEST(EngineParallelTest, NaiveRunsOnTheCaller) {
  auto engine = make_engine(EngineKind::kNaive);
  VarSet v(*engine, 1);
  std::thread::id ran_on;
  engine->push([&](const RunContext&) { ran_on = std::this_thread::get_id(); }, Device::cpu(), {},
               {v[0]});
  EXPECT_EQ(ran_on, std::this_thread::get_id());  // Already ran: no wait needed.
}

}  // namespace
}  // namespace tandem::engine::testing
