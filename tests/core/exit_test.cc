// Programs that end with work pending: a few training steps of a conv net
// then exit, and a thread still running inference when the main thread
// exits. Each child (a death test) must exit with its own status, never by
// a signal (Note [Draining at exit] in core/engine/engine.cc). Before the
// exit drain ran ahead of static destruction, such children crashed inside
// oneDNN's JIT kernels now and then; the engine tests check the same rules
// deterministically (tests/core/engine/engine_exit_test.cc).
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <thread>

#include "gtest/gtest.h"

#include "tandem/tandem.h"

namespace tandem {
namespace {

using ::testing::ExitedWithCode;

constexpr int kRuns = 5;

// The CNN of tutorials/02_train_fashion_mnist.cpp.
std::shared_ptr<nn::Module> conv_net() {
  return std::make_shared<nn::Sequential>(
      nn::Conv2d(1, 32, 3, 1, 1), nn::BatchNorm2d(32), nn::ReLU(), nn::MaxPool2d(2),
      nn::Conv2d(32, 64, 3, 1, 1), nn::BatchNorm2d(64), nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(),
      nn::Linear(64 * 7 * 7, 128), nn::ReLU(), nn::Dropout(0.25), nn::Linear(128, 10));
}

// Training steps at batch sizes that change every step, so that oneDNN
// builds kernels for new shapes while the steps are still pending.
void train_then_exit() {
  alarm(60);
  manual_seed(0);
  std::shared_ptr<nn::Module> model = conv_net();
  optim::Adam optimizer(model->parameters(), {.lr = 1e-3});
  for (int64_t step = 0; step < 4; ++step) {
    int64_t batch = 8 * (step + 1);
    std::vector<int64_t> labels(batch);
    for (int64_t i = 0; i < batch; ++i) labels[i] = i % 10;
    Tensor loss = cross_entropy(model->forward(randn({batch, 1, 28, 28})),
                                Tensor::from_vector(labels, {batch}));
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
  }
  std::exit(0);  // Nothing waited for: the steps are still pending.
}

// Inference on a thread nobody joins, which gets the engine's refusal once
// exit begins and then waits for the process to end.
void exit_while_a_thread_infers() {
  alarm(60);
  manual_seed(0);
  std::shared_ptr<nn::Module> model = conv_net();
  model->eval();
  std::thread([model] {
    NoGradGuard no_grad;
    try {
      for (int64_t batch = 1;; batch = batch % 16 + 1) model->forward(randn({batch, 1, 28, 28}));
    } catch (const Error&) {
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  }).detach();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  std::exit(0);
}

class ExitTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

// Verifies that exiting a few training steps in never crashes.
TEST_F(ExitTest, TrainingStepsPendingAtExit) {
  for (int run = 0; run < kRuns; ++run) {
    EXPECT_EXIT(train_then_exit(), ExitedWithCode(0), "") << "run " << run;
  }
}

// Verifies that exiting while another thread still pushes ops never crashes.
TEST_F(ExitTest, ThreadStillPushingAtExit) {
  for (int run = 0; run < kRuns; ++run) {
    EXPECT_EXIT(exit_while_a_thread_infers(), ExitedWithCode(0), "") << "run " << run;
  }
}

// The same with the naive engine, which runs the thread's kernels on the
// thread itself.
TEST_F(ExitTest, ThreadStillPushingAtExitNaive) {
  for (int run = 0; run < kRuns; ++run) {
    EXPECT_EXIT(
        {
          engine::configure(engine::EngineKind::kNaive);
          exit_while_a_thread_infers();
        },
        ExitedWithCode(0), "")
        << "run " << run;
  }
}

}  // namespace
}  // namespace tandem
