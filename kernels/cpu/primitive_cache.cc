#include "kernels/cpu/primitive_cache.h"

#include <omp.h>

#include <atomic>
#include <list>
#include <mutex>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"

namespace tandem::kernels::onednn {
namespace {

struct Entry {
  std::string key;
  uint64_t owner;  // The thread that made the primitive and alone runs it.
  std::shared_ptr<const void> primitive;
};

// Least recently used last; see Note [Primitive cache].
struct PrimitiveCache {
  std::mutex mu;
  std::list<Entry> entries;
  absl::flat_hash_map<std::string, std::list<Entry>::iterator> by_key;
  // Entries another thread evicted, by owner, for the owner to destroy.
  absl::flat_hash_map<uint64_t, std::vector<std::shared_ptr<const void>>> evicted;
};

PrimitiveCache& cache() {
  static PrimitiveCache* instance = new PrimitiveCache;  // Never destroyed: kernels run at exit.
  return *instance;
}

}  // namespace

int openmp_threads() { return omp_get_max_threads(); }

uint64_t this_thread_number() {
  static std::atomic<uint64_t> next{0};
  thread_local const uint64_t number = next.fetch_add(1, std::memory_order_relaxed);
  return number;
}

std::recursive_mutex& primitive_creation_mutex() {
  static auto* mu = new std::recursive_mutex;  // Never destroyed: kernels run at exit.
  return *mu;
}

void warm_up_gemm_for(const dnnl::primitive_desc_base& pd) {
  // Implementation names say "gemm" for the gemm-based ones ("gemm:jit",
  // "x64:gemm:jit"); a brgemm one ("brgemm:avx512_core") warms it needlessly,
  // once.
  if (std::string_view(pd.impl_info_str()).find("gemm") != std::string_view::npos) {
    warm_up_gemm();
  }
}

// The calling thread's primitives that others evicted, to be released here
// (after the cache's lock is let go).
std::vector<std::shared_ptr<const void>> take_own_evicted(PrimitiveCache& c) {
  auto it = c.evicted.find(this_thread_number());
  if (it == c.evicted.end()) return {};
  std::vector<std::shared_ptr<const void>> own = std::move(it->second);
  c.evicted.erase(it);
  return own;
}

std::shared_ptr<const void> find_cached_primitive(const std::string& key) {
  PrimitiveCache& c = cache();
  std::vector<std::shared_ptr<const void>> released;
  std::lock_guard lock(c.mu);
  released = take_own_evicted(c);
  auto it = c.by_key.find(key);
  if (it == c.by_key.end()) return nullptr;
  c.entries.splice(c.entries.begin(), c.entries, it->second);
  return it->second->primitive;
}

void keep_cached_primitive(const std::string& key, std::shared_ptr<const void> entry) {
  PrimitiveCache& c = cache();
  // Declared before the lock: released after it is let go.
  std::vector<std::shared_ptr<const void>> released;
  std::lock_guard lock(c.mu);
  released = take_own_evicted(c);
  if (c.by_key.contains(key)) return;  // Kept already: the first entry stays.
  c.entries.push_front({key, this_thread_number(), std::move(entry)});
  c.by_key.emplace(key, c.entries.begin());
  if (c.entries.size() > kPrimitiveCacheEntries) {
    Entry& last = c.entries.back();
    c.by_key.erase(last.key);
    if (last.owner == this_thread_number()) {
      released.push_back(std::move(last.primitive));
    } else {
      c.evicted[last.owner].push_back(std::move(last.primitive));
    }
    c.entries.pop_back();
  }
}

}  // namespace tandem::kernels::onednn
