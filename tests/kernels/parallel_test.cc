// parallel_for (kernels/cpu/parallel.h), its place in the thread budget, and
// the elementwise kernels that split over the cores with it: on tensors far
// above the split threshold they must give exactly what one sequential loop
// gives.
#include "kernels/cpu/parallel.h"

#include <omp.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

#include "core/tensor.h"
#include "kernels/dispatch.h"
#include "kernels/thread_budget.h"

namespace tandem::kernels {
namespace {

// Counts how often parallel_for hands out each index of [0, n), and whether
// any range was empty or out of bounds.
struct Coverage {
  explicit Coverage(int64_t n) : hits(n) {}
  void run(int64_t grain) {
    int64_t n = static_cast<int64_t>(hits.size());
    parallel_for(n, grain, [&](int64_t begin, int64_t end) {
      if (begin < 0 || begin >= end || end > n) bad_range = true;
      for (int64_t i = begin; i < end && i < n; ++i) hits[i].fetch_add(1);
    });
  }
  // The first index not handed out exactly once, or -1.
  int64_t first_miss() const {
    for (size_t i = 0; i < hits.size(); ++i) {
      if (hits[i].load() != 1) return static_cast<int64_t>(i);
    }
    return -1;
  }
  std::vector<std::atomic<int>> hits;
  std::atomic<bool> bad_range{false};
};

// Verifies that the ranges are non-empty and cover [0, n) exactly once, for
// sizes around every split point (inline, two ranges, ranges not a multiple
// of the alignment).
TEST(ParallelForTest, CoversEveryIndexOnce) {
  for (int64_t grain :
       {int64_t{1}, int64_t{7}, int64_t{16}, int64_t{1000}, kCostlyGrain, kCheapGrain}) {
    for (int64_t n : {0, 1, 2, 15, 17, 31, 33, 999, 2000, 2001, 8193, 65537, 100003}) {
      Coverage coverage(n);
      coverage.run(grain);
      EXPECT_FALSE(coverage.bad_range) << "n=" << n << " grain=" << grain;
      EXPECT_EQ(coverage.first_miss(), -1) << "n=" << n << " grain=" << grain;
    }
  }
}

// Verifies that a parallel_for called from inside another one runs inline
// instead of nesting a parallel region or waiting for the lock its caller
// holds.
TEST(ParallelForTest, NestedCallRunsInline) {
  constexpr int64_t kOuter = 4, kInner = 50'000;
  std::vector<std::atomic<int>> hits(kOuter * kInner);
  parallel_for(kOuter, 1, [&](int64_t begin, int64_t end) {
    for (int64_t o = begin; o < end; ++o) {
      parallel_for(kInner, 16, [&](int64_t b, int64_t e) {
        EXPECT_EQ(b, 0);
        EXPECT_EQ(e, kInner);
        for (int64_t i = b; i < e; ++i) hits[o * kInner + i].fetch_add(1);
      });
    }
  });
  for (const auto& hit : hits) ASSERT_EQ(hit.load(), 1);
}

// Verifies that a kernel holding the all-cores lock (as a uses_all_cores
// kernel does under dispatch) can still call parallel_for: the lock is
// re-entrant, so this does not deadlock.
TEST(ParallelForTest, CallUnderAllCoresLockDoesNotDeadlock) {
  AllCoresLock outer;
  AllCoresLock inner;
  Coverage coverage(1'000'003);
  coverage.run(kCheapGrain);
  EXPECT_EQ(coverage.first_miss(), -1);
}

// Verifies that a parallel_for large enough to split waits while another
// thread holds the all-cores lock (Note [Thread budget]: one kernel on all
// cores at a time), and runs once it is released.
TEST(ParallelForTest, SplitWaitsForAllCoresLock) {
  if (omp_get_max_threads() < 2) GTEST_SKIP() << "one OpenMP thread: parallel_for never splits";
  std::atomic<bool> done{false};
  std::thread other;
  {
    AllCoresLock lock;
    other = std::thread([&] {
      Coverage coverage(1'000'000);
      coverage.run(kCheapGrain);
      done = true;
    });
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_FALSE(done) << "parallel_for split while another thread held the lock";
  }
  other.join();
  EXPECT_TRUE(done);
}

// Verifies that an exception from one range reaches the caller, after every
// range has finished.
TEST(ParallelForTest, RethrowsExceptionFromBody) {
  std::atomic<int64_t> done{0};
  EXPECT_THROW(parallel_for(1'000'000, 1000,
                            [&](int64_t begin, int64_t end) {
                              if (begin == 0) throw std::runtime_error("range 0 failed");
                              done += end - begin;
                            }),
               std::runtime_error);
  // The loop still works afterwards (the lock was released).
  Coverage coverage(100'000);
  coverage.run(1000);
  EXPECT_EQ(coverage.first_miss(), -1);
}

// Verifies that parallel_for calls from two threads at once each cover their
// own range.
TEST(ParallelForTest, ConcurrentCallsFromTwoThreads) {
  Coverage first(1'000'003), second(999'999);
  std::thread t1([&] {
    for (int i = 0; i < 5; ++i) first.run(kCheapGrain);
  });
  std::thread t2([&] {
    for (int i = 0; i < 5; ++i) second.run(kCostlyGrain);
  });
  t1.join();
  t2.join();
  for (const Coverage* c : {&first, &second}) {
    for (const auto& hit : c->hits) ASSERT_EQ(hit.load(), 5);
  }
}

// Elementwise kernels on large tensors against plain sequential loops.

// Deterministic values in [-2, 2), none zero (safe divisors), with repeats
// that exercise ties in maximum and the comparisons.
std::vector<float> values(int64_t n, int seed) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) {
    v[i] = static_cast<float>((i * 7919 + seed * 104729) % 4001 - 2000) / 1000.0f + 1e-4f;
  }
  return v;
}

// The broadcast index of output element `i` into an operand of `shape`,
// computed from scratch (the kernel under test walks incrementally).
int64_t source_index(int64_t i, const Shape& out, const Shape& shape) {
  int64_t index = 0, stride = 1;
  for (int axis = out.rank() - 1; axis >= 0; --axis) {
    int64_t coordinate = i % out[axis];
    i /= out[axis];
    int in_axis = axis - (out.rank() - shape.rank());
    if (in_axis < 0) break;
    if (shape[in_axis] != 1) index += coordinate * stride;
    stride *= shape[in_axis];
  }
  return index;
}

struct BinaryCase {
  Shape a, b, out;
};

// add, mul, sub, div and maximum over large broadcast shapes equal the
// sequential loop bit for bit; lt gives the same booleans.
TEST(ParallelElementwiseTest, BinaryOpsMatchSequentialLoopExactly) {
  std::vector<BinaryCase> cases = {
      {{1'000'003}, {1'000'003}, {1'000'003}},               // Same shape, odd size.
      {{1'000'003}, {}, {1'000'003}},                        // Scalar right.
      {{}, {999'999}, {999'999}},                            // Scalar left.
      {{1, 1'000'001}, {1'000'001}, {1, 1'000'001}},         // Flat despite shapes.
      {{1001, 999}, {999}, {1001, 999}},                     // Row broadcast.
      {{1001, 1}, {1, 999}, {1001, 999}},                    // Outer product.
      {{3, 1, 257, 511}, {1, 5, 257, 1}, {3, 5, 257, 511}},  // Both, inner stride 0.
      {{200'003, 3}, {3}, {200'003, 3}},                     // Rows shorter than a grain.
      {{7, 1, 1001}, {1, 143, 1001}, {7, 143, 1001}},        // Stride 0 along axis -2.
  };
  struct Op {
    const char* name;
    std::function<float(float, float)> f;
  };
  std::vector<Op> ops = {{"add", [](float x, float y) { return x + y; }},
                         {"mul", [](float x, float y) { return x * y; }},
                         {"sub", [](float x, float y) { return x - y; }},
                         {"div", [](float x, float y) { return x / y; }},
                         {"maximum", [](float x, float y) { return x > y ? x : y; }}};
  for (const BinaryCase& c : cases) {
    std::vector<float> va = values(c.a.numel(), 1), vb = values(c.b.numel(), 2);
    Tensor a = Tensor::from_vector<float>(va, c.a);
    Tensor b = Tensor::from_vector<float>(vb, c.b);
    std::vector<int64_t> ia(c.out.numel()), ib(c.out.numel());
    for (int64_t i = 0; i < c.out.numel(); ++i) {
      ia[i] = source_index(i, c.out, c.a);
      ib[i] = source_index(i, c.out, c.b);
    }
    for (const Op& op : ops) {
      Tensor y = call1(op.name, {a, b});
      ASSERT_EQ(y.shape(), c.out);
      std::vector<float> got = y.to_vector<float>();
      for (int64_t i = 0; i < c.out.numel(); ++i) {
        float want = op.f(va[ia[i]], vb[ib[i]]);
        ASSERT_EQ(std::memcmp(&got[i], &want, sizeof(float)), 0)
            << op.name << " " << c.a.to_string() << " " << c.b.to_string() << " at " << i
            << ": got " << got[i] << ", want " << want;
      }
    }
    std::vector<bool> less = call1("lt", {a, b}).to_vector<bool>();
    for (int64_t i = 0; i < c.out.numel(); ++i) {
      ASSERT_EQ(less[i], va[ia[i]] < vb[ib[i]]) << "lt " << c.a.to_string() << " at " << i;
    }
  }
}

// Integer arithmetic takes the same split loops.
TEST(ParallelElementwiseTest, Int32AddMatchesSequentialLoop) {
  constexpr int64_t kN = 1'000'001;
  std::vector<int32_t> va(kN), vb(kN);
  for (int64_t i = 0; i < kN; ++i) {
    va[i] = static_cast<int32_t>(i * 31 - 7);
    vb[i] = static_cast<int32_t>(-i * 3);
  }
  std::vector<int32_t> got =
      call1("add", {Tensor::from_vector<int32_t>(va, {kN}), Tensor::from_vector<int32_t>(vb, {kN})})
          .to_vector<int32_t>();
  for (int64_t i = 0; i < kN; ++i) ASSERT_EQ(got[i], va[i] + vb[i]) << "at " << i;
}

// Unary ops, cheap and costly (a smaller grain), and cast and where.
TEST(ParallelElementwiseTest, UnaryOpsMatchSequentialLoop) {
  constexpr int64_t kN = 1'000'001;
  std::vector<float> v = values(kN, 3);
  Tensor x = Tensor::from_vector<float>(v, {kN});
  struct Op {
    const char* name;
    std::function<float(float)> f;
  };
  std::vector<Op> ops = {
      {"neg", [](float t) { return -t; }},
      {"relu", [](float t) { return t > 0 ? t : 0.0f; }},
      {"exp", [](float t) { return std::exp(t); }},
      {"tanh", [](float t) { return std::tanh(t); }},
      {"gelu", [](float t) { return t * 0.5f * (1.0f + std::erf(t * 0.70710678f)); }},
  };
  for (const Op& op : ops) {
    std::vector<float> got = call1(op.name, {x}).to_vector<float>();
    for (int64_t i = 0; i < kN; ++i) {
      float want = op.f(v[i]);
      ASSERT_NEAR(got[i], want, 1e-6f * (1 + std::abs(want))) << op.name << " at " << i;
    }
  }
  std::vector<int32_t> truncated =
      call1("cast", {x}, {{"dtype", DType::kInt32}}).to_vector<int32_t>();
  for (int64_t i = 0; i < kN; ++i) ASSERT_EQ(truncated[i], static_cast<int32_t>(v[i]));
}

// where over broadcast operands: a [1001, 999] condition, a [999] row and a
// scalar.
TEST(ParallelElementwiseTest, WhereMatchesSequentialLoop) {
  constexpr int64_t kRows = 1001, kCols = 999;
  std::vector<float> va = values(kCols, 4);
  std::vector<bool> vc(kRows * kCols);
  for (int64_t i = 0; i < kRows * kCols; ++i) vc[i] = (i % 3 == 0) != (i % 7 == 0);
  Tensor cond = Tensor::from_vector(vc, {kRows, kCols});
  Tensor a = Tensor::from_vector<float>(va, {kCols});
  Tensor b = Tensor::from_vector<float>({-1.5f}, {});
  std::vector<float> got = call1("where", {cond, a, b}).to_vector<float>();
  for (int64_t i = 0; i < kRows * kCols; ++i) {
    ASSERT_EQ(got[i], vc[i] ? va[i % kCols] : -1.5f) << "at " << i;
  }
}

// Two large ops pushed from two threads at once (so that both may reach the
// engine's workers together and one waits for the all-cores lock) both give
// the sequential result.
TEST(ParallelElementwiseTest, ConcurrentLargeOpsFromTwoThreads) {
  constexpr int64_t kN = 2'000'003;
  std::vector<float> va = values(kN, 5), vb = values(kN, 6);
  Tensor a = Tensor::from_vector<float>(va, {kN});
  Tensor b = Tensor::from_vector<float>(vb, {kN});
  std::vector<float> sum, product;
  std::thread t1([&] {
    for (int i = 0; i < 3; ++i) sum = call1("add", {a, b}).to_vector<float>();
  });
  std::thread t2([&] {
    for (int i = 0; i < 3; ++i) product = call1("mul", {a, b}).to_vector<float>();
  });
  t1.join();
  t2.join();
  for (int64_t i = 0; i < kN; ++i) {
    ASSERT_EQ(sum[i], va[i] + vb[i]) << "at " << i;
    ASSERT_EQ(product[i], va[i] * vb[i]) << "at " << i;
  }
}

}  // namespace
}  // namespace tandem::kernels
