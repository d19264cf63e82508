// ObjectPool<T>: recycled objects for the engine's hot path.
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

#include <cstddef>
#include <memory>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

#include "core/spinlock.h"

namespace tandem::engine {

template <class T>
class ObjectPool {
 public:
  template <class... Args>
  static T* create(Args&&... args) {
    void* slot = local().take();
    return new (slot) T(std::forward<Args>(args)...);
  }

  static void destroy(T* object) {
    object->~T();
    local().give(object);
  }

 private:
  static constexpr size_t kBatch = 64;

  union Slot {
    Slot() {}
    ~Slot() {}
    alignas(T) unsigned char bytes[sizeof(T)];
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

  static LocalCache& local() {
    thread_local LocalCache cache;
    return cache;
  }
};

}  // namespace tandem::engine
