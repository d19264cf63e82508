#include "kernels/dispatch.h"

#include <algorithm>
#include <atomic>
#include <mutex>

#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"

#include "core/engine/object_pool.h"
#include "core/error.h"
#include "kernels/arity.h"
#include "kernels/communicator.h"
#include "kernels/cpu/team_binding.h"
#include "kernels/known_ops.h"
#include "kernels/thread_budget.h"

namespace tandem::kernels {
namespace {

thread_local std::vector<DispatchObserver*> observers;

// Process-wide observers: written rarely, read on every call without a lock.
constexpr int kMaxProcessObservers = 4;
std::atomic<DispatchObserver*> process_observers[kMaxProcessObservers];

// Note [Snapshots inside the call]
// A kernel must read the data its vars guard even if a handle is rebound
// (Tensor::assign_, perhaps on another thread) before or while the kernel
// runs, so it gets snapshots: handles of its own on the same storage,
// offset, shape and dtype, taken once when the call begins, from which the
// call also takes its vars (Note [Rebinding while other threads read] in
// core/tensor.h). Allocating a TensorImpl per snapshot was a fifth of the
// cost of a tiny op; instead the snapshots' TensorImpls live in the call's
// stack frame (InputSnapshots), and for a pushed op move into the
// KernelCall block, and the kernel's handles point at them without owning
// them (an aliasing shared_ptr with no control block: copying one costs
// nothing). That is safe because a kernel uses its context only while it
// runs, and the snapshots outlive the run. They are frozen, so reading them
// takes no lock; so are the call's new outputs until it returns them. A
// kernel must not keep a copy of a context handle past its return.
Tensor unowned_handle(TensorImpl& impl) {
  return Tensor(std::shared_ptr<TensorImpl>(std::shared_ptr<TensorImpl>(), &impl));
}

// Frozen snapshots of a call's inputs and handles on them.
class InputSnapshots {
 public:
  explicit InputSnapshots(absl::Span<const Tensor> inputs) {
    impls_.reserve(inputs.size());
    for (const Tensor& t : inputs) {
      impls_.emplace_back(TensorImpl::SnapshotOf{*t.impl_ptr(), /*frozen=*/true});
    }
    for (TensorImpl& impl : impls_) handles_.push_back(unowned_handle(impl));
  }
  absl::Span<const Tensor> handles() const { return handles_; }
  // Hands the snapshots over; handles() must not be used afterwards.
  absl::InlinedVector<TensorImpl, 3> take() { return std::move(impls_); }

 private:
  absl::InlinedVector<TensorImpl, 3> impls_;
  absl::InlinedVector<Tensor, 4> handles_;
};

// An op's attributes for one call: the caller's, resolved against the
// op's schema (resolve_attrs, which throws for bad ones), or the op's
// defaults, shared rather than copied, for a call that gives none.
class CallAttrs {
 public:
  CallAttrs(const OpDef& op, const Attrs& given) {
    if (given.items().empty() && !op.has_required_attrs) {
      shared_ = &op.defaults;
    } else {
      owned_ = resolve_attrs(op, given);
    }
  }
  const Attrs& get() const { return shared_ != nullptr ? *shared_ : owned_; }

 private:
  const Attrs* shared_ = nullptr;
  Attrs owned_;
};

// Everything a pushed kernel needs, in one pooled block, so the closure is a
// single pointer (see engine::OpFn's inline size).
struct KernelCall {
  // User-provided, so that allocation does not first zero the whole block.
  KernelCall(const OpDef& op, KernelFn kernel, CallAttrs attrs)
      : op(&op), kernel(kernel), attrs(std::move(attrs)) {}

  // Takes the inputs' snapshots, adds snapshots of `outputs`, and points the
  // kernel's handles at them (Note [Snapshots inside the call]).
  void snapshot(InputSnapshots& inputs, absl::Span<const Tensor> outputs) {
    impls = inputs.take();
    const size_t num_inputs = impls.size();
    for (const Tensor& t : outputs) {
      impls.emplace_back(TensorImpl::SnapshotOf{*t.impl_ptr(), /*frozen=*/true});
    }
    // No more reallocation: the handles can point into `impls`.
    for (size_t i = 0; i < num_inputs; ++i) this->inputs.push_back(unowned_handle(impls[i]));
    for (size_t i = num_inputs; i < impls.size(); ++i) {
      this->outputs.push_back(unowned_handle(impls[i]));
    }
  }

