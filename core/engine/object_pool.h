// ObjectPool<T> and PoolAllocator<T>: recycled memory for the hot path.
//
//   OpRecord* op = ObjectPool<OpRecord>::create();
//   ...
//   ObjectPool<OpRecord>::destroy(op);
//
// Note [Why a pool with thread-local caches]
// Every push creates an op record and one dependency block per var; every
// completion frees them, usually on another thread (frontend allocates,
// workers free). Each thread keeps a small cache of free slots; when a cache
// runs empty it takes a batch of kBatch slots from a shared list under one
// lock, and when it holds 2 * kBatch it returns a batch. So a slot costs a
// lock only once per kBatch operations, and slots flow back from the workers
// to the frontend instead of piling up where they were freed. Slots come from
// chunks that live until exit; the pool's size is the peak number of objects
// in flight.
#pragma once

#include <algorithm>
#include <cstddef>
#include <memory>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

#include "core/spinlock.h"

namespace tandem::engine {

// Raw slots of kSize bytes aligned to kAlign; the storage behind ObjectPool
// and PoolAllocator. Every type of the same size and alignment shares one.
template <size_t kSize, size_t kAlign>
class SlotPool {
 public:
  static void* take() { return cache_destroyed ? shared().take_one() : local().take(); }
  static void give(void* slot) {
    if (cache_destroyed) {
      shared().give_one(slot);
    } else {
      local().give(slot);
    }
  }

 private:
  static constexpr size_t kBatch = 64;

  struct alignas(kAlign) Slot {
    unsigned char bytes[kSize];
  };

  // The shared free list and the chunks every slot comes from.
  struct Shared {
    Spinlock mu;
    std::vector<void*> free;
    std::vector<std::unique_ptr<Slot[]>> chunks;

    void take_batch(std::vector<void*>& into) {
      std::lock_guard lock(mu);
      if (free.empty()) {
        auto chunk = std::make_unique<Slot[]>(kBatch);
        for (size_t i = 0; i < kBatch; ++i) free.push_back(&chunk[i]);
        chunks.push_back(std::move(chunk));
      }
      size_t n = std::min(kBatch, free.size());
      into.insert(into.end(), free.end() - n, free.end());
      free.resize(free.size() - n);
    }

    // Single slots, for threads whose cache is gone (see `cache_destroyed`).
    void* take_one() {
      std::vector<void*> one;
      take_batch(one);
      void* slot = one.back();
      one.pop_back();
      give_batch(one, one.size());
      return slot;
    }
    void give_one(void* slot) {
      std::lock_guard lock(mu);
      free.push_back(slot);
    }

    void give_batch(std::vector<void*>& from, size_t n) {
      std::lock_guard lock(mu);
      free.insert(free.end(), from.end() - n, from.end());
      from.resize(from.size() - n);
    }
  };

  struct LocalCache {
    std::vector<void*> free;

    LocalCache() { free.reserve(2 * kBatch + 1); }
    ~LocalCache() {
      if (!free.empty()) shared().give_batch(free, free.size());
      cache_destroyed = true;
    }

    void* take() {
      if (free.empty()) shared().take_batch(free);
      void* slot = free.back();
      free.pop_back();
      return slot;
    }

    void give(void* slot) {
      free.push_back(slot);
      if (free.size() >= 2 * kBatch) shared().give_batch(free, kBatch);
    }
  };

  // Never destroyed: thread-local caches of threads that outlive static
  // destruction may still return slots to it.
  static Shared& shared() {
    static Shared* instance = new Shared;
    return *instance;
  }

  // Set when this thread's cache has been destroyed (thread exit, or static
  // destruction on the main thread) while objects may still be freed later,
  // e.g. by static tensors: from then on this thread uses the shared list.
  // A plain bool is trivially destructible, so it outlives the cache.
  static inline thread_local bool cache_destroyed = false;

  static LocalCache& local() {
    thread_local LocalCache cache;
    return cache;
  }
};

template <class T>
class ObjectPool {
 public:
  template <class... Args>
  static T* create(Args&&... args) {
    return new (Slots::take()) T(std::forward<Args>(args)...);
  }

  static void destroy(T* object) {
    object->~T();
    Slots::give(object);
  }

 private:
  using Slots = SlotPool<sizeof(T), alignof(T)>;
};

// A standard allocator over SlotPool, for std::allocate_shared: tensors are
// created on the frontend and usually freed on a worker, the pattern the
// pool is made for.
template <class T>
struct PoolAllocator {
  using value_type = T;

  PoolAllocator() = default;
  template <class U>
  PoolAllocator(const PoolAllocator<U>&) {}  // NOLINT(google-explicit-constructor): rebinding.

  T* allocate(size_t n) {
    if (n == 1) return static_cast<T*>(SlotPool<sizeof(T), alignof(T)>::take());
    return std::allocator<T>().allocate(n);
  }
  void deallocate(T* p, size_t n) {
    if (n == 1) {
      SlotPool<sizeof(T), alignof(T)>::give(p);
    } else {
      std::allocator<T>().deallocate(p, n);
    }
  }
  template <class U>
  bool operator==(const PoolAllocator<U>&) const {
    return true;
  }
};

}  // namespace tandem::engine
