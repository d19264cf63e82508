// Dispatch: how an op call becomes work on the engine (docs/ARCHITECTURE.md,
// "Eager call, step by step").
//
//   std::vector<Tensor> out = kernels::call("add", {a, b});
//   Tensor y = kernels::call1("sum", {x}, {{"axes", std::vector<int64_t>{1}}});
//   Tensor z = kernels::call1<"relu">({x}, {}, where);  // Looked up once.
//
// call() and call1() are the one entry point, for ops with several outputs
// and with one. The op is named by a string, held as an OpDef, or written as
// a template argument (eager's functions); ops called inside another op's
// work use nested_call() / nested_call1() (kernels/ops/op_helpers.h), which
// report the enclosing call's site.
//
// 1. Looks the op up, checks arity, devices and attributes.
// 2. Infers output shapes and dtypes on the caller's thread, so `y.shape()`
//    never waits.
// 3. Allocates the outputs.
// 4. Tells the observers of this thread (the autograd tape, the tracer).
// 5. Pushes the kernel to the engine, reading the inputs' vars and writing
//    the outputs', with the caller's source location. A call on a few
//    thousand elements runs at once on the caller's thread instead when
//    nothing it touches is pending (Engine::run_if_free; Note [Tiny ops run
//    inline] in core/engine/threaded_engine.cc).
// Only a tiny op may have run when it returns. Errors in steps 1-3 are thrown
// here, naming the op, the shapes and the user's line.
//
// Note [Thread budget]
// The engine's workers and oneDNN's OpenMP threads share the same cores, and
// two pools each running as many threads as there are cores would fight over
// them (the classic oversubscription loss). The policy: a kernel marked
// `uses_all_cores` (convolutions, matmul, normalization: oneDNN primitives
// that parallelize internally) runs with all cores and alone — dispatch
// holds one process-wide lock around it — while every other kernel is
// single-threaded and may run beside others, one per worker. Two big kernels
// therefore never run at once, and small independent ops still overlap. (The
// lock also keeps oneDNN's primitive creation single-threaded, which avoids a
// deadlock seen with concurrent creation in Debian's oneDNN 2.6.)
//
// Elementwise loops decide per call, by size (parallel_for in
// kernels/cpu/parallel.h). Below a threshold a loop runs inline on its worker
// like any small kernel: there, waking a second core costs more than it saves
// (on the 2-core development machine, a split float add pays off from about
// 128K elements, a split exp from about 16K). Above it the loop becomes an
// all-cores kernel for its duration: it takes the same lock
// (kernels/thread_budget.h) and splits its range over OpenMP's threads, the
// runtime Debian's oneDNN already uses, so the process has one intra-op pool,
// not two. The lock is re-entrant per thread, so a uses_all_cores kernel that
// calls parallel_for does not wait for itself, and a call from inside a
// parallel region runs inline rather than nesting a second one. The first
// all-cores kernel on a worker pins that worker and its OpenMP threads to one
// core each, so the waiting frontend is never queued behind a spinning one
// (Note [Binding the team to cores] in kernels/cpu/team_binding.h).
#pragma once

#include <source_location>
#include <string_view>
#include <vector>

#include "absl/types/span.h"

#include "core/tensor.h"
#include "kernels/attrs.h"
#include "kernels/registry.h"

namespace tandem::kernels {

std::vector<Tensor> call(std::string_view op, absl::Span<const Tensor> inputs,
                         const Attrs& attrs = {},
                         std::source_location where = std::source_location::current());
std::vector<Tensor> call(const OpDef& op, absl::Span<const Tensor> inputs, const Attrs& attrs,
                         const std::source_location& where);

// call() for ops with one output.
Tensor call1(std::string_view op, absl::Span<const Tensor> inputs, const Attrs& attrs = {},
             std::source_location where = std::source_location::current());
// The same without a name lookup, for callers that hold the OpDef
// (kernels::op_def<"relu">(), registry.h).
Tensor call1(const OpDef& op, absl::Span<const Tensor> inputs, const Attrs& attrs,
             const std::source_location& where);
// The same for an op named by a literal, looked up once: what eager's
// functions call.
template <OpName kName>
Tensor call1(absl::Span<const Tensor> inputs, const Attrs& attrs,
             const std::source_location& where) {
  return call1(op_def<kName>(), inputs, attrs, where);
}

// Runs a kernel on an engine worker under the thread budget (Note [Thread
// budget]): what every pushed op does, eager (call) or replayed
// (trace/executor.h).
void run_kernel(const OpDef& op, KernelFn kernel, const KernelContext& context);

// Whether a call of `op` with these shapes runs on every core
// (OpDef::uses_all_cores and OpDef::one_core).
bool uses_all_cores(const OpDef& op, const CallShapes& shapes);
bool uses_all_cores(const OpDef& op, absl::Span<const Tensor> inputs,
                    absl::Span<const Tensor> outputs);

// Sees every op dispatched on the thread that installed it, after its outputs
// exist and before its kernel is pushed. The autograd tape and the tracer are
// observers; kernels/ knows nothing more about them.
class DispatchObserver {
 public:
  virtual ~DispatchObserver() = default;
  virtual void on_op(const OpDef& op, absl::Span<const Tensor> inputs,
                     absl::Span<const Tensor> outputs, const Attrs& attrs,
                     const std::source_location& where) = 0;
};

// Installs an observer that sees the ops of every thread, for the rest of the
// process (the autograd tape). At most a few such observers exist.
void add_process_observer(DispatchObserver* observer);

// Installs an observer on this thread for the scope's lifetime. Observers
// nest; every installed observer sees every op.
class ObserverScope {
 public:
  explicit ObserverScope(DispatchObserver* observer);
  ~ObserverScope();
  ObserverScope(const ObserverScope&) = delete;
  ObserverScope& operator=(const ObserverScope&) = delete;

 private:
  DispatchObserver* observer_;
};

}  // namespace tandem::kernels