  const OpDef* op;
  KernelFn kernel;
  CallAttrs attrs;
  absl::InlinedVector<TensorImpl, 3> impls;
  absl::InlinedVector<Tensor, 4> inputs;
  absl::InlinedVector<Tensor, 2> outputs;
};

// Held by a kernel that uses every core; see Note [Thread budget].
std::mutex& all_cores() {
  static std::mutex mu;
  return mu;
}
// Whether this thread holds all_cores(): AllCoresLock is re-entrant.
thread_local bool holds_all_cores = false;

// The first run of a oneDNN kernel may create static state inside oneDNN
// (JIT kernels for that primitive kind). So that the engine drains before
// such state is destroyed at exit, register the drain again after it, once
// per op (see Note [oneDNN at exit] in cpu/onednn.cc). Called under
// AllCoresLock.
void note_first_run(const OpDef& op) {
  static absl::flat_hash_set<const OpDef*>* ran = new absl::flat_hash_set<const OpDef*>;
  if (ran->insert(&op).second) engine::finish_before_exit();
}

// Whether a call is cheaper to run than to hand to a worker (Note [Tiny ops
// run inline] in core/engine/threaded_engine.cc): a single-threaded kernel
// that touches at most this many elements, inputs and outputs together (an
// add of ~1400 floats, well under a microsecond). Kernels that use every
// core are never tiny: they take the all-cores lock, which a frontend must
// not wait for behind a long convolution.
constexpr int64_t kTinyElements = 4096;

// Elements a call touches, inputs and outputs together: the size that
// decides is_tiny.
int64_t elements_of(absl::Span<const Tensor> inputs, absl::Span<const Tensor> outputs) {
  int64_t elements = 0;
  for (const Tensor& t : inputs) elements += t.numel();
  for (const Tensor& t : outputs) elements += t.numel();
  return elements;
}

// The shapes of a call's tensors, as OpDef::one_core and OpDef::work see them.
class ShapesOf {
 public:
  ShapesOf(absl::Span<const Tensor> inputs, absl::Span<const Tensor> outputs) {
    for (const Tensor& t : inputs) inputs_.push_back(&t.shape());
    for (const Tensor& t : outputs) outputs_.push_back(&t.shape());
  }
  CallShapes view() const { return {inputs_, outputs_}; }

 private:
  absl::InlinedVector<const Shape*, 4> inputs_, outputs_;
};

bool is_tiny(const OpDef& op, absl::Span<const Tensor> inputs, absl::Span<const Tensor> outputs) {
  if (op.work == nullptr && op.one_core == nullptr) {
    return !op.uses_all_cores && elements_of(inputs, outputs) <= kTinyElements;
  }
  const ShapesOf shapes(inputs, outputs);
  const int64_t work = op.work != nullptr ? op.work(shapes.view()) : elements_of(inputs, outputs);
  return work <= kTinyElements && !uses_all_cores(op, shapes.view());
}

// A rank-0 CPU tensor is a scalar operand, welcome beside tensors on any
// device (as in PyTorch): gradient formulas use such constants.
bool is_cpu_scalar(const Tensor& t) { return t.device().is_cpu() && t.rank() == 0; }

// The device of the inputs, ignoring CPU scalars unless all are.
Device common_device(absl::Span<const Tensor> inputs) {
  size_t first = 0;
  while (first < inputs.size() && is_cpu_scalar(inputs[first])) ++first;
  if (first == inputs.size()) return Device::cpu();
  Device device = inputs[first].device();
  for (size_t i = first + 1; i < inputs.size(); ++i) {
    TANDEM_CHECK(inputs[i].device() == device || is_cpu_scalar(inputs[i]), "input ", i, " is on ",
                 inputs[i].device().to_string(), " but input ", first, " is on ",
                 device.to_string(), "; move tensors to one device first");
  }
  return device;
}

}  // namespace

AllCoresLock::AllCoresLock() : outermost_(!holds_all_cores) {
  if (outermost_) {
    all_cores().lock();
    holds_all_cores = true;
  }
}

AllCoresLock::~AllCoresLock() {
  if (outermost_) {
    holds_all_cores = false;
    all_cores().unlock();
  }
}

bool uses_all_cores(const OpDef& op, const CallShapes& shapes) {
  return op.uses_all_cores && (op.one_core == nullptr || !op.one_core(shapes));
}

bool uses_all_cores(const OpDef& op, absl::Span<const Tensor> inputs,
                    absl::Span<const Tensor> outputs) {
  if (!op.uses_all_cores) return false;
  if (op.one_core == nullptr) return true;
  return !op.one_core(ShapesOf(inputs, outputs).view());
}

void run_kernel(const OpDef& op, KernelFn kernel, const KernelContext& context) {
  if (context.run.device.is_cpu() && uses_all_cores(op, context.inputs, context.outputs)) {
    // See Note [Thread budget] and Note [Binding the team to cores].
    AllCoresLock lock;
    bind_team_to_cores(context.run.worker);
    kernel(context);
    note_first_run(op);
  } else {
    kernel(context);
  }
}

namespace {

// call()'s body. Outputs stay inline: a call of a one-output op allocates
// no vector for them.
using Outputs = absl::InlinedVector<Tensor, 2>;

// Tells the process's observers, then this thread's, of a call.
void notify_observers(const OpDef& op, absl::Span<const Tensor> given, const Outputs& outputs,
                      const Attrs& resolved, const std::source_location& where) {
  for (auto& slot : process_observers) {
    if (DispatchObserver* observer = slot.load(std::memory_order_acquire)) {
      observer->on_op(op, given, outputs, resolved, where);
    }
  }
  for (DispatchObserver* observer : observers) {
    observer->on_op(op, given, outputs, resolved, where);
  }
}

// A call's new outputs, frozen until it returns them: no other thread can
// reach them before, so the kernel and the snapshots read them without the
// lock (Note [Snapshots inside the call]).
class FrozenOutputs {
 public:
  explicit FrozenOutputs(Outputs& outputs) : outputs_(outputs) { set_frozen(true); }
  ~FrozenOutputs() {
    if (!released_) set_frozen(false);  // An exception: whoever kept one may rebind it.
  }
  FrozenOutputs(const FrozenOutputs&) = delete;
  FrozenOutputs& operator=(const FrozenOutputs&) = delete;

