// Stress: several frontend threads push random read/write ops over ~100 vars
// at once; the final state must equal a sequential replay of the program.
//
// Note [Replaying a concurrent program]
// With several pushing threads there is no single program order, so the test
// records the order in which op bodies *started* (an atomic counter) and
// replays the ops sequentially in that order. If the engine is correct, the
// replay computes exactly what happened: two conflicting ops never overlap,
// so the one that started first also finished first and its writes were seen
// by the other; ops that do not conflict commute. If the engine let a reader
// start before its writer finished, or two writers overlap, the replay and
// the real run disagree. The test also checks that each thread's own
// conflicting ops started in the order that thread pushed them.
#include <atomic>
#include <random>
#include <thread>

#include "tests/core/engine/engine_test_util.h"

namespace tandem::engine::testing {
namespace {

#if defined(__SANITIZE_THREAD__)
constexpr int kOpsPerThread = 5'000;  // TSan runs ~10x slower.
#else
constexpr int kOpsPerThread = 25'000;
#endif
constexpr int kThreads = 4;
constexpr int kVars = 100;

struct Op {
  std::vector<int> reads;
  std::vector<int> writes;
};

uint64_t mix(uint64_t h, uint64_t x) {
  h ^= x + 0x9E3779B97F4A7C15ull + (h << 6) + (h >> 2);
  return h * 0xBF58476D1CE4E5B9ull;
}

// What an op does to the values: every write becomes a hash of the op's id,
// everything it reads, and the written var's old value.
void apply(const Op& op, uint64_t id, std::vector<uint64_t>& values) {
  uint64_t h = id;
  for (int r : op.reads) h = mix(h, values[r]);
  for (int w : op.writes) values[w] = mix(h, values[w]);
}

std::vector<Op> random_program(uint32_t seed, int count) {
  std::mt19937 rng(seed);
  std::vector<Op> ops(count);
  for (Op& op : ops) {
    int reads = rng() % 3, writes = 1 + rng() % 2;
    std::vector<int> used;
    auto fresh = [&] {
      for (;;) {
        int v = rng() % kVars;
        if (std::find(used.begin(), used.end(), v) == used.end()) {
          used.push_back(v);
          return v;
        }
      }
    };
    for (int i = 0; i < reads; ++i) op.reads.push_back(fresh());
    for (int i = 0; i < writes; ++i) op.writes.push_back(fresh());
  }
  return ops;
}

class EngineStressTest : public ::testing::TestWithParam<EngineConfig> {};

// Verifies the final state against a sequential replay; see Note [Replaying
// a concurrent program].
TEST_P(EngineStressTest, ConcurrentFrontendsMatchSequentialReplay) {
  auto engine = GetParam().make();
  VarSet vars(*engine, kVars);
  std::vector<uint64_t> values(kVars);
  for (int i = 0; i < kVars; ++i) values[i] = i;
  const std::vector<uint64_t> initial = values;

  std::vector<std::vector<Op>> programs;
  for (int t = 0; t < kThreads; ++t) programs.push_back(random_program(100 + t, kOpsPerThread));
  // started[t][i]: position of thread t's op i in the global start order.
  std::vector<std::vector<int64_t>> started(kThreads, std::vector<int64_t>(kOpsPerThread, -1));
  std::atomic<int64_t> start_counter{0};

  std::vector<std::thread> frontends;
  for (int t = 0; t < kThreads; ++t) {
    frontends.emplace_back([&, t] {
      std::mt19937 rng(7 + t);
      for (int i = 0; i < kOpsPerThread; ++i) {
        const Op& op = programs[t][i];
        std::vector<Var*> reads, writes;
        for (int r : op.reads) reads.push_back(vars[r]);
        for (int w : op.writes) writes.push_back(vars[w]);
        uint64_t id = static_cast<uint64_t>(t) << 32 | static_cast<uint64_t>(i);
        OpFn fn = [&, t, i, id](const RunContext&) {
          started[t][i] = start_counter.fetch_add(1);
          apply(programs[t][i], id, values);
        };
        // Half of them as tiny ops, which may run on this thread at once.
        if (rng() % 2 == 0) {
          engine->push_tiny(std::move(fn), Device::cpu(), reads, writes, "stress_op");
        } else {
          engine->push(std::move(fn), Device::cpu(), reads, writes, "stress_op");
        }
        // Now and then a frontend waits on something, like real code does.
        if (rng() % 1000 == 0) engine->wait(vars[rng() % kVars]);
      }
    });
  }
  for (auto& thread : frontends) thread.join();
  engine->wait_all();

  // Each thread's conflicting ops started in that thread's push order.
  for (int t = 0; t < kThreads; ++t) {
    std::vector<int64_t> last_write(kVars, -1), last_access(kVars, -1);
    for (int i = 0; i < kOpsPerThread; ++i) {
      const Op& op = programs[t][i];
      ASSERT_GE(started[t][i], 0) << "op never ran";
      for (int r : op.reads) ASSERT_LT(last_write[r], started[t][i]) << "thread " << t;
      for (int w : op.writes) ASSERT_LT(last_access[w], started[t][i]) << "thread " << t;
      for (int r : op.reads) last_access[r] = std::max(last_access[r], started[t][i]);
      for (int w : op.writes) last_write[w] = last_access[w] = started[t][i];
    }
  }

  // Replay sequentially in start order.
  std::vector<std::pair<int64_t, std::pair<int, int>>> order;
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kOpsPerThread; ++i) order.push_back({started[t][i], {t, i}});
  }
  std::sort(order.begin(), order.end());
  std::vector<uint64_t> replay = initial;
  for (const auto& [position, op] : order) {
    auto [t, i] = op;
    apply(programs[t][i], static_cast<uint64_t>(t) << 32 | static_cast<uint64_t>(i), replay);
  }
  EXPECT_EQ(values, replay);
}

INSTANTIATE_TEST_SUITE_P(Engines, EngineStressTest, ::testing::ValuesIn(all_configs()),
                         config_name);

}  // namespace
}  // namespace tandem::engine::testing
