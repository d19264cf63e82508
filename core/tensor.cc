#include "core/tensor.h"

#include <cstring>

#include "core/cuda/runtime.h"
#include "core/eager_hooks.h"
#include "core/engine/engine.h"
#include "core/engine/object_pool.h"
#include "core/error.h"
#include "core/tensor_observer.h"

namespace tandem {
namespace {

template <class T>
void check_dtype(const Tensor& t, const char* what) {
  TANDEM_CHECK(t.dtype() == dtype_of<T>(), what, "<", dtype_name(dtype_of<T>()),
               ">: the tensor has dtype ", dtype_name(t.dtype()));
}

// Handles are created on the frontend and mostly released on workers (by op
// closures); the pool serves that pattern without malloc's cross-thread cost.
std::shared_ptr<TensorImpl> new_impl() {
  return std::allocate_shared<TensorImpl>(engine::PoolAllocator<TensorImpl>());
}

// A view of `binding`'s storage, `offset` bytes further in.
Tensor view(TensorImpl::Binding binding, Shape shape, DType dtype, size_t offset = 0) {
  auto impl = new_impl();
  impl->shape = std::move(shape);
  impl->dtype = dtype;
  impl->storage = std::move(binding.storage);
  impl->byte_offset = binding.byte_offset + offset;
  return Tensor(std::move(impl));
}

// A view the user made (reshape, slice, select), told to this thread's
// observer: a tracer records it as a node at the user's line.
// `offset` bytes past where `base` starts, at one instant of its binding.
Tensor user_view(const Tensor& base, Shape shape, size_t offset,
                 const std::source_location& where) {
  Tensor result = view(base.binding(), std::move(shape), base.dtype(), offset);
  if (TensorObserver* observer = current_tensor_observer()) {
    observer->on_view(result, base, where);
  }
  return result;
}

// Bytes between consecutive entries of the leading axis.
size_t row_bytes(const Tensor& t) {
  return static_cast<size_t>(t.shape().stride(0)) * dtype_size(t.dtype());
}

// Elements printed per axis at each end once a tensor is too big to print.
constexpr int64_t kSummaryEdge = 3;
constexpr int64_t kSummaryThreshold = 1000;

template <class T>
void append_value(std::string& out, const void* data, int64_t i) {
  T value = static_cast<const T*>(data)[i];
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    out += str_cat(static_cast<float>(value));
  } else if constexpr (std::is_same_v<T, bool>) {
    out += value ? "true" : "false";
  } else if constexpr (std::is_same_v<T, uint8_t>) {
    out += str_cat(static_cast<int>(value));
  } else {
    out += str_cat(value);
  }
}

void append_element(std::string& out, DType dtype, const void* data, int64_t i) {
  switch (dtype) {
    case DType::kFloat32:
      return append_value<float>(out, data, i);
    case DType::kFloat64:
      return append_value<double>(out, data, i);
    case DType::kFloat16:
      return append_value<Half>(out, data, i);
    case DType::kBFloat16:
      return append_value<BFloat16>(out, data, i);
    case DType::kInt32:
      return append_value<int32_t>(out, data, i);
    case DType::kInt64:
      return append_value<int64_t>(out, data, i);
    case DType::kUInt8:
      return append_value<uint8_t>(out, data, i);
    case DType::kBool:
      return append_value<bool>(out, data, i);
  }
}

// Nested brackets, one axis per level; long axes are cut to their ends.
void append_values(std::string& out, const Tensor& t, int axis, int64_t offset, bool summarize) {
  if (axis == t.rank()) {
    append_element(out, t.dtype(), t.raw_data(), offset);
    return;
  }
  int64_t size = t.shape()[axis];
  int64_t stride = t.shape().stride(axis);
  out += '[';
  for (int64_t i = 0; i < size; ++i) {
    if (summarize && size > 2 * kSummaryEdge && i == kSummaryEdge) {
      out += "..., ";
      i = size - kSummaryEdge;
    }
    append_values(out, t, axis + 1, offset + i * stride, summarize);
    if (i + 1 < size) out += axis + 1 == t.rank() ? ", " : ",\n";
  }
  out += ']';
}

thread_local TensorObserver* tensor_observer = nullptr;

void notify_value_read(const Tensor& tensor, const char* what, const std::source_location& where) {
  if (tensor_observer != nullptr) tensor_observer->on_value_read(tensor, what, where);
}

}  // namespace

