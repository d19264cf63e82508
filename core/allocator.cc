#include "core/allocator.h"

#include <bit>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "absl/container/flat_hash_map.h"

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

class CachingCpuAllocator final : public Allocator {
 public:
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
      for (void* block : blocks) std::free(block);
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
    // malloc-style allocation (not operator new): it returns null on failure,
    // also under AddressSanitizer with allocator_may_return_null=1, so
    // out-of-memory stays a catchable Error.
    void* block = std::aligned_alloc(kStorageAlignment, size);
    if (block == nullptr) {
      std::lock_guard lock(mu_);
      stats_.in_use -= size;
    }
    return block;
  }

  [[noreturn]] void fail(size_t size) const {
    AllocatorStats now = stats();
    TANDEM_CHECK(false, "out of memory on cpu: cannot allocate ", format_bytes(size), " (in use ",
                 format_bytes(now.in_use), ", cached ", format_bytes(now.cached),
                 now.limit ? str_cat(", limit ", format_bytes(now.limit)) : "", ")");
    __builtin_unreachable();
  }

  void note_in_use(size_t size) {
    stats_.in_use += size;
    if (stats_.in_use > stats_.peak_in_use) stats_.peak_in_use = stats_.in_use;
  }

  mutable Spinlock mu_;  // See Note [Why spin] in core/spinlock.h.
  absl::flat_hash_map<size_t, std::vector<void*>> free_;
  AllocatorStats stats_;
};

}  // namespace

Allocator& allocator_for(Device device) {
  TANDEM_CHECK(device.is_cpu(), "no allocator for device ", device.to_string(),
               ": this build allocates on the CPU only");
  // Never destroyed: tensors in static objects are freed after main returns.
  static auto* cpu = new CachingCpuAllocator;
  return *cpu;
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
