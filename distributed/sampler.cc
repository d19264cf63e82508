#include "distributed/sampler.h"

#include <numeric>

#include "core/error.h"
#include "eager/data/dataloader.h"

namespace tandem::distributed {

DistributedSampler::DistributedSampler(DistributedSamplerOptions options) : options_(options) {
  if (options_.num_replicas < 0) options_.num_replicas = options_.group.size();
  if (options_.rank < 0) options_.rank = options_.group.rank();
  TANDEM_CHECK(options_.num_replicas >= 1, "DistributedSampler: num_replicas must be at least 1");
  TANDEM_CHECK(options_.rank >= 0 && options_.rank < options_.num_replicas,
               "DistributedSampler: rank ", options_.rank, " is not one of the ",
               options_.num_replicas, " replicas");
}

int64_t DistributedSampler::rows_per_rank(int64_t num_rows) const {
  const int64_t replicas = options_.num_replicas;
  return options_.drop_last ? num_rows / replicas : (num_rows + replicas - 1) / replicas;
}

std::vector<int64_t> DistributedSampler::operator()(uint64_t epoch, int64_t num_rows) const {
  std::vector<int64_t> order;
  if (options_.shuffle) {
    order = data::shuffled_rows(num_rows, options_.seed + epoch);
  } else {
    order.resize(static_cast<size_t>(num_rows));
    std::iota(order.begin(), order.end(), int64_t{0});
  }
  const int64_t per_rank = rows_per_rank(num_rows);
  const int64_t total = per_rank * options_.num_replicas;
  // Pad with the order's first rows (again and again for a tiny data set).
  for (int64_t i = num_rows; i < total && num_rows > 0; ++i) {
    order.push_back(order[static_cast<size_t>((i - num_rows) % num_rows)]);
  }
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(per_rank));
  for (int64_t i = options_.rank; i < total; i += options_.num_replicas) {
    mine.push_back(order[static_cast<size_t>(i)]);
  }
  return mine;
}

}  // namespace tandem::distributed
