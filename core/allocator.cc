#include "core/allocator.h"

#include <bit>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"

#include "core/cuda/runtime.h"
#include "core/error.h"
#include "core/spinlock.h"

namespace tandem {
namespace {

// Larger requests are refused before any arithmetic on them can overflow;
// no machine Tandem runs on has 2^48 bytes.
constexpr size_t kMaxRequest = size_t{1} << 48;

// See Note [Caching allocator] for the size classes.
size_t size_class(size_t nbytes) {
  if (nbytes <= 512) return nbytes == 0 ? kStorageAlignment : (nbytes + 63) / 64 * 64;
  size_t step = std::bit_floor(nbytes) / 4;
  return (nbytes + step - 1) / step * step;
}

// Where a caching allocator gets blocks from and returns them to.
struct BlockSource {
  std::string name;  // For messages: "cpu", "cuda:0", "pinned host memory".
  // Null when the system refuses.
  std::function<void*(size_t)> allocate;
  std::function<void(void*)> free;
};

class CachingAllocator final : public Allocator {
 public:
  explicit CachingAllocator(BlockSource source) : source_(std::move(source)) {}

  void* allocate(size_t nbytes) override {
    if (nbytes > kMaxRequest) fail(nbytes);
    size_t size = size_class(nbytes);
    {
      std::lock_guard lock(mu_);
      ++stats_.allocations;
      auto it = free_.find(size);
      if (it != free_.end() && !it->second.empty()) {
        void* block = it->second.back();
        it->second.pop_back();
        ++stats_.cache_hits;
        stats_.cached -= size;
        note_in_use(size);
        return block;
      }
    }
    void* block = allocate_from_system(size);
    if (block == nullptr) {
      empty_cache();
      block = allocate_from_system(size);
    }
    if (block == nullptr) fail(size);
    return block;
  }

  void deallocate(void* block, size_t nbytes) override {
    size_t size = size_class(nbytes);
    std::lock_guard lock(mu_);
    stats_.in_use -= size;
    stats_.cached += size;
    free_[size].push_back(block);
  }

  void empty_cache() override {
    std::lock_guard lock(mu_);
    for (auto& [size, blocks] : free_) {
      for (void* block : blocks) source_.free(block);
    }
    free_.clear();
    stats_.cached = 0;
  }

  AllocatorStats stats() const override {
    std::lock_guard lock(mu_);
    return stats_;
  }

  void reset_peak() override {
    std::lock_guard lock(mu_);
    stats_.peak_in_use = stats_.in_use;
  }

  void set_limit(size_t bytes) override {
    std::lock_guard lock(mu_);
    stats_.limit = bytes;
  }

 private:
  // Null when over the limit or when the system refuses.
  void* allocate_from_system(size_t size) {
    {
      // Reserve first, so that two threads cannot both pass the limit check.
      std::lock_guard lock(mu_);
      if (stats_.limit != 0 && stats_.in_use + stats_.cached + size > stats_.limit) return nullptr;
      note_in_use(size);
    }
    void* block = source_.allocate(size);
    if (block == nullptr) {
      std::lock_guard lock(mu_);
      stats_.in_use -= size;
    }
    return block;
  }

  [[noreturn]] void fail(size_t size) const {
    AllocatorStats now = stats();
    TANDEM_CHECK(false, "out of memory on ", source_.name, ": cannot allocate ", format_bytes(size),
                 " (in use ", format_bytes(now.in_use), ", cached ", format_bytes(now.cached),
                 now.limit ? str_cat(", limit ", format_bytes(now.limit)) : "", ")");
    __builtin_unreachable();
  }

  void note_in_use(size_t size) {
    stats_.in_use += size;
    if (stats_.in_use > stats_.peak_in_use) stats_.peak_in_use = stats_.in_use;
  }

  const BlockSource source_;
  mutable Spinlock mu_;  // See Note [Why spin] in core/spinlock.h.
  absl::flat_hash_map<size_t, std::vector<void*>> free_;
  AllocatorStats stats_;
};

// Host memory: malloc-style allocation (not operator new) returns null on
// failure, also under AddressSanitizer with allocator_may_return_null=1, so
// out-of-memory stays a catchable Error.
BlockSource host_memory() {
  return {.name = "cpu",
          .allocate = [](size_t size) { return std::aligned_alloc(kStorageAlignment, size); },
          .free = [](void* block) { std::free(block); }};
}

// Note [Device memory in stream order]
// A block a CUDA tensor frees goes back to the cache once the last op on it
// has been launched, possibly before that op has run; the next tensor that
// takes the block is written only by ops launched later on the same stream,
// which run after it. So the cache needs no event per block, as in
// PyTorch's allocator for a single stream. cudaFree, which empty_cache
// calls, waits for the device itself.
BlockSource device_memory(int device) {
  return {.name = Device::cuda(device).to_string(),
          .allocate = [device](size_t size) { return cuda::device_malloc(device, size); },
          .free = [device](void* block) { cuda::device_free(device, block); }};
}

}  // namespace

Allocator& allocator_for(Device device) {
  // Never destroyed: tensors in static objects are freed after main returns.
  static auto* cpu = new CachingAllocator(host_memory());
  if (device.is_cpu()) return *cpu;
  static auto* cuda_devices = [] {
    auto* allocators = new std::vector<std::unique_ptr<CachingAllocator>>;
    for (int i = 0; i < cuda_device_count(); ++i) {
      allocators->push_back(std::make_unique<CachingAllocator>(device_memory(i)));
    }
    return allocators;
  }();
  TANDEM_CHECK(device.index() >= 0 && device.index() < static_cast<int>(cuda_devices->size()),
               "no allocator for device ", device.to_string(), ": this machine has ",
               cuda_devices->size(), " CUDA device(s)");
  return *(*cuda_devices)[device.index()];
}

Allocator& pinned_host_allocator() {
  TANDEM_CHECK(cuda_device_count() > 0,
               "pinned host memory needs a CUDA device; this machine has none");
  static auto* pinned = new CachingAllocator(
      {.name = "pinned host memory", .allocate = cuda::pinned_malloc, .free = cuda::pinned_free});
  return *pinned;
}

std::string format_bytes(size_t bytes) {
  constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  if (unit == 0) return str_cat(bytes, " B");
  return str_cat(absl::SixDigits(static_cast<double>(static_cast<int64_t>(value * 10)) / 10), " ",
                 kUnits[unit]);
}

}  // namespace tandem
