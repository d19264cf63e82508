// Ordering: reads after writes, writes after reads, writes after writes, on
// one var and across many, checked by the order of recorded events.
#include <random>

#include "tests/core/engine/engine_test_util.h"

namespace tandem::engine::testing {
namespace {

class EngineOrderTest : public ::testing::TestWithParam<EngineConfig> {
 protected:
  std::unique_ptr<Engine> engine_ = GetParam().make();
  EventLog log_;
};

// Verifies that reads wait for the write before them (read-after-write).
TEST_P(EngineOrderTest, ReadAfterWrite) {
  VarSet v(*engine_, 1);
  engine_->push(logged(log_, 0), Device::cpu(), {}, {v[0]});
  engine_->push(logged(log_, 1), Device::cpu(), {v[0]}, {});
  engine_->push(logged(log_, 2), Device::cpu(), {v[0]}, {});
  engine_->wait_all();
  EXPECT_TRUE(log_.ended_before_began(0, 1));
  EXPECT_TRUE(log_.ended_before_began(0, 2));
}

// Verifies that a write waits for every read before it (write-after-read).
TEST_P(EngineOrderTest, WriteAfterRead) {
  VarSet v(*engine_, 1);
  engine_->push(logged(log_, 0), Device::cpu(), {v[0]}, {});
  engine_->push(logged(log_, 1), Device::cpu(), {v[0]}, {});
  engine_->push(logged(log_, 2), Device::cpu(), {}, {v[0]});
  engine_->wait_all();
  EXPECT_TRUE(log_.ended_before_began(0, 2));
  EXPECT_TRUE(log_.ended_before_began(1, 2));
}

// Verifies that writes to one var run one at a time, in push order.
TEST_P(EngineOrderTest, WriteAfterWrite) {
  VarSet v(*engine_, 1);
  for (int i = 0; i < 20; ++i) {
    engine_->push(logged(log_, i, std::chrono::microseconds(50)), Device::cpu(), {}, {v[0]});
  }
  engine_->wait_all();
  for (int i = 0; i + 1 < 20; ++i) EXPECT_TRUE(log_.ended_before_began(i, i + 1)) << i;
}

// Verifies that a read between two writes sees the first and not the second.
TEST_P(EngineOrderTest, ReadBetweenWritesSeesTheFirst) {
  VarSet v(*engine_, 1);
  int value = 0;
  int seen = -1;
  engine_->push([&](const RunContext&) { value = 1; }, Device::cpu(), {}, {v[0]});
  engine_->push([&](const RunContext&) { seen = value; }, Device::cpu(), {v[0]}, {});
  engine_->push([&](const RunContext&) { value = 2; }, Device::cpu(), {}, {v[0]});
  engine_->wait(v[0]);
  EXPECT_EQ(seen, 1);
  EXPECT_EQ(value, 2);
}

// Verifies that an op with several inputs waits for the writers of all of
// them, and that the reader of its output waits for it.
TEST_P(EngineOrderTest, AcrossManyVars) {
  VarSet v(*engine_, 5);
  for (int i = 0; i < 4; ++i) engine_->push(logged(log_, i), Device::cpu(), {}, {v[i]});
  engine_->push(logged(log_, 10), Device::cpu(), {v[0], v[1], v[2], v[3]}, {v[4]});
  engine_->push(logged(log_, 11), Device::cpu(), {v[4]}, {v[0]});
  engine_->wait_all();
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(log_.ended_before_began(i, 10)) << i;
  EXPECT_TRUE(log_.ended_before_began(10, 11));
}

// Verifies that a var listed twice, or both read and written, is one write.
TEST_P(EngineOrderTest, DuplicateVarsCountOnce) {
  VarSet v(*engine_, 1);
  int value = 0;
  for (int i = 0; i < 100; ++i) {
    engine_->push([&](const RunContext&) { value = value + 1; }, Device::cpu(), {v[0], v[0]},
                  {v[0], v[0]});
  }
  engine_->wait(v[0]);
  EXPECT_EQ(value, 100);
}

// Verifies that a wait sees every write pushed before it, on a long chain of
// dependent ops spread over many vars (each var's value is the sum of its
// inputs, computed afterwards in push order).
TEST_P(EngineOrderTest, WaitSeesAllEarlierWrites) {
  constexpr int kVars = 16;
  constexpr int kOps = 2000;
  VarSet v(*engine_, kVars);
  std::vector<int64_t> actual(kVars, 1);
  std::vector<int64_t> expected(kVars, 1);
  std::mt19937 rng(7);
  for (int i = 0; i < kOps; ++i) {
    int a = rng() % kVars, b = rng() % kVars, out = rng() % kVars;
    expected[out] = (expected[a] * 31 + expected[b] + i) % 1000003;
    engine_->push(
        [&actual, a, b, out, i](const RunContext&) {
          actual[out] = (actual[a] * 31 + actual[b] + i) % 1000003;
        },
        Device::cpu(), {v[a], v[b]}, {v[out]});
  }
  for (int i = 0; i < kVars; ++i) {
    engine_->wait(v[i]);
    EXPECT_EQ(actual[i], expected[i]) << "var " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Engines, EngineOrderTest, ::testing::ValuesIn(all_configs()), config_name);

}  // namespace
}  // namespace tandem::engine::testing
