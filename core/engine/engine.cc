// The process-wide engine and the factory.
#include "core/engine/engine.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <utility>
#include <vector>

#include "core/engine/naive_engine.h"
#include "core/engine/threaded_engine.h"
#include "core/engine/var.h"
#include "core/environment.h"
#include "core/error.h"
#include "core/profiler.h"

namespace tandem::engine {

// Note [Draining at exit]
// Ops may still be pending when the process exits (a loop that never reads
// its last results returns from main), and they must finish before any
// state they use is destroyed. Exit destroys static objects in reverse order
// of their construction, interleaved with atexit handlers, so a drain
// registered with atexit when the engine starts runs only after everything
// constructed later has been destroyed: oneDNN's JIT kernels for a shape
// first seen late, say. Running them then crashed one run in ten of a short
// training loop, more with shapes that change every step.
//
// So the drain runs at the very start of exit: glibc's exit() first
// destroys the exiting thread's thread_local objects, then runs atexit
// handlers and static destructors. When the main thread first calls an op
// (or starts or configures the engine) it constructs a thread_local whose
// destructor drains the engine (Engine::shutdown_at_exit), and returning
// from main, or exit() on the main thread, runs it before any static object
// is destroyed. The drain also
// stops the engine: a push from a thread still running after that (a
// detached thread, a static destructor) throws tandem::Error ("the process
// is exiting") instead of running a kernel on half-destroyed state; waits on
// data already computed still work. The worker threads stay parked, never
// joined, so that a tensor freed late still finds the engine able to free
// its memory. A program that exits from another thread falls back on the
// atexit drain, re-registered by finish_before_exit().
namespace {

struct Global {
  std::mutex mu;
  // Every engine current() has returned, the current one last. Those
  // replaced by configure() are kept (shut down) rather than destroyed, so
  // a stale reference held by another thread fails cleanly instead of
  // touching freed memory.
  std::vector<std::unique_ptr<Engine>> engines;
};

Global& global() {
  static Global* instance = new Global;  // Never destroyed: used at exit.
  return *instance;
}

EngineKind kind_from_environment() {
  return environment::choice("TANDEM_ENGINE", {"threaded", "naive"}, "threaded") == "naive"
             ? EngineKind::kNaive
             : EngineKind::kThreaded;
}

EngineOptions options_from_environment() {
  EngineOptions options;
  options.cpu_workers = static_cast<int>(environment::integer(
      "TANDEM_NUM_WORKERS", 1, EngineOptions::kMaxCpuWorkers, 0, "CPU worker threads"));
  options.max_in_flight = environment::integer("TANDEM_MAX_IN_FLIGHT", 0,
                                               EngineOptions::kMaxInFlight, options.max_in_flight,
                                               "ops the frontend may run ahead (0 for no bound)");
  options.max_bytes_in_flight = static_cast<int64_t>(
      environment::bytes("TANDEM_MAX_BYTES_IN_FLIGHT", 0, EngineOptions::kMaxBytesInFlight,
                         static_cast<size_t>(options.max_bytes_in_flight),
                         "new memory the frontend may run ahead (0 for no bound)"));
  return options;
}

// At exit: finish pending work, stop the engines, then write the profile, so
// the profile holds every op the program pushed. Runs more than once (the
// main thread's exit and atexit); later runs find nothing left to do.
void shut_down_at_exit() {
  Global& g = global();
  std::lock_guard lock(g.mu);
  for (auto& engine : g.engines) engine->shutdown_at_exit();
  try {
    profiler::stop();
  } catch (const Error& e) {
    std::fprintf(stderr, "tandem: %s\n", e.what());
  }
}

void install_locked(Global& g, std::unique_ptr<Engine> engine) {
  g.engines.push_back(std::move(engine));
  detail::current_engine.store(g.engines.back().get(), std::memory_order_release);
}

// See Note [Draining at exit].
struct DrainWhenMainThreadExits {
  ~DrainWhenMainThreadExits() { shut_down_at_exit(); }
};

}  // namespace

void drain_when_main_thread_exits() {
  static thread_local bool checked = false;
  if (std::exchange(checked, true)) return;
  if (getpid() != static_cast<pid_t>(syscall(SYS_gettid))) return;
  [[maybe_unused]] static thread_local DrainWhenMainThreadExits drain;
}

Var* new_var(Device device, size_t bytes) { return Var::create(device, bytes); }

std::unique_ptr<Engine> make_engine(EngineKind kind, EngineOptions options) {
  TANDEM_CHECK(0 <= options.cpu_workers && options.cpu_workers <= EngineOptions::kMaxCpuWorkers,
               "EngineOptions::cpu_workers = ", options.cpu_workers,
               " is out of range: expected 0 (the default, one) to ",
               EngineOptions::kMaxCpuWorkers);
  TANDEM_CHECK(0 <= options.max_in_flight && options.max_in_flight <= EngineOptions::kMaxInFlight,
               "EngineOptions::max_in_flight = ", options.max_in_flight,
               " is out of range: expected 0 (no bound) to ", EngineOptions::kMaxInFlight);
  TANDEM_CHECK(0 <= options.max_bytes_in_flight &&
                   options.max_bytes_in_flight <= EngineOptions::kMaxBytesInFlight,
               "EngineOptions::max_bytes_in_flight = ", options.max_bytes_in_flight,
               " is out of range: expected 0 (no bound) to ", EngineOptions::kMaxBytesInFlight);
  if (kind == EngineKind::kNaive) return std::make_unique<NaiveEngine>();
  return std::make_unique<ThreadedEngine>(options);
}

namespace detail {

constinit std::atomic<Engine*> current_engine{nullptr};

Engine& start_current() {
  Global& g = global();
  std::lock_guard lock(g.mu);
  if (current_engine.load(std::memory_order_relaxed) == nullptr) {
    // Nothing is installed unless every setting was accepted, so that each
    // later use throws the same error again.
    std::unique_ptr<Engine> engine =
        make_engine(kind_from_environment(), options_from_environment());
    if (std::optional<std::string_view> path = environment::get("TANDEM_PROFILE")) {
      try {
        profiler::start(std::string(*path));
      } catch (const Error& e) {
        throw Error(str_cat("TANDEM_PROFILE='", *path, "' is not accepted: ", e.message()));
      }
    }
    install_locked(g, std::move(engine));
    std::atexit(shut_down_at_exit);
    drain_when_main_thread_exits();
  }
  return *current_engine.load(std::memory_order_relaxed);
}

}  // namespace detail

void finish_before_exit() {
  current();
  drain_when_main_thread_exits();
  std::atexit(shut_down_at_exit);
}

void configure(EngineKind kind, EngineOptions options) {
  Engine& old = current();
  old.wait_all();  // Throws pending failures before anything changes.
  Global& g = global();
  std::lock_guard lock(g.mu);
  std::unique_ptr<Engine> replacement = make_engine(kind, options);  // May throw: nothing changed.
  old.shutdown(ShutdownMode::kFinish);
  install_locked(g, std::move(replacement));
  drain_when_main_thread_exits();
}

}  // namespace tandem::engine
