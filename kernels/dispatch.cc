#include "kernels/dispatch.h"

#include <algorithm>
#include <atomic>
#include <mutex>

#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"

#include "core/engine/object_pool.h"
#include "core/error.h"
#include "kernels/thread_budget.h"

namespace tandem::kernels {
namespace {

thread_local std::vector<DispatchObserver*> observers;

// Process-wide observers: written rarely, read on every call without a lock.
constexpr int kMaxProcessObservers = 4;
std::atomic<DispatchObserver*> process_observers[kMaxProcessObservers];

// Everything a pushed kernel needs, in one pooled block, so the closure is a
// single pointer (see engine::OpFn's inline size).
struct KernelCall {
  const OpDef* op;
  KernelFn kernel;
  absl::InlinedVector<Tensor, 4> inputs;
  absl::InlinedVector<Tensor, 2> outputs;
  Attrs attrs;
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

bool is_tiny(const OpDef& op, int64_t elements) {
  return !uses_all_cores(op, elements) && elements <= kTinyElements;
}

// Elements a call touches, inputs and outputs together: the size that
// decides is_tiny and uses_all_cores.
int64_t elements_of(absl::Span<const Tensor> inputs, absl::Span<const Tensor> outputs) {
  int64_t elements = 0;
  for (const Tensor& t : inputs) elements += t.numel();
  for (const Tensor& t : outputs) elements += t.numel();
  return elements;
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

bool uses_all_cores(const OpDef& op, int64_t elements) {
  return op.uses_all_cores && elements > op.single_threaded_up_to;
}

void run_kernel(const OpDef& op, KernelFn kernel, const KernelContext& context) {
  if (context.run.device.is_cpu() &&
      uses_all_cores(op, elements_of(context.inputs, context.outputs))) {
    AllCoresLock lock;  // See Note [Thread budget].
    kernel(context);
    note_first_run(op);
  } else {
    kernel(context);
  }
}

namespace {

// call() for an op on a GPU with CPU scalar operands: moves them to the
// device first, as ops of their own (which autograd and the tracer see).
std::vector<Tensor> call_with_scalars_on(Device device, const OpDef& op,
                                         absl::Span<const Tensor> inputs, const Attrs& attrs,
                                         const std::source_location& where) {
  absl::InlinedVector<Tensor, 4> moved(inputs.begin(), inputs.end());
  for (Tensor& t : moved) {
    if (is_cpu_scalar(t)) {
      t = call(Registry::global().get("to_device"), {t}, Attrs{{"device", device.to_string()}},
               where)[0];
    }
  }
  return call(op, moved, attrs, where);
}

}  // namespace

std::vector<Tensor> call(const OpDef& op, absl::Span<const Tensor> inputs, const Attrs& attrs,
                         const std::source_location& where) {
  CallSiteScope site(op.name.c_str(), where);
  if (op.num_inputs == kVariadic) {
    TANDEM_CHECK(!inputs.empty(), "expects at least one input, got none");
  } else {
    TANDEM_CHECK(static_cast<int>(inputs.size()) == op.num_inputs, "expects ", op.num_inputs,
                 op.num_inputs == 1 ? " input" : " inputs", ", got ", inputs.size());
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    TANDEM_CHECK(inputs[i].defined(), "input ", i, " is an undefined tensor");
  }
  const Device device = common_device(inputs);
  Attrs resolved = resolve_attrs(op, attrs);
  const Device output_device = op.output_device ? op.output_device(resolved) : device;
  const Device run_device = output_device.is_cuda() ? output_device : device;
  KernelFn kernel = run_device.is_cpu() ? op.cpu : op.cuda;
  TANDEM_CHECK(kernel != nullptr, "has no kernel for ", run_device.to_string());
  if (device.is_cuda()) {
    for (const Tensor& t : inputs) {
      if (is_cpu_scalar(t)) return call_with_scalars_on(device, op, inputs, resolved, where);
    }
  }

  auto kernel_call = std::allocate_shared<KernelCall>(engine::PoolAllocator<KernelCall>());
  kernel_call->op = &op;
  kernel_call->kernel = kernel;
  kernel_call->attrs = std::move(resolved);
  // Snapshots: a kernel must read the data its vars guard, even if a handle
  // is rebound (Tensor::assign_) before the kernel runs.
  for (const Tensor& t : inputs) kernel_call->inputs.push_back(t.snapshot());

  absl::InlinedVector<TensorMeta, 4> metas;
  for (const Tensor& t : inputs) metas.push_back({t.shape(), t.dtype()});
  std::vector<TensorMeta> inferred = op.infer(metas, kernel_call->attrs);
  TANDEM_INTERNAL_ASSERT(
      op.num_outputs == kVariadic || static_cast<int>(inferred.size()) == op.num_outputs, "op '",
      op.name, "' inferred ", inferred.size(), " outputs, declares ", op.num_outputs);
  std::vector<Tensor> outputs;
  outputs.reserve(inferred.size());
  for (TensorMeta& meta : inferred) {
    outputs.push_back(Tensor::empty(std::move(meta.shape), meta.dtype, output_device));
  }
  for (const Tensor& t : outputs) kernel_call->outputs.push_back(t.snapshot());

  for (auto& slot : process_observers) {
    if (DispatchObserver* observer = slot.load(std::memory_order_acquire)) {
      observer->on_op(op, inputs, outputs, kernel_call->attrs, where);
    }
  }
  for (DispatchObserver* observer : observers) {
    observer->on_op(op, inputs, outputs, kernel_call->attrs, where);
  }

  absl::InlinedVector<engine::Var*, 4> reads, writes;
  for (const Tensor& t : inputs) reads.push_back(t.var());
  for (const Tensor& t : outputs) writes.push_back(t.var());
  const int64_t elements = elements_of(inputs, outputs);
  engine::OpFn run = [call = std::move(kernel_call)](const engine::RunContext& context) {
    run_kernel(*call->op, call->kernel,
               KernelContext{call->inputs, call->outputs, call->attrs, context});
  };
  engine::Engine& engine = engine::current();
  if (is_tiny(op, elements)) {
    engine.push_tiny(std::move(run), run_device, reads, writes, op.name.c_str(), where);
  } else {
    engine.push(std::move(run), run_device, reads, writes, op.name.c_str(), where);
  }
  return outputs;
}

std::vector<Tensor> call(std::string_view op, absl::Span<const Tensor> inputs, const Attrs& attrs,
                         std::source_location where) {
  const OpDef* def = Registry::global().find(op);
  if (def == nullptr) {
    throw Error(str_cat("unknown op '", op, "'"), std::string(op), where);
  }
  return call(*def, inputs, attrs, where);
}

Tensor call1(std::string_view op, absl::Span<const Tensor> inputs, const Attrs& attrs,
             std::source_location where) {
  std::vector<Tensor> outputs = call(op, inputs, attrs, where);
  TANDEM_INTERNAL_ASSERT(outputs.size() == 1, "call1 on op '", op, "' with ", outputs.size(),
                         " outputs");
  return std::move(outputs[0]);
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