TensorImpl::Binding TensorImpl::binding() const {
  if (frozen) return {storage, byte_offset};
  std::lock_guard lock(binding_lock);
  return {storage, byte_offset};
}

void TensorImpl::rebind(Binding to) {
  TANDEM_CHECK(!frozen, "cannot rebind a kernel's snapshot of a tensor");
  {
    std::lock_guard lock(binding_lock);
    std::swap(storage, to.storage);
    byte_offset = to.byte_offset;
  }
  // `to` now holds the old storage, released here, outside the lock: its
  // destructor hands the memory to the engine.
}

TensorImpl::TensorImpl(SnapshotOf snapshot)
    : shape(snapshot.of.shape), dtype(snapshot.of.dtype), frozen(snapshot.frozen) {
  Binding now = snapshot.of.binding();
  storage = std::move(now.storage);
  byte_offset = now.byte_offset;
}

const TensorImpl& Tensor::impl() const {
  TANDEM_CHECK(impl_ != nullptr, "the tensor is undefined (default-constructed)");
  return *impl_;
}

Tensor Tensor::empty(Shape shape, DType dtype, Device device) {
  auto impl = new_impl();
  size_t nbytes = static_cast<size_t>(
      checked_mul(shape.numel(), static_cast<int64_t>(dtype_size(dtype)), "tensor byte size"));
  impl->storage = std::allocate_shared<Storage>(engine::PoolAllocator<Storage>(), nbytes, device);
  KeepNewStorages::note(impl->storage);
  impl->shape = std::move(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

template <class T>
Tensor Tensor::from_vector(absl::Span<const T> values, Shape shape, std::source_location where) {
  CallSiteScope site("from_vector", where);
  TANDEM_CHECK(static_cast<int64_t>(values.size()) == shape.numel(), values.size(),
               " values cannot fill shape ", shape.to_string(), " of ", shape.numel(), " elements");
  Tensor t = empty(std::move(shape), dtype_of<T>());
  // The storage is brand new: no op can be using it yet, so copy directly.
  if (!values.empty()) std::memcpy(t.raw_data(), values.data(), t.nbytes());
  return t;
}

template <class T>
T* Tensor::data() const {
  check_dtype<T>(*this, "data");
  return static_cast<T*>(raw_data());
}

Tensor Tensor::reshape(absl::Span<const int64_t> dims, std::source_location where) const {
  CallSiteScope site("reshape", where);
  Shape::Dims resolved(dims.begin(), dims.end());
  int inferred = -1;
  int64_t known = 1;
  for (int i = 0; i < static_cast<int>(resolved.size()); ++i) {
    if (resolved[i] == -1) {
      TANDEM_CHECK(inferred < 0, "only one dimension may be -1, got two in reshape of ",
                   shape().to_string());
      inferred = i;
    } else {
      TANDEM_CHECK(resolved[i] >= 0, "invalid dimension ", resolved[i], " at axis ", i);
      known = checked_mul(known, resolved[i], "reshape element count");
    }
  }
  if (inferred >= 0) {
    TANDEM_CHECK(known != 0 && numel() % known == 0, "cannot reshape ", shape().to_string(), " (",
                 numel(), " elements) with a -1 dimension: ", numel(), " is not a multiple of ",
                 known);
    resolved[inferred] = numel() / known;
  }
  Shape target(resolved);
  TANDEM_CHECK(target.numel() == numel(), "cannot reshape ", shape().to_string(), " (", numel(),
               " elements) to ", target.to_string(), " (", target.numel(), " elements)");
  return user_view(*this, std::move(target), 0, where);
}

Tensor Tensor::slice(int64_t begin, int64_t end, std::source_location where) const {
  CallSiteScope site("slice", where);
  TANDEM_CHECK(rank() >= 1, "cannot slice a scalar (rank 0)");
  int64_t rows = shape()[0];
  TANDEM_CHECK(0 <= begin && begin <= end && end <= rows, "slice [", begin, ", ", end,
               ") is out of range for leading dimension ", rows, " of shape ", shape().to_string());
  Shape::Dims dims(shape().begin(), shape().end());
  dims[0] = end - begin;
  return user_view(*this, Shape(dims), static_cast<size_t>(begin) * row_bytes(*this), where);
}

Tensor Tensor::select(int64_t index, std::source_location where) const {
  CallSiteScope site("select", where);
  TANDEM_CHECK(rank() >= 1, "cannot index a scalar (rank 0)");
  TANDEM_CHECK(0 <= index && index < shape()[0], "index ", index,
               " is out of range for leading dimension ", shape()[0], " of shape ",
               shape().to_string());
  return user_view(*this, Shape(shape().dims().subspan(1)),
                   static_cast<size_t>(index) * row_bytes(*this), where);
}

Tensor Tensor::snapshot() const { return view(binding(), shape(), dtype()); }

Tensor Tensor::snapshot_as(Shape shape) const {
  TANDEM_INTERNAL_ASSERT(shape.numel() == numel(), "snapshot_as ", shape.to_string(), " of a ",
                         this->shape().to_string(), " tensor");
  return view(binding(), std::move(shape), dtype());
}

Tensor Tensor::detach() const { return snapshot(); }

// The methods eager implements (Note [Eager hooks]).
Tensor Tensor::to(Device device, std::source_location where) const {
  return eager_hooks("to").to(*this, device, where);
}

Tensor& Tensor::requires_grad_(bool requires_grad) {
  eager_hooks("requires_grad_").set_requires_grad(*this, requires_grad);
  return *this;
}

bool Tensor::requires_grad() const { return eager_hooks("requires_grad").requires_grad(*this); }

Tensor Tensor::grad() const { return eager_hooks("grad").grad(*this); }

void Tensor::zero_grad_() const { eager_hooks("zero_grad_").zero_grad(*this); }

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  eager_hooks("backward").backward(*this, gradient, retain_graph);
}

void Tensor::assign_(const Tensor& value, std::source_location where) const {
  CallSiteScope site("assign_", where);
  TensorImpl::Binding to = value.binding();
  TANDEM_CHECK(
      value.shape() == shape() && value.dtype() == dtype() && to.storage->device() == device(),
      "cannot assign a ", dtype_name(value.dtype()), value.shape().to_string(), " ",
      to.storage->device().to_string(), " tensor to a ", dtype_name(dtype()), shape().to_string(),
      " ", device().to_string(), " one");
  impl_->rebind(std::move(to));
  if (TensorObserver* observer = current_tensor_observer()) observer->on_assign(*this, value);
}

namespace {

// The values `t` refers to now, in host memory, for reading them once the
// result's var is waited for: a snapshot of `t` on the CPU (a concurrent
// assign_ cannot move what it reads, Note [Rebinding while other threads
// read]); for a GPU tensor a copy, pushed on its device like any op.
Tensor on_host(const Tensor& t, const std::source_location& where) {
  Tensor from = t.snapshot();
  if (from.device().is_cpu()) return from;
  Tensor host = Tensor::empty(from.shape(), from.dtype(), Device::cpu());
  engine::current().push(
      [from, to = host.snapshot()](const engine::RunContext& context) {
        if (from.nbytes() != 0) {
          cuda::copy_async(to.raw_data(), from.raw_data(), from.nbytes(), context.stream);
        }
      },
      from.device(), {from.var()}, {host.var()}, "copy_to_host", where);
  return host;
}

}  // namespace

Tensor Tensor::pin_memory(std::source_location where) const {
  CallSiteScope site("pin_memory", where);
  TANDEM_CHECK(device().is_cpu(), "only CPU tensors can be pinned; this one is on ",
               device().to_string());
  Tensor from = snapshot();
  if (from.is_pinned()) return *this;
  auto impl = new_impl();
  impl->storage =
      std::allocate_shared<Storage>(engine::PoolAllocator<Storage>(), nbytes(), device(), true);
  impl->shape = shape();
  impl->dtype = dtype();
  Tensor pinned(std::move(impl));
  engine::current().push(
      [from, to = pinned.snapshot()](const engine::RunContext&) {
        if (from.nbytes() != 0) std::memcpy(to.raw_data(), from.raw_data(), from.nbytes());
      },
      Device::cpu(), {from.var()}, {pinned.var()}, "pin_memory", where);
  return pinned;
}

bool Tensor::is_pinned() const { return storage()->pinned(); }

void Tensor::wait_to_read(std::source_location where) const {
  CallSiteScope site("wait_to_read", where);
  notify_value_read(*this, "wait_to_read", where);
  TensorImpl::Binding now = binding();  // Keeps the var alive while waiting.
  engine::current().wait(now.storage->var());
}

template <class T>
std::vector<T> Tensor::to_vector(std::source_location where) const {
  CallSiteScope site("to_vector", where);
  check_dtype<T>(*this, "to_vector");
  notify_value_read(*this, "to_vector", where);
  Tensor host = on_host(*this, where);
  engine::current().wait(host.var());
  const T* begin = static_cast<const T*>(host.raw_data());
  return std::vector<T>(begin, begin + numel());
}

template <class T>
T Tensor::item(std::source_location where) const {
  CallSiteScope site("item", where);
  TANDEM_CHECK(numel() == 1, "item() needs exactly one element, the tensor has shape ",
               shape().to_string());
  check_dtype<T>(*this, "item");
  notify_value_read(*this, "item", where);
  Tensor host = on_host(*this, where);
  engine::current().wait(host.var());
  return *static_cast<const T*>(host.raw_data());
}

std::string Tensor::to_string() const {
  if (!defined()) return "Tensor(undefined)";
  notify_value_read(*this, "to_string", current_call_site().where);
  Tensor host = on_host(*this, current_call_site().where);
  engine::current().wait(host.var());
  std::string out = str_cat("Tensor", shape().to_string(), " ", dtype_name(dtype()), " ",
                            device().to_string(), "\n");
  append_values(out, host, 0, 0, numel() > kSummaryThreshold);
  return out;
}

TensorObserverScope::TensorObserverScope(TensorObserver* observer) : previous_(tensor_observer) {
  tensor_observer = observer;
}
TensorObserverScope::~TensorObserverScope() { tensor_observer = previous_; }
TensorObserver* current_tensor_observer() { return tensor_observer; }

#define TANDEM_INSTANTIATE_ELEMENT_TYPE(T)                                                  \
  template Tensor Tensor::from_vector<T>(absl::Span<const T>, Shape, std::source_location); \
  template T* Tensor::data<T>() const;                                                      \
  template std::vector<T> Tensor::to_vector<T>(std::source_location) const;                 \
  template T Tensor::item<T>(std::source_location) const;

TANDEM_INSTANTIATE_ELEMENT_TYPE(float)
TANDEM_INSTANTIATE_ELEMENT_TYPE(double)
TANDEM_INSTANTIATE_ELEMENT_TYPE(Half)
TANDEM_INSTANTIATE_ELEMENT_TYPE(BFloat16)
TANDEM_INSTANTIATE_ELEMENT_TYPE(int32_t)
TANDEM_INSTANTIATE_ELEMENT_TYPE(int64_t)
TANDEM_INSTANTIATE_ELEMENT_TYPE(uint8_t)
TANDEM_INSTANTIATE_ELEMENT_TYPE(bool)
#undef TANDEM_INSTANTIATE_ELEMENT_TYPE

}  // namespace tandem
