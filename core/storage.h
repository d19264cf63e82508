// Storage: one aligned block of device memory and the engine var that guards it.
//
// Tensors share a Storage through std::shared_ptr; views (reshape, slices)
// point into the same one. Every op that touches the memory names the
// storage's var, so the engine orders all accesses to it.
//
// Note [Freeing memory that ops still use]
// The last handle may drop while ops on the memory are still queued (an op's
// closure holds tensors alive, but a wait or a view's op may not). So the
// destructor does not free the block itself: it asks the engine to delete the
// var, which returns the block to the allocator after every op pushed on the
// var so far has finished — at once when none is pending.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "core/device.h"

namespace tandem {

namespace engine {
class Var;
}  // namespace engine

class Storage {
 public:
  // Allocates `nbytes` on `device` from its caching allocator; throws
  // tandem::Error when memory runs out. `pinned` (CPU only): page-locked
  // memory, which copies to a CUDA device read without staging.
  Storage(size_t nbytes, Device device, bool pinned = false);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  bool pinned() const { return pinned_; }
  engine::Var* var() const { return var_; }

 private:
  void* data_;
  size_t nbytes_;
  Device device_;
  bool pinned_;
  engine::Var* var_;
};

// While one is alive, every tensor created on its thread (Tensor::empty)
// also keeps its storage in `kept`: a CUDA graph captured on the thread
// holds on to the scratch memory its kernels used, which would otherwise
// go back to the allocator when the kernels return.
class KeepNewStorages {
 public:
  explicit KeepNewStorages(std::vector<std::shared_ptr<Storage>>* kept);
  ~KeepNewStorages();
  KeepNewStorages(const KeepNewStorages&) = delete;
  KeepNewStorages& operator=(const KeepNewStorages&) = delete;

  // Called by Tensor::empty.
  static void note(const std::shared_ptr<Storage>& storage);

 private:
  std::vector<std::shared_ptr<Storage>>* previous_;
};

}  // namespace tandem
