// DistributedSampler's shards, for several world sizes at once (explicit
// rank and num_replicas, so one process checks them all), and a DataLoader
// reading through one on each rank of the real world.
#include "distributed/sampler.h"

#include <algorithm>
#include <set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "eager/data/dataloader.h"
#include "eager/ops.h"

#include "distributed/collectives.h"

namespace tandem::distributed {
namespace {

std::vector<std::vector<int64_t>> shards(int replicas, int64_t rows, uint64_t epoch, bool shuffle,
                                         bool drop_last) {
  std::vector<std::vector<int64_t>> all;
  for (int r = 0; r < replicas; ++r) {
    DistributedSampler sampler({.shuffle = shuffle,
                                .seed = 7,
                                .drop_last = drop_last,
                                .rank = r,
                                .num_replicas = replicas});
    all.push_back(sampler(epoch, rows));
  }
  return all;
}

TEST(DistributedSamplerTest, ShardsAreEqualDisjointAndCoverEveryRow) {
  for (int replicas : {1, 2, 3, 4, 7}) {
    for (int64_t rows : {int64_t{0}, int64_t{1}, int64_t{5}, int64_t{10}, int64_t{101}}) {
      for (bool shuffle : {false, true}) {
        const auto all = shards(replicas, rows, 0, shuffle, false);
        const int64_t per_rank = (rows + replicas - 1) / replicas;
        std::multiset<int64_t> seen;
        for (const auto& shard : all) {
          ASSERT_EQ(static_cast<int64_t>(shard.size()), per_rank)
              << replicas << " replicas, " << rows << " rows";
          seen.insert(shard.begin(), shard.end());
        }
        for (int64_t row = 0; row < rows; ++row) EXPECT_GE(seen.count(row), 1u) << row;
        // Every row, and nothing else: the padding only repeats rows.
        EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), static_cast<size_t>(rows));
        // The padding: fewer than `replicas` rows, repeated (more only when
        // there are fewer rows than ranks).
        if (rows >= replicas) {
          EXPECT_LT(per_rank * replicas - rows, replicas);
        }
      }
    }
  }
}

TEST(DistributedSamplerTest, DropLastCutsTheRemainderAndRepeatsNothing) {
  const auto all = shards(3, 10, 0, true, true);
  std::set<int64_t> seen;
  for (const auto& shard : all) {
    EXPECT_EQ(shard.size(), 3u);
    seen.insert(shard.begin(), shard.end());
  }
  EXPECT_EQ(seen.size(), 9u);
}

TEST(DistributedSamplerTest, EveryEpochIsReshuffledAndTheSameOnEveryRank) {
  const auto epoch0 = shards(2, 50, 0, true, false);
  const auto again = shards(2, 50, 0, true, false);
  const auto epoch1 = shards(2, 50, 1, true, false);
  EXPECT_EQ(epoch0, again);  // Each rank computes the same order alone.
  EXPECT_NE(epoch0, epoch1);
  // In order without shuffle: rank r takes rows r, r + size, ...
  EXPECT_EQ(shards(3, 7, 0, false, false)[1], (std::vector<int64_t>{1, 4, 0}));
}

TEST(DistributedSamplerTest, BadRanksAreErrors) {
  EXPECT_THROW(DistributedSampler({.rank = 2, .num_replicas = 2}), Error);
  EXPECT_THROW(DistributedSampler({.rank = 0, .num_replicas = 0}), Error);
}

TEST(DistributedSamplerTest, ADataLoaderOnEachRankReadsItsShardAndAllRanksTheWholeSet) {
  const int size = world_size();
  const int64_t rows = 23;
  std::vector<int64_t> values(rows);
  for (int64_t i = 0; i < rows; ++i) values[static_cast<size_t>(i)] = 1000 + i;
  Tensor data = Tensor::from_vector<int64_t>(values, Shape{rows});
  data::DataLoaderOptions options;
  options.batch_size = 4;
  options.sampler = DistributedSampler({.seed = 3});
  data::DataLoader loader({data}, options);
  const int64_t per_rank = (rows + size - 1) / size;
  EXPECT_EQ(loader.size(), (per_rank + 3) / 4);
  std::vector<int64_t> mine;
  int64_t steps = 0;
  for (const data::Batch& batch : loader) {
    std::vector<int64_t> got = batch[0].to_vector<int64_t>();
    mine.insert(mine.end(), got.begin(), got.end());
    ++steps;
  }
  EXPECT_EQ(steps, loader.size());
  // Every rank together: every row at least once.
  std::vector<int64_t> all =
      all_gather(Tensor::from_vector<int64_t>(mine, Shape{per_rank})).to_vector<int64_t>();
  std::set<int64_t> seen(all.begin(), all.end());
  EXPECT_EQ(seen.size(), static_cast<size_t>(rows));
  EXPECT_EQ(*seen.begin(), 1000);
}

TEST(DistributedSamplerTest, TheDataLoaderChecksTheSamplersRows) {
  data::DataLoaderOptions options;
  options.sampler = [](uint64_t, int64_t num_rows) { return std::vector<int64_t>{0, num_rows}; };
  data::DataLoader loader({zeros({5})}, options);
  EXPECT_THROW(loader.begin(), Error);
  data::DataLoaderOptions both;
  both.shuffle = true;
  both.sampler = DistributedSampler({.rank = 0, .num_replicas = 1});
  EXPECT_THROW(data::DataLoader({zeros({5})}, both), Error);
}

}  // namespace
}  // namespace tandem::distributed
