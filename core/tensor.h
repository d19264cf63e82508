// Tensor: a cheap, reference-counted handle on an n-dimensional array.
//
//   using tandem::Tensor;
//   Tensor x = Tensor::from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
//   x.shape();                  // [2, 3], known at once, never waits
//   Tensor row = x[1];          // view of [4, 5, 6]: same storage, same var
//   Tensor flat = x.reshape({-1});
//   row.to_vector<float>();     // waits for pending writes, then copies out
//
// Copying a Tensor copies the handle, not the data (like torch::Tensor). A
// tensor's elements are contiguous and row-major, starting `byte_offset()`
// bytes into its Storage; views share the storage and hence the engine var,
// so the engine orders every op on any of them.
//
// Reading values (`to_vector`, `item`, `to_string`) waits for the ops that
// write the tensor and rethrows their failure, if any. `data<T>()` does not
// wait: it is for kernels, which the engine runs only when their inputs are
// ready.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <source_location>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/types/span.h"

#include "core/device.h"
#include "core/dtype.h"
#include "core/shape.h"
#include "core/spinlock.h"
#include "core/storage.h"

namespace tandem {

// Per-tensor autograd state; defined by eager/ (autograd.h), which alone
// creates it. Null for tensors that take no part in autograd.
struct AutogradMeta;

// Note [Rebinding while other threads read]
// Tensor::assign_ (an optimizer's update) rebinds a TensorImpl to other data
// while other threads may be reading the same tensor without a lock of
// their own (a thread serving inference on the parameters another thread
// trains). The contract: such a reader sees the binding from before or
// from after the rebind, never a mix of the two, and whatever it made from
// it (an op, a snapshot, a view, values read) keeps that data alive and
// valid: a race is at worst a stale value, never a crash or a lost var.
// So a TensorImpl's storage and byte_offset change only in rebind(), under
// a lock of the impl's own, and every read of them that another thread's
// rebind could overlap takes a consistent copy under the same lock
// (binding()); holding the copy's storage keeps the memory and its engine
// var alive. Only pointers handed out without a handle, var() and
// raw_data(), can outlive their binding: a reader that may race a rebind
// takes them from a snapshot() it holds. The lock is a spinlock taken for a
// few instructions; a dispatched op takes it once per input (Note
// [Snapshots inside the call] in kernels/dispatch.cc).

// A spinlock that copies as a new, unlocked one, so that TensorImpl stays
// copyable: a copy is a different impl, with a lock of its own.
class BindingLock : public Spinlock {
 public:
  BindingLock() = default;
  BindingLock(const BindingLock&) : Spinlock() {}
  BindingLock& operator=(const BindingLock&) { return *this; }
};

// The state a Tensor handle shares. Code that creates an impl sets its
// fields directly while no other thread can reach it; afterwards storage
// and byte_offset change only through rebind() (Note [Rebinding while other
// threads read]).
struct TensorImpl {
  TensorImpl() = default;
  // A snapshot of `of`: its shape, dtype and binding at one instant, no
  // autograd state, and `frozen` as given; no later rebind of `of` moves it.
  struct SnapshotOf {
    const TensorImpl& of;
    bool frozen;
  };
  explicit TensorImpl(SnapshotOf snapshot);

  Shape shape;
  DType dtype = DType::kFloat32;
  std::shared_ptr<Storage> storage;
  size_t byte_offset = 0;
  std::shared_ptr<AutogradMeta> autograd;
  // Set while nothing can rebind the impl (a kernel's snapshots; a call's
  // new outputs until it returns them, Note [Snapshots inside the call] in
  // kernels/dispatch.cc): its binding is then read without the lock, and
  // rebind() refuses it.
  bool frozen = false;
  mutable BindingLock binding_lock;

  // What the impl refers to at one instant. Holding it keeps the storage,
  // and so its memory and var, alive.
  struct Binding {
    std::shared_ptr<Storage> storage;
    size_t byte_offset = 0;
  };
  Binding binding() const;
  // `read(storage, byte_offset)`, under the lock unless frozen: for reads
  // that keep nothing alive, whose results are valid while the binding is.
  template <class Read>
  auto read_binding(Read read) const {
    if (frozen) return read(*storage, byte_offset);
    std::lock_guard lock(binding_lock);
    return read(*storage, byte_offset);
  }
  // Refers to `to` from now on; the storage it referred to before is
  // released outside the lock. Throws tandem::Error for a frozen impl.
  void rebind(Binding to);
};

class Tensor {
 public:
  // An undefined tensor: no storage; most methods throw on it.
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // Uninitialized memory of the given shape.
  static Tensor empty(Shape shape, DType dtype = DType::kFloat32, Device device = Device::cpu());

