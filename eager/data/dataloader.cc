#include "eager/data/dataloader.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <utility>

#include "core/device.h"
#include "core/error.h"
#include "core/shape.h"
#include "core/storage.h"

namespace tandem::data {
namespace {

// SplitMix64 (Steele, Lea and Flood 2014): tiny, fast, and fully specified,
// so a seed means the same order everywhere (see Note [DataLoader epochs and
// order]).
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}

  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }

  // Uniform in [0, bound), bound >= 1, without modulo bias.
  uint64_t below(uint64_t bound) {
    const uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
    for (;;) {
      uint64_t r = next();
      if (r >= threshold) return r % bound;
    }
  }

 private:
  uint64_t state_;
};

// Uninitialized host memory, page-locked when `pinned`. No op can see the
// tensor yet, so its builder may write it directly.
Tensor empty_host(Shape shape, DType dtype, bool pinned) {
  if (!pinned) return Tensor::empty(std::move(shape), dtype);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(static_cast<size_t>(shape.numel()) * dtype_size(dtype),
                                            Device::cpu(), /*pinned=*/true);
  impl->shape = std::move(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

// `t` in pinned memory, copied on this thread (see DataLoaderOptions::
// pin_memory); `t` itself when it is pinned already or not a CPU tensor.
Tensor pinned_copy(const Tensor& t) {
  if (!t.defined() || !t.device().is_cpu() || t.is_pinned()) return t;
  t.wait_to_read();  // The transform may have pushed ops that write it.
  Tensor out = empty_host(t.shape(), t.dtype(), /*pinned=*/true);
  if (t.nbytes() != 0) std::memcpy(out.raw_data(), t.raw_data(), t.nbytes());
  return out;
}

// Copies rows `rows[0..count)` of each tensor into new contiguous tensors,
// in pinned memory when `pinned`.
Batch gather(const std::vector<Tensor>& tensors, const int64_t* rows, int64_t count,
             bool consecutive, bool pinned) {
  Batch batch;
  batch.reserve(tensors.size());
  for (const Tensor& source : tensors) {
    Shape::Dims dims(source.shape().begin(), source.shape().end());
    const size_t row_bytes =
        static_cast<size_t>(source.numel() / dims[0]) * dtype_size(source.dtype());
    dims[0] = count;
    Tensor out = empty_host(Shape(absl::MakeConstSpan(dims)), source.dtype(), pinned);
    if (row_bytes > 0 && count > 0) {
      const char* src = static_cast<const char*>(source.raw_data());
      char* dst = static_cast<char*>(out.raw_data());
      if (consecutive) {
        std::memcpy(dst, src + rows[0] * row_bytes, count * row_bytes);
      } else {
        for (int64_t i = 0; i < count; ++i) {
          std::memcpy(dst + i * row_bytes, src + rows[i] * row_bytes, row_bytes);
        }
      }
    }
    batch.push_back(std::move(out));
  }
  return batch;
}

// Rethrows `error`, the failure to build batch `index`, as a tandem::Error
// that names the batch and epoch and keeps the original op and line.
[[noreturn]] void rethrow_batch_failure(std::exception_ptr error, int64_t index, uint64_t epoch,
                                        const std::source_location& where) {
  std::string context = str_cat("building batch ", index, " of epoch ", epoch, " failed: ");
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    throw Error(context + e.message(), e.op().empty() ? "DataLoader" : e.op(),
                e.has_location() ? e.where() : where);
  } catch (const std::exception& e) {
    throw Error(context + e.what(), "DataLoader", where);
  } catch (...) {
    throw Error(context + "an exception not derived from std::exception", "DataLoader", where);
  }
}

}  // namespace

// See Note [DataLoader threads]. The producer thread runs produce(); the
// iterator that owns this object calls advance() and, on destruction, stop().
class DataLoader::Epoch {
 public:
  Epoch(std::vector<Tensor> tensors, DataLoaderOptions options, uint64_t epoch,
        std::vector<int64_t> order, int64_t num_batches, std::source_location where)
      : tensors_(std::move(tensors)),
        options_(std::move(options)),
        pin_(options_.pin_memory && cuda_device_count() > 0),
        epoch_(epoch),
        order_(std::move(order)),
        num_batches_(num_batches),
        where_(where) {}

  ~Epoch() { stop(); }

  void start() {
    if (options_.prefetch > 0 && num_batches_ > 0) thread_ = std::thread([this] { produce(); });
  }

  bool done() const { return done_; }
  const Batch& current() const { return current_; }