  // Unfreezes the outputs and moves them out, for the call to return.
  Outputs release() {
    set_frozen(false);
    released_ = true;
    return std::move(outputs_);
  }

 private:
  void set_frozen(bool frozen) {
    for (Tensor& t : outputs_) t.impl_ptr()->frozen = frozen;
  }
  Outputs& outputs_;
  bool released_ = false;
};
Outputs dispatch(const OpDef& op, absl::Span<const Tensor> inputs, const Attrs& attrs,
                 const std::source_location& where);

// dispatch() for an op on a GPU with CPU scalar operands: moves them to the
// device first, as ops of their own (which autograd and the tracer see).
Outputs dispatch_with_scalars_on(Device device, const OpDef& op, absl::Span<const Tensor> inputs,
                                 const Attrs& attrs, const std::source_location& where) {
  absl::InlinedVector<Tensor, 4> moved(inputs.begin(), inputs.end());
  for (Tensor& t : moved) {
    if (is_cpu_scalar(t)) {
      t = call1(to_device_op(), {t}, Attrs{{"device", device.to_string()}}, where);
    }
  }
  return dispatch(op, moved, attrs, where);
}

Outputs dispatch(const OpDef& op, absl::Span<const Tensor> given, const Attrs& attrs,
                 const std::source_location& where) {
  CallSiteScope site(op.name.c_str(), where);
  engine::drain_when_main_thread_exits();  // Note [Draining at exit] in core/engine/engine.cc.
  check_input_count(op, given.size());
  for (size_t i = 0; i < given.size(); ++i) {
    TANDEM_CHECK(given[i].defined(), "input ", i, " is an undefined tensor");
  }
  // From here on the call reads its snapshots of the inputs; the observers
  // see the caller's own tensors.
  InputSnapshots snapshots(given);
  absl::Span<const Tensor> inputs = snapshots.handles();
  const Device device = common_device(inputs);
  CallAttrs call_attrs(op, attrs);
  // Valid until call_attrs moves into the pushed call, at the end.
  const Attrs& resolved = call_attrs.get();
  const Device output_device = op.output_device ? op.output_device(resolved) : device;
  const Device run_device = output_device.is_cuda() ? output_device : device;
  const KernelFn kernel = run_device.is_cpu() ? op.cpu : op.cuda;
  TANDEM_CHECK(kernel != nullptr, "has no kernel for ", run_device.to_string());
  if (device.is_cuda()) {
    for (const Tensor& t : inputs) {
      if (is_cpu_scalar(t)) return dispatch_with_scalars_on(device, op, given, resolved, where);
    }
  }

  absl::InlinedVector<TensorMeta, 4> metas;
  for (const Tensor& t : inputs) metas.push_back({t.shape(), t.dtype()});
  TensorMetas inferred = op.infer(metas, resolved);
  TANDEM_INTERNAL_ASSERT(
      op.num_outputs == kVariadic || static_cast<int>(inferred.size()) == op.num_outputs, "op '",
      op.name, "' inferred ", inferred.size(), " outputs, declares ", op.num_outputs);
  Outputs outputs;
  // A thread-local observer (a tracer) identifies values by their storage,
  // which a view shares with its input: there the op copies, as in a graph.
  // So does a reshape to the same shape, whose view a tracer could not tell
  // from its input later (f({x, flatten(x)}) with x 2-D: two inputs).
  if (op.is_view && observers.empty() && inferred[0].shape != inputs[0].shape()) {
    TANDEM_INTERNAL_ASSERT(
        inferred.size() == 1 && inferred[0].dtype == inputs[0].dtype() && output_device == device,
        "op '", op.name, "' is a view but changes more than the shape");
    outputs.push_back(inputs[0].snapshot_as(std::move(inferred[0].shape)));
    notify_observers(op, given, outputs, resolved, where);
    return outputs;
  }
  outputs.reserve(inferred.size());
  for (TensorMeta& meta : inferred) {
    outputs.push_back(Tensor::empty(std::move(meta.shape), meta.dtype, output_device));
  }
  FrozenOutputs frozen(outputs);
  notify_observers(op, given, outputs, resolved, where);

  absl::InlinedVector<engine::Var*, 4> reads, writes;
  for (const Tensor& t : inputs) reads.push_back(t.var());
  for (const Tensor& t : outputs) writes.push_back(t.var());
  // Note [Collectives run in program order] in kernels/communicator.h.
  if (op.collective) writes.push_back(collective_order_var(run_device));
  engine::Engine& engine = engine::current();
  if (run_device.is_cpu() && !op.collective && is_tiny(op, inputs, outputs)) {
    // Note [Tiny ops run inline] in core/engine/threaded_engine.cc: on the
    // inputs' snapshots and the new outputs, which nothing can rebind while
    // it runs.
    auto run_here = [&](const engine::RunContext& context) {
      run_kernel(op, kernel, KernelContext{inputs, outputs, resolved, context});
    };
    if (engine.run_if_free(run_here, reads, writes, op.name.c_str(), where)) {
      return frozen.release();
    }
  }
  auto kernel_call = std::allocate_shared<KernelCall>(engine::PoolAllocator<KernelCall>(), op,
                                                      kernel, std::move(call_attrs));
  kernel_call->snapshot(snapshots, outputs);
  engine::OpFn run = [call = std::move(kernel_call)](const engine::RunContext& context) {
    run_kernel(*call->op, call->kernel,
               KernelContext{call->inputs, call->outputs, call->attrs.get(), context});
  };
  engine.push(std::move(run), run_device, reads, writes, op.name.c_str(), where);
  return frozen.release();
}

const OpDef& find_op(std::string_view op, const std::source_location& where) {
  const OpDef* def = Registry::global().find(op);
  if (def == nullptr) {
    throw Error(str_cat("unknown op '", op, "'"), std::string(op), where);
  }
  return *def;
}

}  // namespace

std::vector<Tensor> call(const OpDef& op, absl::Span<const Tensor> inputs, const Attrs& attrs,
                         const std::source_location& where) {
  Outputs outputs = dispatch(op, inputs, attrs, where);
  return std::vector<Tensor>(std::make_move_iterator(outputs.begin()),
                             std::make_move_iterator(outputs.end()));
}

std::vector<Tensor> call(std::string_view op, absl::Span<const Tensor> inputs, const Attrs& attrs,
                         std::source_location where) {
  return call(find_op(op, where), inputs, attrs, where);
}

Tensor call1(const OpDef& op, absl::Span<const Tensor> inputs, const Attrs& attrs,
             const std::source_location& where) {
  Outputs outputs = dispatch(op, inputs, attrs, where);
  TANDEM_INTERNAL_ASSERT(outputs.size() == 1, "call1 on op '", op.name, "' with ", outputs.size(),
                         " outputs");
  return std::move(outputs[0]);
}

Tensor call1(std::string_view op, absl::Span<const Tensor> inputs, const Attrs& attrs,
             std::source_location where) {
  return call1(find_op(op, where), inputs, attrs, where);
}

void add_process_observer(DispatchObserver* observer) {
  for (auto& slot : process_observers) {
    DispatchObserver* empty = nullptr;
    if (slot.load() == observer || slot.compare_exchange_strong(empty, observer)) return;
  }
  TANDEM_INTERNAL_ASSERT(false, "more than ", kMaxProcessObservers, " process observers");
}

ObserverScope::ObserverScope(DispatchObserver* observer) : observer_(observer) {
  observers.push_back(observer);
}

ObserverScope::~ObserverScope() {
  auto it = std::find(observers.rbegin(), observers.rend(), observer_);
  if (it != observers.rend()) observers.erase(std::next(it).base());
}

}  // namespace tandem::kernels
