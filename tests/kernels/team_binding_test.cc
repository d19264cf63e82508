// Note [Binding the team to cores] (kernels/cpu/team_binding.h): which
// threads get pinned, to which CPUs, and the switches that leave them alone.
// Each case runs on a fresh thread, since binding happens once per thread and
// OpenMP keeps one team of helpers per thread that starts a region.
#include "kernels/cpu/team_binding.h"

#include <omp.h>
#include <pthread.h>
#include <sched.h>

#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/engine/engine.h"
#include "core/error.h"
#include "kernels/cpu/parallel.h"
#include "kernels/dispatch.h"
#include "tests/kernels/op_test_util.h"
#include "tests/scoped_env.h"

namespace tandem::kernels {
namespace {

using tandem::testing::ScopedEnv;
using ::testing::HasSubstr;
using testing::random_tensor;

// Runs bind_team_to_cores(worker) on a fresh thread, then one parallel
// region there, and returns the CPUs each OpenMP thread of it may run on,
// by thread number.
std::map<int, std::vector<int>> team_cpus_after_binding(int worker) {
  std::map<int, std::vector<int>> team;
  std::thread([&] {
    bind_team_to_cores(worker);
    std::mutex mu;
    const int threads = omp_get_max_threads();
    parallel_for(threads, 1, [&](int64_t, int64_t) {
      std::vector<int> cpus = cpus_of_this_thread();
      std::lock_guard lock(mu);
      team[omp_get_thread_num()] = cpus;
    });
  }).join();
  return team;
}

class TeamBindingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (allowed_.size() < 2) GTEST_SKIP() << "the process may run on one CPU only";
    if (!team_binding_enabled()) {
      GTEST_SKIP() << "binding is off here (TANDEM_BIND_THREADS=0, OMP_PROC_BIND or OMP_PLACES)";
    }
  }
  const std::vector<int> allowed_ = cpus_of_this_thread();
};

// Verifies that worker w's OpenMP thread t is pinned to allowed CPU
// (w + t) mod n, one CPU each.
TEST_F(TeamBindingTest, WorkerAndHelpersGetOneCpuEach) {
  for (int worker : {0, 1}) {
    std::map<int, std::vector<int>> team = team_cpus_after_binding(worker);
    ASSERT_FALSE(team.empty());
    for (const auto& [thread, cpus] : team) {
      EXPECT_EQ(cpus, std::vector<int>{allowed_[(worker + thread) % allowed_.size()]})
          << "worker " << worker << ", OpenMP thread " << thread;
    }
  }
}

// Verifies that a kernel run by the thread that pushed it (the naive engine,
// tiny ops) leaves that user thread and its team unbound.
TEST_F(TeamBindingTest, PushingThreadStaysUnbound) {
  for (const auto& [thread, cpus] : team_cpus_after_binding(engine::RunContext::kPushingThread)) {
    EXPECT_EQ(cpus, allowed_) << "OpenMP thread " << thread;
  }
}

// Verifies that the engine's worker is bound once it has run an all-cores
// kernel, and that the thread that pushed it is not.
TEST_F(TeamBindingTest, EngineWorkerIsBoundByAnAllCoresKernel) {
  engine::configure(engine::EngineKind::kThreaded, {.cpu_workers = 1});  // A fresh worker.
  Tensor a = random_tensor({128, 128}, 1, -1, 1, DType::kFloat32);
  Tensor product = call("matmul", {a, a})[0];
  product.wait_to_read();
  std::vector<int> worker_cpus;
  engine::current().push([&](const engine::RunContext&) { worker_cpus = cpus_of_this_thread(); },
                         Device::cpu(), {}, {}, "read_affinity");
  engine::current().wait_all();
  EXPECT_EQ(worker_cpus, std::vector<int>{allowed_[0]});
  EXPECT_EQ(cpus_of_this_thread(), allowed_);
}

// Verifies Note [A team no larger than its CPUs]: a worker whose mask has
// narrowed to one CPU since the process started runs teams of one thread,
// unless OMP_NUM_THREADS says otherwise.
TEST_F(TeamBindingTest, ATeamShrinksToItsWorkersCpus) {
  if (omp_get_max_threads() < 2) GTEST_SKIP() << "OpenMP runs one thread here anyway";
  for (const char* user_choice : {static_cast<const char*>(nullptr), "2"}) {
    ScopedEnv threads_variable("OMP_NUM_THREADS", user_choice);
    int before = 0, after = 0;
    std::thread([&] {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(allowed_[1], &one);
      ASSERT_EQ(pthread_setaffinity_np(pthread_self(), sizeof one, &one), 0);
      before = omp_get_max_threads();
      bind_team_to_cores(0);
      after = omp_get_max_threads();
    }).join();
    EXPECT_EQ(after, user_choice == nullptr ? 1 : before) << "OMP_NUM_THREADS " << user_choice;
  }
}

// Verifies the switches: TANDEM_BIND_THREADS=0 and OpenMP's own placement
// variables turn binding off, and a value that is not a switch is an error
// that names the variable.
TEST(TeamBindingSwitchTest, EnvironmentTurnsItOff) {
  ScopedEnv no_proc_bind("OMP_PROC_BIND", nullptr), no_places("OMP_PLACES", nullptr);
  {
    ScopedEnv off("TANDEM_BIND_THREADS", "0");
    EXPECT_FALSE(team_binding_enabled());
  }
  {
    ScopedEnv on("TANDEM_BIND_THREADS", "1");
    EXPECT_TRUE(team_binding_enabled());
    ScopedEnv user_placement("OMP_PROC_BIND", "close");
    EXPECT_FALSE(team_binding_enabled());
  }
  {
    ScopedEnv places("OMP_PLACES", "cores");
    EXPECT_FALSE(team_binding_enabled());
  }
  ScopedEnv bad("TANDEM_BIND_THREADS", "yes");
  try {
    team_binding_enabled();
    ADD_FAILURE() << "TANDEM_BIND_THREADS=yes was accepted";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("TANDEM_BIND_THREADS='yes' is not a switch"));
  }
}

}  // namespace
}  // namespace tandem::kernels
