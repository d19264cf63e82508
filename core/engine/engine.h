// The asynchronous dependency engine: every op goes through it.
//
// An op is a function plus the vars it reads and the vars it writes. `push`
// returns at once; the engine runs the op on a worker thread of its device
// when every earlier write of the vars it reads, and every earlier read and
// write of the vars it writes, has finished. Ops that share no written var
// run in parallel. The caller blocks only in `wait(var)` and `wait_all()`.
//
//   using namespace tandem::engine;
//   Var* x = new_var();
//   Var* y = new_var();
//   Engine& e = current();
//   e.push([&](const RunContext&) { data_x = 1; }, Device::cpu(), {}, {x}, "init_x");
//   e.push([&](const RunContext&) { data_y = data_x + 1; }, Device::cpu(), {x}, {y}, "add");
//   e.wait(y);  // data_y == 2 now.
//   e.delete_var(x);
//   e.delete_var(y);
//
// Failures (see Note [Failures]) travel with the data: an op that throws marks
// the vars it writes as failed; later ops that read them are skipped and pass
// the failure on; a wait on any of those vars throws a tandem::Error naming
// the op that failed and the source line that pushed it.
//
// Two engines implement this interface. The threaded engine is the default.
// The naive engine runs each op on the caller's thread inside `push` and
// throws there, which makes errors and debuggers point at the line that
// pushed; select it with TANDEM_ENGINE=naive or `set_engine_kind`.
//
// Note [Failures]
// * The error thrown at a wait is the one the failing op threw (its message),
//   with the op's name and its push location attached.
// * A var stays failed until an op writes it successfully; waiting on it again
//   throws again. Ops that only read it keep being skipped.
// * `wait_all()` throws the first failure not yet thrown by a `wait`, once;
//   after that it is clean until a new failure happens.
// * Nothing that runs on a worker thread can end the process: any exception,
//   of any type, becomes a failure delivered at a wait.
#pragma once

#include <memory>
#include <source_location>

#include "absl/functional/function_ref.h"
#include "absl/types/span.h"

#include "core/device.h"
#include "core/engine/inline_function.h"

namespace tandem::engine {

class Var;

// What an op's function learns about where it runs.
struct RunContext {
  Device device;
  // Index of the worker thread within its device's pool, or kPushingThread
  // for an op run by the thread that pushed it (a tiny op run inline, and
  // every op of the naive engine).
  int worker = 0;
  static constexpr int kPushingThread = -1;
  // On a CUDA device: the stream (a cudaStream_t) the op enqueues its work
  // on, and returns without waiting for it (Note [GPU ops complete at
  // launch] in threaded_engine.cc). Null on the CPU.
  void* stream = nullptr;
};

// An op's function. Closures of up to 96 bytes are stored without allocation.
using OpFn = InlineFunction<void(const RunContext&), 96>;

using VarSpan = absl::Span<Var* const>;

enum class EngineKind { kThreaded, kNaive };

enum class ShutdownMode {
  kFinish,  // Run every pending op, then stop.
  kCancel,  // Skip ops that have not started; their vars fail as "cancelled".
};

struct EngineOptions {
  // Worker threads for the CPU; 0 means the default, one (Note [One CPU
  // worker] in threaded_engine.cc).
  int cpu_workers = 0;
  // Most ops pending at once before push() blocks the pushing thread (Note
  // [Bounded run-ahead] in threaded_engine.cc); 0: no bound. With a bound, an
  // op must not wait for something its pusher does only after pushing more.
  int64_t max_in_flight = 256;
};

// Creates a var guarding data on `device`. Every var must eventually be
// passed to `delete_var`.
Var* new_var(Device device = Device::cpu());

class Engine {
 public:
  virtual ~Engine() = default;

  // Schedules `fn` to run on `device` after the ops it depends on.
  // A var listed in both `reads` and `writes` counts as written; duplicates
  // are ignored. `name` must outlive the op (a string literal or a registry
  // name); `where` should be the user's call site, which errors will name.
  void push(OpFn fn, Device device, VarSpan reads, VarSpan writes, const char* name = "op",
            std::source_location where = std::source_location::current()) {
    push_op(std::move(fn), device, reads, writes, name, where);
  }

  // Runs `fn` now, on the calling thread, if no op is pending on any var it
  // reads or writes, and returns true; otherwise returns false, having done
  // nothing. For CPU ops that take less time than handing them to a worker
  // (a few hundred nanoseconds of work on one core): see Note [Tiny ops run
  // inline] in threaded_engine.cc. The run keeps a pushed op's bookkeeping:
  // its vars are claimed while it runs, and a failure is stored on its
  // writes for a later wait (Note [Failures]), not thrown. `fn` is only
  // borrowed, so the caller needs no closure that outlives the call. The
  // naive engine, which runs every op inside push, never runs one here.
  virtual bool run_if_free(absl::FunctionRef<void(const RunContext&)> /*fn*/, VarSpan /*reads*/,
                           VarSpan /*writes*/, const char* /*name*/,
                           const std::source_location& /*where*/) {
    return false;
  }

  // run_if_free(), else push(): a tiny op runs at once where nothing it
  // touches is pending, and is queued like any op where something is.
  void push_tiny(OpFn fn, Device device, VarSpan reads, VarSpan writes, const char* name = "op",
                 std::source_location where = std::source_location::current()) {
    auto run = [&fn](const RunContext& context) { fn(context); };
    if (device.is_cpu() && run_if_free(run, reads, writes, name, where)) return;
    push_op(std::move(fn), device, reads, writes, name, where);
  }

  // Blocks until every write pushed so far to `var` has finished; throws the
  // var's failure if the last write failed (see Note [Failures]).
  virtual void wait(Var* var) = 0;

  // Blocks until every op pushed so far has finished; throws the first
  // failure not yet reported (see Note [Failures]).
  virtual void wait_all() = 0;

  // Frees `var` once every op pushed on it has finished, running `on_delete`
  // (e.g. returning the memory the var guarded) just before. Nothing may be
  // pushed on the var after this call.
  virtual void delete_var(Var* var, OpFn on_delete = {}) = 0;

  // Stops accepting ops and finishes or cancels the pending ones. Idempotent;
  // the destructor calls shutdown(kFinish).
  virtual void shutdown(ShutdownMode mode) = 0;

  virtual EngineKind kind() const = 0;

  // Worker threads serving `device`; 0 when the device has none.
  virtual int num_workers(Device device) const = 0;

 protected:
  virtual void push_op(OpFn fn, Device device, VarSpan reads, VarSpan writes, const char* name,
                       const std::source_location& where) = 0;
};

std::unique_ptr<Engine> make_engine(EngineKind kind, EngineOptions options = {});

// The process-wide engine every Tensor uses. Created on first use from
// TANDEM_ENGINE ("threaded", the default, or "naive"), TANDEM_NUM_WORKERS and
// TANDEM_MAX_IN_FLIGHT (EngineOptions); shut down (finishing pending work) at
// exit.
Engine& current();

// Makes sure the process-wide engine finishes its pending work before static
// state constructed so far is destroyed at exit. The engine arranges this for
// itself when it starts; a library whose kernels rely on static state it
// creates later (oneDNN's primitive cache, say) calls this once after creating
// it, since exit destroys statics in reverse order of construction.
void finish_before_exit();

// Replaces the process-wide engine. Waits for all pending work first and, if
// any of it failed, throws that failure without switching. Call it while no
// other thread pushes ops.
void configure(EngineKind kind, EngineOptions options = {});
inline void set_engine_kind(EngineKind kind) { configure(kind); }

}  // namespace tandem::engine
