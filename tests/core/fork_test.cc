// fork() after the parent ran big kernels: the child runs them too, with
// either engine, and gets the parent's results (Note [Engines across fork]
// in core/engine/threaded_engine.cc, Note [OpenMP across fork] in
// kernels/cpu/onednn.cc). Big enough that oneDNN runs them on an OpenMP
// team. A child that hangs is ended by an alarm and fails the test.
#include <sys/wait.h>
#include <unistd.h>

#include <functional>

#include "gtest/gtest.h"

#include "tandem/tandem.h"

namespace tandem {
namespace {

// Runs `body` in a child process; its exit status, or -1 when it did not
// exit normally (a signal, the alarm of a hang).
int status_of_child(const std::function<bool()>& body) {
  pid_t pid = fork();
  if (pid == 0) {
    alarm(30);
    bool ok = false;
    try {
      ok = body();
    } catch (...) {
    }
    _exit(ok ? 0 : 1);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return -1;
  return WEXITSTATUS(status);
}

class ForkTest : public ::testing::TestWithParam<engine::EngineKind> {
 protected:
  void SetUp() override { engine::configure(GetParam()); }
  void TearDown() override { engine::configure(engine::EngineKind::kThreaded); }
};

// Verifies that a 512 x 512 matmul and a convolution give the same values
// in the child as in the parent, and that the parent still runs them after.
TEST_P(ForkTest, BigKernelsRunInTheChild) {
  manual_seed(0);
  Tensor a = randn({512, 512});
  Tensor x = randn({16, 3, 64, 64}), w = randn({32, 3, 3, 3}), bias = zeros({32});
  auto product = [&] { return sum(matmul(a, a)).item<float>(); };
  auto convolution = [&] { return sum(conv2d(x, w, bias, {1, 1}, {1, 1})).item<float>(); };
  const float parent_product = product(), parent_convolution = convolution();
  EXPECT_EQ(status_of_child(
                [&] { return product() == parent_product && convolution() == parent_convolution; }),
            0);
  EXPECT_EQ(product(), parent_product);
  EXPECT_EQ(convolution(), parent_convolution);
}

INSTANTIATE_TEST_SUITE_P(Engines, ForkTest,
                         ::testing::Values(engine::EngineKind::kThreaded,
                                           engine::EngineKind::kNaive),
                         [](const ::testing::TestParamInfo<engine::EngineKind>& info) {
                           return info.param == engine::EngineKind::kNaive ? "naive" : "threaded";
                         });

}  // namespace
}  // namespace tandem
