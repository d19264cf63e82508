#include "core/allocator.h"

#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <exception>
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
  // After blocks were freed: asks the system library to return free memory
  // it keeps to the operating system; empty where there is nothing to ask.
  std::function<void()> trim;
};

// Note [Releasing unused blocks]
// The cache must not only grow. Eager inference at batch sizes from 1 to
// 4000 asks for a new size class at almost every call, and a function
// hybridized at 2000 shapes plans buffers of 2000 sizes: each class kept
// every block it ever cached, nobody asked for most of them again, and the
// cache grew to gigabytes while far less was live. On Linux the failed
// allocation that used to empty the cache rarely comes: the OOM killer
// comes first.
//
// So a cached block that nobody took for kReleaseUnusedAfter (2 s) goes back
// to the system. A steady loop (training, serving one shape) takes again
// every block it caches within a step, milliseconds, so its hits stay hits
// and nothing it needs is released; what a changing workload leaves behind
// is. Each free list is a stack, reused from the top, so its bottom holds
// the blocks unused longest. Blocks are stamped with the allocator's count
// of calls, not with the time: the clock is read only on a miss (which
// costs a system call anyway) and every kCallsPerClockRead calls, and the
// allocator keeps the few readings of the last period, so that a block is
// released only once a reading taken after it entered the cache is 2 s
// old; at most four times a period the blocks older than that go back to
// the system, outside the lock, and malloc_trim returns what glibc keeps of
// them in its heap, so that the resident set shrinks too. The release runs
// inside allocate and deallocate calls (the allocator has no thread of its
// own): a process that stops making tensors keeps what it had cached until
// its next call or empty_cache(). A time bound
// rather than a cap on the cached bytes, because what a loop needs cached is
// its working set, which no fixed cap knows: a cap below it would free and
// reallocate every step. Figures in bench/README.md (bench_memory): eager
// CNN inference at batch sizes 1 to 4000 ended with 6977 MiB cached (peak
// RSS 7717 MiB) before, 1352 MiB after (2.6-3.0 GiB); training keeps its
// samples/s.
class CachingAllocator final : public Allocator {
 public:
  explicit CachingAllocator(BlockSource source) : source_(std::move(source)) {}

  void* allocate(size_t nbytes) override {
    if (nbytes > kMaxRequest) fail(nbytes);
    size_t size = size_class(nbytes);
    void* block = nullptr;
    Released released;
    {
      std::lock_guard lock(mu_);
      ++stats_.allocations;
      ++calls_;
      auto it = free_.find(size);
      const bool hit = it != free_.end() && !it->second.empty();
      if (hit) {
        block = it->second.back().block;
        it->second.pop_back();
        ++stats_.cache_hits;
        stats_.cached -= size;
        note_in_use(size);
      }
      released = tick_locked(/*read_clock=*/!hit);  // A miss costs more than the clock.
    }
    release(released);
    if (block != nullptr) return block;
    block = allocate_from_system(size);
    if (block == nullptr) {
      empty_cache();
      block = allocate_from_system(size);
    }
    if (block == nullptr) fail(size);
    return block;
  }

  void deallocate(void* block, size_t nbytes) override {
    size_t size = size_class(nbytes);
    Released released;
    {
      std::lock_guard lock(mu_);
      stats_.in_use -= size;
      stats_.cached += size;
      free_[size].push_back({block, ++calls_});
      released = tick_locked(/*read_clock=*/false);
    }
    release(released);
  }

