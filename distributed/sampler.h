// DistributedSampler: each rank its own shard of the data set, as torch's.
//
//   DistributedSampler sampler({.shuffle = true, .seed = 42});
//   DataLoader loader({images, labels}, {.batch_size = 64, .sampler = sampler});
//
// Every rank orders all rows the same way (the DataLoader's shuffle with
// `seed` + the epoch index, data::shuffled_rows, or in order), pads the
// order by repeating its first rows until it divides evenly among the ranks
// (or, with drop_last, cuts the remainder), and keeps every size-th row
// from position rank(). The shards are disjoint but for the padding, cover
// every row, have equal lengths, so every rank takes the same number of
// steps, and change each epoch.
#pragma once

#include <cstdint>
#include <vector>

#include "distributed/distributed.h"

namespace tandem::distributed {

struct DistributedSamplerOptions {
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;
  // Whose shard: by default this process's rank and size in `group`.
  ProcessGroup group = ProcessGroup();
  int rank = -1;
  int num_replicas = -1;
};

class DistributedSampler {
 public:
  explicit DistributedSampler(DistributedSamplerOptions options = {});

  // This rank's rows of `epoch` (DataLoaderOptions::sampler).
  std::vector<int64_t> operator()(uint64_t epoch, int64_t num_rows) const;
  // How many rows each rank gets of a data set of `num_rows`.
  int64_t rows_per_rank(int64_t num_rows) const;

 private:
  DistributedSamplerOptions options_;
};

}  // namespace tandem::distributed
