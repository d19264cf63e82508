#include "kernels/cpu/primitive_cache.h"

#include <omp.h>

#include <atomic>
#include <list>
#include <mutex>
#include <string_view>

#include "absl/container/flat_hash_map.h"

namespace tandem::kernels::onednn {
namespace {

// Least recently used last; see Note [Primitive cache].
struct PrimitiveCache {
  std::mutex mu;
  std::list<std::pair<std::string, std::shared_ptr<const void>>> entries;
  absl::flat_hash_map<std::string, decltype(entries)::iterator> by_key;
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

std::shared_ptr<const void> find_cached_primitive(const std::string& key) {
  PrimitiveCache& c = cache();
  std::lock_guard lock(c.mu);
  auto it = c.by_key.find(key);
  if (it == c.by_key.end()) return nullptr;
  c.entries.splice(c.entries.begin(), c.entries, it->second);
  return it->second->second;
}

void keep_cached_primitive(const std::string& key, std::shared_ptr<const void> entry) {
  PrimitiveCache& c = cache();
  std::lock_guard lock(c.mu);
  if (c.by_key.contains(key)) return;  // Kept already: the first entry stays.
  c.entries.emplace_front(key, std::move(entry));
  c.by_key.emplace(key, c.entries.begin());
  if (c.entries.size() > kPrimitiveCacheEntries) {
    c.by_key.erase(c.entries.back().first);
    c.entries.pop_back();
  }
}

}  // namespace tandem::kernels::onednn
