// The push path allocates nothing in a steady state: op records, dependency
// blocks and vars come from pools, var lists and closures are stored inline.
// This executable counts every operator new to check it.
#include <atomic>
#include <cstdlib>
#include <new>
#include <vector>

#include "tests/core/engine/engine_test_util.h"

namespace {
std::atomic<int64_t> allocations{0};
void* volatile probe_sink;  // Keeps the probe allocation from being optimized out.
}  // namespace

void* operator new(size_t size) {
  allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size ? size : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace tandem::engine::testing {
namespace {

class EngineAllocationTest : public ::testing::TestWithParam<EngineConfig> {};

// Verifies that 10^4 pushes of ops with a small closure, after a warm-up,
// make (almost) no heap allocation; what remains is the pools growing when
// the threads' caches happen to be uneven, a few times per 10^4 ops.
TEST_P(EngineAllocationTest, PushAllocatesNothingInSteadyState) {
  // Before the engine exists: its workers allocate as they start (their
  // names), which would race with this probe.
  int64_t probe = allocations.load();
  std::vector<int> counted(10);
  probe_sink = counted.data();
  ASSERT_EQ(allocations.load() - probe, 1) << "operator new is not being counted";

  auto engine = GetParam().make();
  VarSet v(*engine, 8);
  int64_t sink[8] = {};
  auto push_round = [&](int ops) {
    for (int i = 0; i < ops; ++i) {
      int a = i % 8, b = (i * 3 + 1) % 8;
      engine->push([&sink, a, b](const RunContext&) { sink[b] += sink[a]; }, Device::cpu(), {v[a]},
                   {v[b]}, "small_op");
    }
    engine->wait_all();
  };
  push_round(20'000);  // Warm-up: pools and queues reach their working size.
  // A pool grows only when the number of ops in flight reaches a new high,
  // which a loaded machine (workers descheduled while the frontend pushes)
  // can cause after the warm-up; it cannot keep happening. So steady state
  // means: some round of 10^4 pushes allocates (almost) nothing.
  int64_t during = 0;
  for (int round = 0; round < 5; ++round) {
    int64_t before = allocations.load();
    push_round(10'000);
    during = allocations.load() - before;
    if (during < 100) break;
  }
  EXPECT_LT(during, 100) << during << " heap allocations for 10^4 pushes, in each of 5 rounds";
  RecordProperty("allocations", static_cast<int>(during));
}

INSTANTIATE_TEST_SUITE_P(Engines, EngineAllocationTest, ::testing::ValuesIn(all_configs()),
                         config_name);

}  // namespace
}  // namespace tandem::engine::testing