  // Makes the next batch current, or marks the epoch done; rethrows a
  // failure to build it.
  void advance() {
    current_.clear();
    if (done_) return;
    if (next_index_ >= num_batches_) {
      done_ = true;
      return;
    }
    const int64_t index = next_index_++;
    Item item;
    if (options_.prefetch == 0) {
      item = build(index);
    } else {
      {
        std::unique_lock lock(mu_);
        not_empty_.wait(lock, [&] { return !queue_.empty(); });
        item = std::move(queue_.front());
        queue_.pop_front();
      }
      not_full_.notify_one();
    }
    if (item.error) {
      done_ = true;
      stop();
      rethrow_batch_failure(item.error, index, epoch_, where_);
    }
    current_ = std::move(item.batch);
  }

 private:
  struct Item {
    Batch batch;
    std::exception_ptr error;  // Set instead of batch when building failed.
  };

  // Gathers batch `index` and applies the transform; never throws.
  Item build(int64_t index) {
    CallSiteScope site("DataLoader", where_);
    Item item;
    try {
      const int64_t begin = index * options_.batch_size;
      const int64_t count =
          std::min<int64_t>(options_.batch_size, static_cast<int64_t>(order_.size()) - begin);
      const bool pin_rows = pin_ && !options_.transform;
      const bool consecutive = !options_.shuffle && !options_.sampler;
      item.batch = gather(tensors_, order_.data() + begin, count, consecutive, pin_rows);
      if (options_.transform) {
        item.batch = options_.transform(std::move(item.batch));
        if (pin_) {
          for (Tensor& t : item.batch) t = pinned_copy(t);
        }
      }
    } catch (...) {
      item.batch.clear();
      item.error = std::current_exception();
    }
    return item;
  }

  // The producer thread: builds every batch in order, keeping at most
  // `prefetch` of them queued; ends after a failed batch or when stopped.
  void produce() {
    for (int64_t index = 0; index < num_batches_; ++index) {
      {
        std::unique_lock lock(mu_);
        not_full_.wait(
            lock, [&] { return stop_ || static_cast<int64_t>(queue_.size()) < options_.prefetch; });
        if (stop_) return;
      }
      Item item = build(index);
      const bool failed = item.error != nullptr;
      {
        std::lock_guard lock(mu_);
        if (stop_) return;
        queue_.push_back(std::move(item));
      }
      not_empty_.notify_one();
      if (failed) return;
    }
  }

  // Stops the producer, waiting for the batch it is building, and joins it.
  void stop() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    not_full_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  // Read by the producer; fixed while it runs.
  const std::vector<Tensor> tensors_;
  const DataLoaderOptions options_;
  const bool pin_;  // options_.pin_memory, and a CUDA device to pin for.
  const uint64_t epoch_;
  const std::vector<int64_t> order_;
  const int64_t num_batches_;
  const std::source_location where_;

  // Shared with the producer, under mu_.
  std::mutex mu_;
  std::condition_variable not_empty_;
  std::condition_variable not_full_;
  std::deque<Item> queue_;
  bool stop_ = false;

  // The consumer's side.
  std::thread thread_;
  int64_t next_index_ = 0;
  bool done_ = false;
  Batch current_;
};

DataLoader::DataLoader(std::vector<Tensor> tensors, DataLoaderOptions options,
                       std::source_location where)
    : tensors_(std::move(tensors)), options_(std::move(options)), where_(where) {
  CallSiteScope site("DataLoader", where);
  TANDEM_CHECK(!(options_.shuffle && options_.sampler),
               "give either shuffle or a sampler, not both: the sampler chooses the order");
  TANDEM_CHECK(options_.batch_size >= 1, "batch_size must be at least 1, got ",
               options_.batch_size);
  TANDEM_CHECK(options_.prefetch >= 0, "prefetch must be 0 (no thread) or more, got ",
               options_.prefetch);
  TANDEM_CHECK(!tensors_.empty(), "the data set needs at least one tensor");
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const Tensor& t = tensors_[i];
    TANDEM_CHECK(t.defined(), "data-set tensor ", i, " is undefined");
    TANDEM_CHECK(t.device().is_cpu(), "data-set tensor ", i, " must be on the CPU");
    TANDEM_CHECK(t.rank() >= 1, "data-set tensor ", i,
                 " needs a leading (row) dimension, got a scalar");
    TANDEM_CHECK(t.shape()[0] == tensors_[0].shape()[0], "data-set tensors must share their ",
                 "leading dimension: tensor 0 has shape ", tensors_[0].shape().to_string(),
                 ", tensor ", i, " has shape ", t.shape().to_string());
  }
  num_rows_ = tensors_[0].shape()[0];
  // The producer reads the tensors without the engine (see Note [DataLoader
  // threads]); wait here for pending writes, rethrowing their failures.
  for (const Tensor& t : tensors_) t.wait_to_read(where);
}

DataLoader::~DataLoader() = default;

std::vector<int64_t> shuffled_rows(int64_t num_rows, uint64_t seed) {
  std::vector<int64_t> order(static_cast<size_t>(num_rows));
  std::iota(order.begin(), order.end(), int64_t{0});
  // Fisher-Yates, last position first.
  SplitMix64 rng(seed);
  for (int64_t i = num_rows - 1; i > 0; --i) {
    std::swap(order[i], order[rng.below(static_cast<uint64_t>(i) + 1)]);
  }
  return order;
}