  // A new CPU tensor holding a copy of `values`; throws if their count does
  // not match `shape`. T is one of the element types of dtype.h.
  template <class T>
  static Tensor from_vector(absl::Span<const T> values, Shape shape,
                            std::source_location where = std::source_location::current());
  template <class T>
  static Tensor from_vector(std::initializer_list<T> values, Shape shape,
                            std::source_location where = std::source_location::current()) {
    return from_vector(absl::Span<const T>(values.begin(), values.size()), std::move(shape), where);
  }
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, Shape shape,
                            std::source_location where = std::source_location::current()) {
    if constexpr (std::is_same_v<T, bool>) {
      // std::vector<bool> packs bits; unpack into one byte per element.
      std::unique_ptr<bool[]> bytes(new bool[values.size()]);
      std::copy(values.begin(), values.end(), bytes.get());
      return from_vector(absl::Span<const bool>(bytes.get(), values.size()), std::move(shape),
                         where);
    } else {
      return from_vector(absl::Span<const T>(values), std::move(shape), where);
    }
  }

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  DType dtype() const { return impl().dtype; }
  Device device() const {
    return impl().read_binding([](const Storage& s, size_t) { return s.device(); });
  }
  int rank() const { return shape().rank(); }
  int64_t numel() const { return shape().numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype()); }

  // What the tensor refers to now, read at one instant (Note [Rebinding
  // while other threads read]): storage() and byte_offset() read apart may
  // come from two bindings; binding() never does.
  TensorImpl::Binding binding() const { return impl().binding(); }
  std::shared_ptr<Storage> storage() const { return binding().storage; }
  size_t byte_offset() const {
    return impl().read_binding([](const Storage&, size_t offset) { return offset; });
  }
  // The var of the storage; valid while that storage lives, which a
  // concurrent assign_ can end: then take it from a snapshot() you hold.
  engine::Var* var() const {
    return impl().read_binding([](const Storage& s, size_t) { return s.var(); });
  }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

  // The first element, without waiting (see the header comment); valid as
  // long as var() is.
  void* raw_data() const {
    return impl().read_binding(
        [](const Storage& s, size_t offset) { return static_cast<char*>(s.data()) + offset; });
  }
  // Typed `raw_data()`; throws if T does not match the dtype.
  template <class T>
  T* data() const;

  // A view with a new shape of the same element count; one dimension may be
  // -1 and is then inferred.
  Tensor reshape(absl::Span<const int64_t> dims,
                 std::source_location where = std::source_location::current()) const;
  // A view of rows [begin, end) of the leading axis.
  Tensor slice(int64_t begin, int64_t end,
               std::source_location where = std::source_location::current()) const;
  // A view of row `index` of the leading axis, which it drops.
  Tensor select(int64_t index, std::source_location where = std::source_location::current()) const;
  // select(index); its errors carry no source line (an operator cannot take one).
  Tensor operator[](int64_t index) const { return select(index, std::source_location{}); }

  // A new handle on the data this tensor refers to now (same storage, offset,
  // shape and dtype, no autograd state): later assign_ calls on this tensor
  // do not move it. Dispatch gives kernels snapshots for that reason.
  Tensor snapshot() const;
  // snapshot() under another shape of the same element count, told to no
  // observer: for dispatch, whose observers see the op call that made it
  // (OpDef::is_view in kernels/registry.h).
  Tensor snapshot_as(Shape shape) const;

  // Makes this tensor (and every handle sharing it) refer to `value`'s data,
  // keeping its autograd state: how optimizers update parameters in place.
  // Shapes, dtypes and devices must match. Ops already pushed keep the data
  // they were given. Other threads may read the tensor meanwhile (Note
  // [Rebinding while other threads read]); two threads assigning the same
  // tensor at once leave it bound to one of the two values.
  void assign_(const Tensor& value,
               std::source_location where = std::source_location::current()) const;

  // A copy on `device` (this tensor itself when it is there already), made
  // by the to_device op, so autograd and the tracer see it: gradients flow
  // back to this tensor's device. Needs tandem::eager (Note [Eager hooks] in
  // core/eager_hooks.h).
  Tensor to(Device device, std::source_location where = std::source_location::current()) const;

  // A copy in page-locked host memory, which copies to a CUDA device read
  // without staging (and so without holding up the device's worker); this
  // tensor itself if it is pinned. CPU tensors only; needs a CUDA device.
  Tensor pin_memory(std::source_location where = std::source_location::current()) const;
  bool is_pinned() const;

  // Blocks until every pushed write of this tensor's storage has finished;
  // throws the failure of the op that produced it, if any.
  void wait_to_read(std::source_location where = std::source_location::current()) const;

  // Waits, then copies the elements out (from a GPU too); T must match the
  // dtype.
  template <class T>
  std::vector<T> to_vector(std::source_location where = std::source_location::current()) const;
  // Waits, then returns the only element; throws unless numel() == 1.
  template <class T>
  T item(std::source_location where = std::source_location::current()) const;

  // Waits, then formats shape, dtype, device and (a summary of) the values.
  std::string to_string() const;

  // Autograd, as in PyTorch. The tape is eager's (eager/autograd.h): all but
  // detach() need tandem::eager (Note [Eager hooks] in core/eager_hooks.h).
  //
  //   Tensor w = tandem::randn({3, 2}).requires_grad_();
  //   Tensor loss = tandem::sum(tandem::matmul(x, w));
  //   loss.backward();
  //   w.grad();  // d loss / d w
  //
  // Marks a floating-point leaf tensor as needing its gradient.
  Tensor& requires_grad_(bool requires_grad = true);
  // True for leaves marked so, and for results of differentiable ops on them.
  bool requires_grad() const;
  // The gradient accumulated in a leaf by backward(); undefined before.
  Tensor grad() const;
  // Clears a leaf's accumulated gradient.
  void zero_grad_() const;
  // Back-propagates from this tensor (a scalar unless `gradient` is given)
  // into every leaf that requires grad, accumulating into their grad().
  // The graph is freed afterwards unless `retain_graph`; a second backward
  // through a freed graph is a tandem::Error.
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false) const;
  // The same data, cut from the graph: no grad_fn, not requiring grad.
  Tensor detach() const;

 private:
  const TensorImpl& impl() const;

  std::shared_ptr<TensorImpl> impl_;
};

}  // namespace tandem
