// Ranks started without mpirun (ctest Distributed.without_mpirun_ranks3,
// distributed/join_world.h): the world is ordered by TANDEM_RANK, and the
// ranks on this host split its CPUs (Note [Ranks sharing a host]). Under
// mpirun these are skipped: mpirun orders and places its ranks itself.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "gtest/gtest.h"

#include "eager/ops.h"
#include "kernels/cpu/team_binding.h"

#include "distributed/collectives.h"
#include "distributed/distributed.h"
#include "distributed/host_cpus.h"
#include "distributed/join_world.h"

namespace tandem::distributed {
namespace {

using kernels::cpus_of_this_thread;

class LaunchWithoutMpirunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Not started_by_mpi_launcher(): MPI's singleton start sets PMIX_RANK.
    if (std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || !launch_environment() ||
        world_size() < 2) {
      GTEST_SKIP() << "not started without mpirun on several ranks";
    }
  }
};

TEST_F(LaunchWithoutMpirunTest, TheWorldIsInTandemRankOrder) {
  EXPECT_EQ(rank(), launch_environment()->rank);
  EXPECT_EQ(world_size(), launch_environment()->world_size);
  // Each rank contributes its TANDEM_RANK; the gather lists them by world rank.
  const Tensor ranks = all_gather(full({1}, launch_environment()->rank, DType::kInt64));
  const std::vector<int64_t> got = ranks.to_vector<int64_t>();
  for (int r = 0; r < world_size(); ++r) EXPECT_EQ(got[static_cast<size_t>(r)], r);
}

// Every rank runs on this host here: together the ranks' CPUs are the
// host's, and each rank has cpu_share's part of them, in every thread it
// started (the engine's worker included).
TEST_F(LaunchWithoutMpirunTest, TheRanksSplitTheHostsCpus) {
  constexpr int64_t kCpus = 1024;
  std::vector<uint8_t> mine(kCpus, 0);
  for (int cpu : cpus_of_this_thread()) mine[static_cast<size_t>(cpu)] = 1;
  const std::vector<uint8_t> all =
      all_gather(Tensor::from_vector<uint8_t>(mine, {kCpus})).to_vector<uint8_t>();
  std::vector<int> host;
  for (int64_t cpu = 0; cpu < kCpus; ++cpu) {
    for (int r = 0; r < world_size(); ++r) {
      if (all[static_cast<size_t>(r * kCpus + cpu)] != 0) {
        host.push_back(static_cast<int>(cpu));
        break;
      }
    }
  }
  EXPECT_EQ(cpus_of_this_thread(), cpu_share(host, rank(), world_size()));
  std::vector<int> worker;
  engine::current().push([&](const engine::RunContext&) { worker = cpus_of_this_thread(); },
                         Device::cpu(), {}, {}, "read_affinity");
  engine::current().wait_all();
  std::vector<int> share = cpu_share(host, rank(), world_size());
  // The worker may since have bound itself to one CPU of the share.
  ASSERT_FALSE(worker.empty());
  for (int cpu : worker) {
    EXPECT_TRUE(std::find(share.begin(), share.end(), cpu) != share.end()) << "worker CPU " << cpu;
  }
}

}  // namespace
}  // namespace tandem::distributed
