// Device memory for tensors: one caching allocator per device.
//
//   tandem::Allocator& a = tandem::allocator_for(tandem::Device::cpu());
//   void* p = a.allocate(1 << 20);   // 64-byte aligned
//   a.deallocate(p, 1 << 20);        // Back to the cache, not to the OS.
//   a.stats().cached;                // 1 MiB ready for the next request
//
// Note [Caching allocator]
// Eager code allocates and frees the same sizes over and over (every step of
// a training loop makes the same temporaries). Freed blocks go to a free
// list per size class and serve the next request of that class without a
// system call. Size classes are multiples of 64 bytes up to 512 bytes, then
// four classes per power of two, so a block is at most 25% larger than asked.
// A block nobody asked for in a while goes back to the system (Note
// [Releasing unused blocks] in allocator.cc). When a request would exceed
// the limit or the system refuses it, the cache is released and the request
// retried once before it fails with a tandem::Error that names the device,
// the size and the memory in use.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/device.h"

namespace tandem {

// Every block starts on a 64-byte boundary: a cache line, and enough for
// AVX-512 loads.
inline constexpr size_t kStorageAlignment = 64;

struct AllocatorStats {
  size_t in_use = 0;        // Bytes held by live blocks (rounded sizes).
  size_t cached = 0;        // Bytes in free lists, ready for reuse.
  size_t peak_in_use = 0;   // Highest `in_use` since the last reset_peak().
  size_t limit = 0;         // Cap on in_use + cached; 0 for none.
  int64_t allocations = 0;  // Calls to allocate().
  int64_t cache_hits = 0;   // Of those, served from a free list.
  size_t released = 0;      // Bytes of cached blocks given back for not being used.
};

class Allocator {
 public:
  virtual ~Allocator() = default;
  // Returns a block of at least `nbytes` (a 0-byte request still gets a
  // distinct block). Throws tandem::Error when memory runs out.
  virtual void* allocate(size_t nbytes) = 0;
  // Returns a block; `nbytes` is the size originally requested.
  virtual void deallocate(void* block, size_t nbytes) = 0;
  // Gives every cached block back to the system.
  virtual void empty_cache() = 0;
  virtual AllocatorStats stats() const = 0;
  virtual void reset_peak() = 0;
  // Caps the bytes this allocator holds (in use plus cached); 0 removes the cap.
  virtual void set_limit(size_t bytes) = 0;
  // Cached blocks not reused for about this long go back to the system (Note
  // [Releasing unused blocks] in allocator.cc; the default is
  // kReleaseUnusedAfter); zero keeps them until empty_cache().
  virtual void set_release_after(std::chrono::milliseconds after) = 0;
};

inline constexpr std::chrono::milliseconds kReleaseUnusedAfter{2000};

// The allocator of `device`. Throws tandem::Error for devices this build
// cannot allocate on. A CUDA device's blocks are reused in stream order (Note
// [Device memory in stream order] in allocator.cc).
Allocator& allocator_for(Device device);

// Page-locked host memory, for CPU tensors that copies to and from a CUDA
// device read or write without a staging copy (Tensor::pin_memory). Throws
// tandem::Error on a machine without a CUDA device.
Allocator& pinned_host_allocator();

// "1.5 MiB": byte counts for messages.
std::string format_bytes(size_t bytes);

}  // namespace tandem
