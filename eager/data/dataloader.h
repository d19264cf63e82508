// DataLoader: mini-batches over an in-memory data set, prepared ahead of use
// on a background thread.
//
//   using namespace tandem::data;
//   FashionMnist train = load_fashion_mnist("train");
//   DataLoaderOptions options;
//   options.batch_size = 64;
//   options.shuffle = true;
//   options.seed = 42;
//   options.transform = [](Batch batch) {  // runs on the loader's thread
//     return Batch{to_float(batch[0], 1.0f / 255, 0.0f), to_int64(batch[1])};
//   };
//   DataLoader loader({train.images, train.labels}, options);
//   for (int epoch = 0; epoch < 3; ++epoch) {
//     for (const Batch& batch : loader) {  // batch[0]: float32 [64, 28, 28]
//       train_step(batch[0], batch[1]);    // batch[1]: int64 [64]
//     }
//   }
//
// The data set is a list of CPU tensors that share their leading dimension N
// (row i of the data set is row i of each tensor). A batch holds, for each
// tensor, the chosen rows gathered into a new contiguous tensor of the same
// dtype, shape [B, ...], where B = batch_size except maybe for the last batch
// of an epoch (N % batch_size rows; dropped when drop_last is set).
//
// Note [DataLoader epochs and order]
// Every call to begin() starts a new epoch and increments the epoch index
// (starting at 0; set_epoch() changes it). Without shuffle, rows come in
// order 0..N-1. With shuffle, the epoch's order is a Fisher-Yates shuffle
// driven by SplitMix64 seeded with `seed + epoch index`. The algorithm is our
// own, not std::shuffle, so the order is the same on every platform and
// standard library: the same seed gives the same sequence of epochs, and
// epochs differ from one another.
//
// Note [DataLoader threads]
// With prefetch > 0, begin() starts a producer std::thread that builds up to
// `prefetch` batches ahead of the consumer and hands them over through a
// bounded queue; with prefetch == 0, each batch is built on the caller's
// thread when the iterator advances. The producer copies rows and runs the
// transform directly on memory rather than through the engine: the batch
// tensors are freshly allocated and no op can see them yet, and the
// constructor waits (on the caller's thread) for every pending write of the
// data set's tensors, which must not be written to while a loader uses them.
// The transform runs on the producer thread, one batch at a time; it may call
// Tandem ops (the engine accepts pushes from any thread) and must be safe to
// run concurrently with whatever the caller does with data it shares.
//
// An exception thrown while building a batch (by the transform, say) is
// handed over in the batch's place and rethrown on the consumer's thread by
// the ++ (or begin()) that reaches it, as a tandem::Error naming the batch and
// epoch; that iterator is then at its end. Destroying an iterator before the
// end of its epoch (`break` out of the loop) stops the producer and joins it.
// An iterator holds its own handles on the data set and options, so it stays
// valid after the DataLoader is destroyed; one iterator (one epoch) at a time
// is the intended use, though several work.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iterator>
#include <memory>
#include <source_location>
#include <vector>

#include "core/tensor.h"

namespace tandem::data {

// One mini-batch: one tensor per data-set tensor (after the transform, any
// list the transform returns).
using Batch = std::vector<Tensor>;

struct DataLoaderOptions {
  // Rows per batch; >= 1.
  int64_t batch_size = 1;
  // Visit rows in a new seeded random order each epoch (see Note [DataLoader
  // epochs and order]); otherwise in order.
  bool shuffle = false;
  uint64_t seed = 0;
  // Skip the last batch of an epoch when it has fewer than batch_size rows.
  bool drop_last = false;
  // Batches built ahead by the producer thread; 0 builds each batch on the
  // caller's thread when it is needed (no thread at all).
  int prefetch = 2;
  // Applied to every batch after gathering, on the producer thread (e.g.
  // to_float normalization); empty means none.
  std::function<Batch(Batch)> transform;
  // Hand out batches in page-locked (pinned) host memory, like PyTorch's
  // pin_memory: a batch's copy to a CUDA device (batch[0].to(Device::cuda()))
  // then reads it directly instead of staging it, and does not hold up the
  // device's worker. The pinning happens where the batch is built (the
  // producer thread with prefetch > 0), after the transform: the gathered
  // rows go straight into pinned memory when there is no transform, and each
  // CPU tensor the transform returns is copied into pinned memory otherwise.
  // When this machine has no CUDA device (cuda_device_count() == 0) it does
  // nothing: pinned memory needs one, and a CPU-only run loses nothing.
  bool pin_memory = false;
  // Chooses each epoch's rows, in order, in place of shuffle: called with
  // the epoch index and the data set's row count, it returns row indices
  // below that count (e.g. distributed::DistributedSampler, each rank's
  // shard). Empty: every row, shuffled or not.
  std::function<std::vector<int64_t>(uint64_t epoch, int64_t num_rows)> sampler;
};

// The rows 0..num_rows-1 in the seeded order of Note [DataLoader epochs and
// order] (a shuffle with `seed` + the epoch index): the same on every
// platform, so samplers on different machines agree on it.
std::vector<int64_t> shuffled_rows(int64_t num_rows, uint64_t seed);

class DataLoader {
 public:
  class Iterator;