int64_t DataLoader::batches_in(int64_t rows) const {
  const int64_t full = rows / options_.batch_size;
  const bool partial = rows % options_.batch_size != 0;
  return full + (partial && !options_.drop_last ? 1 : 0);
}

int64_t DataLoader::size() const {
  if (options_.sampler) {
    // The sampler's row count only: begin() checks the rows themselves.
    return batches_in(static_cast<int64_t>(options_.sampler(next_epoch_, num_rows_).size()));
  }
  return batches_in(num_rows_);
}

std::vector<int64_t> DataLoader::epoch_order(uint64_t epoch) const {
  if (options_.sampler) {
    std::vector<int64_t> order = options_.sampler(epoch, num_rows_);
    for (size_t i = 0; i < order.size(); ++i) {
      TANDEM_CHECK(order[i] >= 0 && order[i] < num_rows_, "the sampler's row ", i, " of epoch ",
                   epoch, " is ", order[i], ", outside the data set's ", num_rows_, " rows");
    }
    return order;
  }
  if (options_.shuffle) return shuffled_rows(num_rows_, options_.seed + epoch);
  std::vector<int64_t> order(static_cast<size_t>(num_rows_));
  std::iota(order.begin(), order.end(), int64_t{0});
  return order;
}

DataLoader::Iterator DataLoader::begin() {
  const uint64_t epoch = next_epoch_++;
  std::vector<int64_t> order = epoch_order(epoch);
  const int64_t num_batches = batches_in(static_cast<int64_t>(order.size()));
  auto state =
      std::make_unique<Epoch>(tensors_, options_, epoch, std::move(order), num_batches, where_);
  state->start();
  Iterator it(std::move(state));
  it.epoch_->advance();  // On failure, `it` stops and joins the producer.
  return it;
}

DataLoader::Iterator DataLoader::end() { return Iterator(); }

DataLoader::Iterator::Iterator(std::unique_ptr<Epoch> epoch) : epoch_(std::move(epoch)) {}
DataLoader::Iterator::Iterator() = default;
DataLoader::Iterator::Iterator(Iterator&&) noexcept = default;
DataLoader::Iterator& DataLoader::Iterator::operator=(Iterator&&) noexcept = default;
DataLoader::Iterator::~Iterator() = default;

bool DataLoader::Iterator::at_end() const { return epoch_ == nullptr || epoch_->done(); }

const Batch& DataLoader::Iterator::operator*() const {
  TANDEM_CHECK(!at_end(), "DataLoader iterator dereferenced at the end of the epoch");
  return epoch_->current();
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  TANDEM_CHECK(epoch_ != nullptr, "DataLoader end iterator incremented");
  epoch_->advance();
  return *this;
}

// ---------------------------------------------------------------------------
// Conversions. Plain loops on the calling thread: a DataLoader transform gets
// freshly gathered tensors that no op can see yet (see Note [DataLoader
// threads]); for any other tensor, wait_to_read orders us after its writers.
// ---------------------------------------------------------------------------

Tensor to_float(const Tensor& images, float scale, float shift, std::source_location where) {
  CallSiteScope site("to_float", where);
  TANDEM_CHECK(images.defined(), "the input tensor is undefined");
  TANDEM_CHECK(images.dtype() == DType::kUInt8, "expected a uint8 tensor, got ",
               dtype_name(images.dtype()));
  TANDEM_CHECK(images.device().is_cpu(), "expected a CPU tensor");
  images.wait_to_read(where);
  Tensor out = Tensor::empty(images.shape(), DType::kFloat32);
  const uint8_t* src = images.data<uint8_t>();
  float* dst = out.data<float>();
  const int64_t n = images.numel();
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]) * scale + shift;
  return out;
}

Tensor to_int64(const Tensor& labels, std::source_location where) {
  CallSiteScope site("to_int64", where);
  TANDEM_CHECK(labels.defined(), "the input tensor is undefined");
  TANDEM_CHECK(labels.dtype() == DType::kUInt8 || labels.dtype() == DType::kInt32,
               "expected a uint8 or int32 tensor, got ", dtype_name(labels.dtype()));
  TANDEM_CHECK(labels.device().is_cpu(), "expected a CPU tensor");
  labels.wait_to_read(where);
  Tensor out = Tensor::empty(labels.shape(), DType::kInt64);
  int64_t* dst = out.data<int64_t>();
  const int64_t n = labels.numel();
  if (labels.dtype() == DType::kUInt8) {
    const uint8_t* src = labels.data<uint8_t>();
    for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
  } else {
    const int32_t* src = labels.data<int32_t>();
    for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
  }
  return out;
}

}  // namespace tandem::data