  void empty_cache() override {
    Released all;
    {
      std::lock_guard lock(mu_);
      for (auto& [size, blocks] : free_) {
        for (const CachedBlock& cached : blocks) all.blocks.push_back(cached.block);
      }
      free_.clear();
      stats_.cached = 0;
    }
    release(all);
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

  void set_release_after(std::chrono::milliseconds after) override {
    std::lock_guard lock(mu_);
    release_after_ms_ = after.count();
    // Measured afresh from the next reading of the clock.
    readings_.clear();
    next_release_ms_ = 0;
  }

 private:
  static constexpr int kCallsPerClockRead = 256;

  struct CachedBlock {
    void* block;
    uint64_t cached_at;  // The value of calls_ when it entered the cache.
  };

  // A reading of the clock, and how many calls had been made by then.
  struct Reading {
    uint64_t calls;
    int64_t ms;
  };

  // Blocks taken out of the cache, to give back after the lock is released.
  struct Released {
    std::vector<void*> blocks;
  };

  // Counts the call (allocate or deallocate) and, when the clock is read (on
  // a miss, or every kCallsPerClockRead calls), takes out of the cache the
  // blocks that entered it before a reading at least release_after_ms_ old
  // (Note [Releasing unused blocks]): stamping blocks with the call count,
  // not with a clock read at every call, keeps the clock off the hot path
  // and never makes a block look older than it is. Under mu_.
  Released tick_locked(bool read_clock) {
    if (!read_clock && calls_ % kCallsPerClockRead != 0) return {};
    return read_clock_and_release_locked();
  }

  Released read_clock_and_release_locked() {
    Released released;
    const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::steady_clock::now().time_since_epoch())
                            .count();
    if (release_after_ms_ == 0) return released;
    // Readings over the last period, an eighth of it apart at least.
    if (readings_.empty() ||
        now - readings_.back().ms >= std::max<int64_t>(1, release_after_ms_ / 8)) {
      readings_.push_back({calls_, now});
    }
    if (now < next_release_ms_) return released;
    next_release_ms_ = now + std::max<int64_t>(1, release_after_ms_ / 4);
    const int64_t old_enough = now - release_after_ms_;
    while (readings_.size() >= 2 && readings_[1].ms <= old_enough) readings_.pop_front();
    if (readings_.front().ms > old_enough) return released;
    const uint64_t cutoff = readings_.front().calls;
    for (auto it = free_.begin(); it != free_.end();) {
      std::vector<CachedBlock>& blocks = it->second;
      size_t old = 0;
      while (old < blocks.size() && blocks[old].cached_at <= cutoff) {
        released.blocks.push_back(blocks[old++].block);
      }
      stats_.cached -= old * it->first;
      stats_.released += old * it->first;
      blocks.erase(blocks.begin(), blocks.begin() + static_cast<ptrdiff_t>(old));
      if (blocks.empty()) {
        free_.erase(it++);
      } else {
        ++it;
      }
    }
    return released;
  }

  // Gives blocks taken out of the cache back to the system. Never throws:
  // deallocate() calls it, from a Storage's destructor. A block the system
  // will not take back (a CUDA error) is left to it, and said once.
  void release(const Released& released) noexcept {
    if (released.blocks.empty()) return;
    for (void* block : released.blocks) {
      try {
        source_.free(block);
      } catch (const std::exception& e) {
        static std::atomic<bool> said{false};
        if (!said.exchange(true)) {
          std::fprintf(stderr, "tandem: could not give a cached block back to %s: %s\n",
                       source_.name.c_str(), e.what());
        }
      }
    }
    if (source_.trim) source_.trim();
  }

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
  absl::flat_hash_map<size_t, std::vector<CachedBlock>> free_;
  AllocatorStats stats_;
  int64_t release_after_ms_ = kReleaseUnusedAfter.count();
  uint64_t calls_ = 0;            // Calls of allocate and deallocate so far.
  std::deque<Reading> readings_;  // Oldest first.
  int64_t next_release_ms_ = 0;
};

// Host memory: malloc-style allocation (not operator new) returns null on
// failure, also under AddressSanitizer with allocator_may_return_null=1, so
// out-of-memory stays a catchable Error.
BlockSource host_memory() {
  return {.name = "cpu",
          .allocate = [](size_t size) { return std::aligned_alloc(kStorageAlignment, size); },
          .free = [](void* block) { std::free(block); },
          .trim = [] { malloc_trim(0); }};
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
          .free = [device](void* block) { cuda::device_free(device, block); },
          .trim = {}};
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
  static auto* pinned = new CachingAllocator({.name = "pinned host memory",
                                              .allocate = cuda::pinned_malloc,
                                              .free = cuda::pinned_free,
                                              .trim = {}});
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
