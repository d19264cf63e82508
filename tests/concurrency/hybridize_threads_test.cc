// Concurrency contracts of the user API, run in every build and under
// ThreadSanitizer (tools/tandem.sh test, step tsan): calls of one hybridized
// function or module from several threads (eager/hybridize.h). Under TSan,
// run with OMP_NUM_THREADS=1 as CI does: GNU OpenMP's runtime is not
// instrumented, so TSan reports races inside any parallel kernel.
#include <atomic>
#include <cmath>
#include <memory>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

#include "eager/autograd.h"
#include "eager/hybridize.h"
#include "eager/nn/nn.h"
#include "eager/ops.h"

namespace tandem {
namespace {

// Verifies that one function called from several threads while it keeps
// retracing (more shapes than its cache holds) gives every call its own
// right answer: calls take turns on the cache (Note [Calls from several
// threads] in eager/hybridize.cc). Before the lock, replays ran on graphs
// another thread had just evicted.
TEST(HybridizeThreadsTest, CallsWhileRetracing) {
  auto f = hybridize(
      [](const std::vector<Tensor>& in) {
        return std::vector<Tensor>{add(mul(tanh(in[0]), 2.0), in[0])};
      },
      {.cache_size = 2, .warn_after_traces = 0});
  constexpr int kThreads = 4, kCalls = 1000;
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int c = 0; c < kCalls; ++c) {
        const int64_t n = 1 + (t + c) % 5;  // Five shapes, two cached.
        std::vector<float> x(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i)
          x[static_cast<size_t>(i)] = 0.1f * static_cast<float>(t - i);
        std::vector<float> y = f({Tensor::from_vector<float>(x, {n})})[0].to_vector<float>();
        for (int64_t i = 0; i < n; ++i) {
          const float v = x[static_cast<size_t>(i)];
          if (std::abs(y[static_cast<size_t>(i)] - (2 * std::tanh(v) + v)) > 1e-5f) ++wrong;
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(f.stats().traces + f.stats().replays, kThreads * kCalls);
  EXPECT_GT(f.stats().traces, 5);  // It did retrace, evicting graphs in use.
}

// Verifies the same through a hybridized module serving inference.
TEST(HybridizeThreadsTest, ModuleServesInference) {
  // Products small enough to stay on one thread: TSan cannot see the
  // synchronization inside OpenMP's runtime, which larger ones use.
  auto model = std::make_shared<nn::Sequential>(nn::Linear(8, 8), nn::ReLU(), nn::Linear(8, 4));
  model->eval();
  NoGradGuard no_grad;
  std::vector<Tensor> xs, want;
  for (int64_t n = 1; n <= 4; ++n) {
    xs.push_back(randn({n, 8}));
    want.push_back(model->forward(xs.back()));
  }
  model->hybridize(true, {.cache_size = 2, .warn_after_traces = 0});
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      NoGradGuard thread_no_grad;  // Grad mode is per thread.
      for (int c = 0; c < 30; ++c) {
        const size_t k = static_cast<size_t>(t + c) % xs.size();
        std::vector<float> got = (*model)(xs[k]).to_vector<float>();
        std::vector<float> expected = want[k].to_vector<float>();
        for (size_t i = 0; i < got.size(); ++i) {
          if (std::abs(got[i] - expected[i]) > 1e-5f * (1 + std::abs(expected[i]))) ++wrong;
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0);
}

}  // namespace
}  // namespace tandem
