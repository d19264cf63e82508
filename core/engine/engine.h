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

#include <atomic>
#include <exception>
#include <functional>
#include <memory>
#include <source_location>

#include "absl/functional/function_ref.h"
#include "absl/types/span.h"

#include "core/device.h"
#include "core/engine/inline_function.h"

namespace tandem::engine {

class Var;

class Deferral;

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
  // Lets the op finish after its function returns (Note [Ops that finish
  // later]); null where the op must finish inside its function: on the
  // naive engine, in an inline run, or inside a group of ops run as one.
  Deferral* deferral = nullptr;
};

// Note [Ops that finish later]
// An op whose work is carried out elsewhere (a collective that the
// communication thread runs, distributed/README.md) need not hold a worker
// while it waits: its function calls `context.deferral->defer()`, hands the
// Completion to whoever does the work, and returns. The op's writes stay
// pending, so every op that reads them still waits, until the Completion is
// called, from any thread, once; the worker meanwhile runs other ops. This
// is MXNet's PushAsync, which its kvstore pushes communication through. An
// op that finds no deferral (null) does its work before returning.
class Completion {
 public:
  using Finish = std::function<void(std::exception_ptr)>;
  Completion() = default;
  explicit Completion(Finish finish) : finish_(std::move(finish)) {}
  // Ends the op: successfully for a null `failure`, else failed with that
  // exception, as if its function had thrown it.
  void operator()(std::exception_ptr failure = nullptr) {
    Finish finish = std::move(finish_);
    finish_ = nullptr;
    if (finish) finish(std::move(failure));
  }
  explicit operator bool() const { return static_cast<bool>(finish_); }

 private:
  Finish finish_;
};

class Deferral {
 public:
  // At most once per op, inside its function.
  virtual Completion defer() = 0;

 protected:
  ~Deferral() = default;
};

// An op's function. Closures of up to 96 bytes are stored without allocation.
using OpFn = InlineFunction<void(const RunContext&), 96>;

using VarSpan = absl::Span<Var* const>;

enum class EngineKind { kThreaded, kNaive };

enum class ShutdownMode {
  kFinish,  // Run every pending op, then stop.
  kCancel,  // Skip ops that have not started; their vars fail as "cancelled".
};

// make_engine and configure throw tandem::Error for values outside the
// ranges given here.
struct EngineOptions {
  // Worker threads for the CPU, 0 to kMaxCpuWorkers; 0 means the default,
  // one (Note [One CPU worker] in threaded_engine.cc). More threads than
  // that would only compete for cores, each with an OpenMP team of its own.
  int cpu_workers = 0;
  static constexpr int kMaxCpuWorkers = 256;
  // Most ops pending at once before push() blocks the pushing thread (Note
  // [Bounded run-ahead] in threaded_engine.cc), 0 to kMaxInFlight; 0: no
  // bound. With a bound, an op must not wait for something its pusher does
  // only after pushing more.
  int64_t max_in_flight = 256;
  static constexpr int64_t kMaxInFlight = int64_t{1} << 30;
  // Most bytes of new memory (see new_var) that pending ops are about to
  // write before push() blocks, as for max_in_flight, 0 to kMaxBytesInFlight;
  // 0: no bound.
  int64_t max_bytes_in_flight = int64_t{16} << 20;
  static constexpr int64_t kMaxBytesInFlight = int64_t{1} << 50;
};

// Creates a var guarding data on `device`. Every var must eventually be
// passed to `delete_var`. `bytes`: the size of the memory it guards when
// that memory is new (a Storage's); until the first op that writes the var
// has finished, those bytes count against max_bytes_in_flight.
Var* new_var(Device device = Device::cpu(), size_t bytes = 0);

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

  // Blocks the calling thread while the ops pending are about to write more
  // than max_bytes_in_flight of new memory (Note [Bounded run-ahead] in
  // threaded_engine.cc), as push() does. Storages call it before they
  // allocate, so that a frontend running ahead waits before it takes more
  // memory, not after. Never blocks inside an op, nor on the naive engine.
  virtual void wait_for_memory() {}

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

  // Stops accepting ops (a later push throws tandem::Error), finishes or
  // cancels the pending ones and stops the worker threads. Idempotent; the
  // destructor calls shutdown(kFinish). No other thread may push meanwhile.
  virtual void shutdown(ShutdownMode mode) = 0;

  // What the process-wide engine does when the process begins to exit (Note
  // [Draining at exit] in engine.cc): stops accepting ops, pushed from any
  // thread, and finishes the pending ones, but leaves the worker threads
  // parked, since threads that still run may still free tensors. Idempotent.
  virtual void shutdown_at_exit() = 0;

  virtual EngineKind kind() const = 0;

  // Worker threads serving `device`; 0 when the device has none.
  virtual int num_workers(Device device) const = 0;

 protected:
  virtual void push_op(OpFn fn, Device device, VarSpan reads, VarSpan writes, const char* name,
                       const std::source_location& where) = 0;
};

// Throws tandem::Error for options out of range, or when the system refuses
// a worker thread.
std::unique_ptr<Engine> make_engine(EngineKind kind, EngineOptions options = {});

// The process-wide engine every Tensor uses. Created on first use (the
// first tensor made, or the first call) from TANDEM_ENGINE ("threaded", the
// default, or "naive"), TANDEM_NUM_WORKERS, TANDEM_MAX_IN_FLIGHT,
// TANDEM_MAX_BYTES_IN_FLIGHT (EngineOptions) and TANDEM_PROFILE; a value
// that is not accepted throws tandem::Error naming the variable, the value
// and the accepted range, from that first use and from every later one until
// the engine could be created. When the process begins to exit, it finishes
// its pending work before any static object is destroyed, and refuses ops
// pushed after that (Note [Draining at exit]). It keeps working in both
// processes after fork() (Note [Engines across fork] in threaded_engine.cc).
Engine& current();

namespace detail {
// The process-wide engine once started; read on every op, so current()
// reads it inline. Constant-initialized and never destroyed: usable at exit.
extern std::atomic<Engine*> current_engine;
Engine& start_current();  // current()'s first use: starts the engine.
}  // namespace detail

inline Engine& current() {
  if (Engine* engine = detail::current_engine.load(std::memory_order_acquire)) return *engine;
  return detail::start_current();
}

// Called on the main thread, arranges for the process-wide engine to drain
// when that thread exits (returns from main, or calls exit()), before any
// static object is destroyed (Note [Draining at exit] in engine.cc); on any
// other thread it does nothing. Cheap after the first call on a thread.
// kernels::call makes it on every op, so a program whose main thread calls
// ops never needs to.
void drain_when_main_thread_exits();

// Makes sure the process-wide engine finishes its pending work before static
// state constructed so far is destroyed at exit. A program whose main thread
// calls ops never needs it: the engine then drains before any static object
// is destroyed. For a program that exits from another thread, a
// library whose kernels rely on static state it creates later (oneDNN's
// primitive cache, say) calls this once after creating it, since exit
// destroys statics in reverse order of construction.
void finish_before_exit();

// Replaces the process-wide engine. Waits for all pending work first and, if
// any of it failed, throws that failure without switching. Call it while no
// other thread pushes ops. Throws tandem::Error for options out of range.
void configure(EngineKind kind, EngineOptions options = {});
inline void set_engine_kind(EngineKind kind) { configure(kind); }

}  // namespace tandem::engine
