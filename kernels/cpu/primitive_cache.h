// oneDNN primitives kept between calls, keyed by what they compute.
//
//   onednn::PrimitiveKey key;
//   key.add(op_desc.data).add(activation);
//   auto conv = onednn::cached_primitive<dnnl::convolution_forward>("convolution", key, [&] {
//     return dnnl::convolution_forward::primitive_desc(op_desc, attr, onednn::cpu_engine());
//   });
//   conv->primitive.execute(stream, args);   // conv->pd answers queries
//
// Note [Primitive cache]
// Making a primitive descriptor asks oneDNN's implementations in turn
// whether they serve the operation, and making the primitive then looks in
// oneDNN's own cache (keyed by that descriptor): tens of microseconds per
// call on the 2-core development machine, more than the work of a layer at
// batch 1 (LeNet-5's convolutions), and paid again by every backward
// primitive for its forward hint. A model calls the same layers at the same
// shapes step after step, so the kernels keep both, keyed by the bytes of
// the plain descriptors they were made from (a dnnl_*_desc_t describes an
// operation completely: shapes, strides, layouts, data types, padding)
// plus anything else that went into them (the fused activation, a forward
// hint), with the primitive's C++ type, the number of threads it is made
// for (Note [Small primitives on one thread]) and the thread that runs it.
// Descriptors are plain structs without pointers, so equal bytes mean an
// equal operation; padding bytes that differ can only make a miss, never a
// wrong hit. The cache holds the kPrimitiveCacheEntries most recently used;
// an entry in use by a kernel stays alive when it is evicted.
//
// Why each thread has its own primitives: a dnnl::primitive made in
// oneDNN's default (library) scratchpad mode may own its scratchpad, so two
// threads running one primitive object at once write the same temporary
// buffer. Kernels that run on one core do so without the all-cores lock,
// concurrently (the difftest caught an average pooling and a training step
// giving other answers once in a few runs); a primitive used by one thread
// only is never run twice at once. A thread's entries outlive it until
// they are evicted; thread numbers are never reused.
//
// Why a primitive is destroyed on its own thread: in the library scratchpad
// mode, Debian's oneDNN 2.6 (built without concurrent execution) gives each
// thread one scratchpad buffer, sized for the largest primitive made on it,
// with a thread-local count of the primitives that use it; a primitive's
// destructor decrements the count of the thread it runs on and frees that
// thread's buffer at zero. An entry evicted by another thread and destroyed
// there freed the evicting thread's buffer under its live primitives, whose
// next run wrote through a null scratchpad (the difftest crashed in a
// convolution, in 2 of 3 runs of 300 models after an unrelated change
// shifted timing). So an entry evicted by another thread waits in its
// owner's list until the owner next looks in the cache; an owner that has
// exited never frees it (threads are the engine's few long-lived workers).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <type_traits>
#include <typeinfo>
#include <utility>

#include <oneapi/dnnl/dnnl.hpp>

#include "kernels/cpu/onednn.h"

namespace tandem::kernels::onednn {

// A training step of LeNet-5 uses a few dozen primitives per thread; each
// holds JIT code, so a cache of 1024 kept ~65 MiB more at the end of
// bench_memory's storm of 2000 shapes (317-322 MiB peak RSS, 239-247 with
// 256 entries).
inline constexpr size_t kPrimitiveCacheEntries = 256;

// A primitive with the descriptor it was made from.
template <class Primitive>
struct CachedPrimitive {
  typename Primitive::primitive_desc pd;
  Primitive primitive;
};

// The bytes that identify an operation.
class PrimitiveKey {
 public:
  template <class Plain>
  PrimitiveKey& add(const Plain& value) {
    static_assert(std::is_trivially_copyable_v<Plain>, "keys are made of plain bytes");
    bytes_.append(reinterpret_cast<const char*>(&value), sizeof value);
    return *this;
  }
  PrimitiveKey& add(const FusedActivation& activation) {
    return add(activation.op == nullptr ? -1 : static_cast<int>(activation.op->code))
        .add(activation.alpha);
  }
  const std::string& bytes() const { return bytes_; }

 private:
  std::string bytes_;
};

// The threads OpenMP gives the calling thread now: a primitive made with
// fewer runs on fewer (Note [Small primitives on one thread]).
int openmp_threads();
// The calling thread's number, unique over the process's life (Note
// [Primitive cache]: each thread has its own primitives).
uint64_t this_thread_number();

// The cache itself, behind cached_primitive: the entry for `key` (null if
// none), and keeping a new one.
std::shared_ptr<const void> find_cached_primitive(const std::string& key);
void keep_cached_primitive(const std::string& key, std::shared_ptr<const void> entry);
// Held while a primitive is made: Debian's oneDNN 2.6 was seen to deadlock
// when two threads created primitives at once (Note [Thread budget] in
// kernels/dispatch.h), and kernels that run on one core do not hold the
// all-cores lock that otherwise keeps them apart. Recursive: a backward
// primitive makes its forward hint inside its own creation.
std::recursive_mutex& primitive_creation_mutex();
// warm_up_gemm() where `pd`'s implementation may call oneDNN's gemm.
void warm_up_gemm_for(const dnnl::primitive_desc_base& pd);

// The primitive for `key`: made from the primitive_desc `make` returns on
// the first call (and after its eviction), then kept. A dnnl::error becomes a
// tandem::Error naming `what`, as in make_pd.
template <class Primitive, class Make>
std::shared_ptr<const CachedPrimitive<Primitive>> cached_primitive(std::string_view what,
                                                                   const PrimitiveKey& key,
                                                                   Make&& make) {
  // The primitive's type is part of the key, so a hit always has this type;
  // so are the thread count it is made for and the thread that runs it.
  std::string bytes = typeid(Primitive).name();
  bytes += '\0';
  bytes += PrimitiveKey().add(openmp_threads()).add(this_thread_number()).bytes();
  bytes += key.bytes();
  if (std::shared_ptr<const void> found = find_cached_primitive(bytes)) {
    return std::static_pointer_cast<const CachedPrimitive<Primitive>>(found);
  }
  std::lock_guard creating(primitive_creation_mutex());
  auto pd = make_pd(what, std::forward<Make>(make));
  warm_up_gemm_for(pd);
  std::shared_ptr<const CachedPrimitive<Primitive>> entry;
  try {
    entry = std::make_shared<const CachedPrimitive<Primitive>>(
        CachedPrimitive<Primitive>{pd, Primitive(pd)});
  } catch (const dnnl::error&) {
    rethrow_dnnl_error(what);
  }
  keep_cached_primitive(bytes, entry);
  return entry;
}

}  // namespace tandem::kernels::onednn