  // `tensors`: the data set, at least one defined CPU tensor of rank >= 1, all
  // with the same leading dimension. Throws tandem::Error naming the problem
  // for bad tensors or options, or the failure of an op that wrote a tensor.
  explicit DataLoader(std::vector<Tensor> tensors, DataLoaderOptions options = {},
                      std::source_location where = std::source_location::current());
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Starts the next epoch (see the Notes above) and returns an iterator at
  // its first batch.
  Iterator begin();
  // The end of any epoch.
  Iterator end();

  // Batches per epoch: ceil(N / batch_size), or floor with drop_last, where
  // N is the number of rows an epoch visits (all, or the sampler's).
  int64_t size() const;
  // N, the rows of the data set.
  int64_t num_rows() const { return num_rows_; }
  const DataLoaderOptions& options() const { return options_; }
  // The index of the epoch the next begin() starts.
  uint64_t epoch() const { return next_epoch_; }
  void set_epoch(uint64_t epoch) { next_epoch_ = epoch; }

  // The order of rows in epoch `epoch`: a permutation of 0..N-1 when
  // shuffling, 0..N-1 otherwise. Exposed for tests and for reproducing a run.
  std::vector<int64_t> epoch_order(uint64_t epoch) const;
  int64_t batches_in(int64_t rows) const;

  // One epoch's producer, queue and position; shared by an iterator and its
  // producer thread. Defined in dataloader.cc.
  class Epoch;

 private:
  std::vector<Tensor> tensors_;
  DataLoaderOptions options_;
  int64_t num_rows_ = 0;
  uint64_t next_epoch_ = 0;
  std::source_location where_;  // The constructor's caller; errors name it.
};

// An input iterator over one epoch's batches. Move-only: it owns the epoch's
// producer thread, which its destructor stops and joins.
class DataLoader::Iterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = Batch;
  using difference_type = std::ptrdiff_t;
  using pointer = const Batch*;
  using reference = const Batch&;

  // The end iterator.
  Iterator();
  Iterator(Iterator&&) noexcept;
  Iterator& operator=(Iterator&&) noexcept;
  ~Iterator();

  // The current batch; the iterator must not be at the end.
  const Batch& operator*() const;
  const Batch* operator->() const { return &**this; }
  // Moves to the next batch, waiting for the producer if it is behind;
  // rethrows a failure to build that batch (see Note [DataLoader threads]).
  Iterator& operator++();

  // Two iterators are equal when both are at the end (of any epoch) or they
  // are the same iterator.
  friend bool operator==(const Iterator& a, const Iterator& b) {
    return a.at_end() == b.at_end() && (a.at_end() || &a == &b);
  }

 private:
  friend class DataLoader;
  explicit Iterator(std::unique_ptr<Epoch> epoch);
  bool at_end() const;

  std::unique_ptr<Epoch> epoch_;
};

// uint8 -> float32 with `x * scale + shift` per element, as a new tensor of
// the same shape; e.g. to_float(images, 1.0f / 255, 0.0f) maps to [0, 1].
// A plain loop on the calling thread (it waits for pending writes of
// `images` first), meant for DataLoader transforms.
Tensor to_float(const Tensor& images, float scale, float shift,
                std::source_location where = std::source_location::current());

// uint8 or int32 -> int64 (class labels, as losses expect them), as a new
// tensor of the same shape; a plain loop like to_float.
Tensor to_int64(const Tensor& labels, std::source_location where = std::source_location::current());

}  // namespace tandem::data
