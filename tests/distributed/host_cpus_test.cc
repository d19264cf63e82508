// Note [Ranks sharing a host] (distributed/host_cpus.h): the share of a
// host's CPUs each of its ranks takes. The split itself, on ranks started
// without mpirun, is checked by distributed_tests (HostCpusTest).
#include "distributed/host_cpus.h"

#include <numeric>
#include <vector>

#include "gtest/gtest.h"

namespace tandem::distributed {
namespace {

// Every CPU goes to exactly one rank, in contiguous shares that differ in
// size by at most one, when there are at least as many CPUs as ranks.
TEST(CpuShareTest, SharesAreDisjointContiguousAndCoverEveryCpu) {
  for (int cpu_count : {1, 2, 3, 7, 16, 64}) {
    std::vector<int> cpus(static_cast<size_t>(cpu_count));
    std::iota(cpus.begin(), cpus.end(), 4);  // CPUs 4, 5, ...: not numbered from 0.
    for (int ranks = 1; ranks <= cpu_count; ++ranks) {
      std::vector<int> all;
      size_t smallest = cpus.size(), largest = 0;
      for (int r = 0; r < ranks; ++r) {
        const std::vector<int> share = cpu_share(cpus, r, ranks);
        ASSERT_FALSE(share.empty()) << r << " of " << ranks;
        for (size_t i = 1; i < share.size(); ++i) EXPECT_EQ(share[i], share[i - 1] + 1);
        all.insert(all.end(), share.begin(), share.end());
        smallest = std::min(smallest, share.size());
        largest = std::max(largest, share.size());
      }
      EXPECT_EQ(all, cpus) << cpu_count << " CPUs, " << ranks << " ranks";
      EXPECT_LE(largest - smallest, 1u);
    }
  }
}

// More ranks than CPUs: one CPU each, taken in turn.
TEST(CpuShareTest, MoreRanksThanCpusTakeOneCpuEachInTurn) {
  const std::vector<int> cpus = {0, 2};
  EXPECT_EQ(cpu_share(cpus, 0, 3), std::vector<int>{0});
  EXPECT_EQ(cpu_share(cpus, 1, 3), std::vector<int>{2});
  EXPECT_EQ(cpu_share(cpus, 2, 3), std::vector<int>{0});
  EXPECT_TRUE(cpu_share({}, 0, 2).empty());
}

}  // namespace
}  // namespace tandem::distributed
