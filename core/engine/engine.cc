// The process-wide engine and the factory.
#include "core/engine/engine.h"

#include <cstdlib>
#include <mutex>
#include <string_view>
#include <vector>

#include "absl/strings/numbers.h"

#include "core/engine/naive_engine.h"
#include "core/engine/threaded_engine.h"
#include "core/engine/var.h"
#include "core/error.h"
#include "core/profiler.h"

namespace tandem::engine {
namespace {

struct Global {
  std::mutex mu;
  std::atomic<Engine*> engine{nullptr};
  // Engines replaced by configure(): kept (shut down) rather than destroyed,
  // so a stale reference held by another thread fails cleanly instead of
  // touching freed memory.
  std::vector<std::unique_ptr<Engine>> engines;
};

Global& global() {
  static Global* instance = new Global;  // Never destroyed: used at exit.
  return *instance;
}

EngineKind kind_from_environment() {
  const char* text = std::getenv("TANDEM_ENGINE");
  if (text == nullptr || std::string_view(text).empty() || std::string_view(text) == "threaded") {
    return EngineKind::kThreaded;
  }
  TANDEM_CHECK(std::string_view(text) == "naive", "TANDEM_ENGINE='", text,
               "' is not an engine; expected 'threaded' or 'naive'");
  return EngineKind::kNaive;
}

EngineOptions options_from_environment() {
  EngineOptions options;
  if (const char* text = std::getenv("TANDEM_NUM_WORKERS")) {
    TANDEM_CHECK(absl::SimpleAtoi(text, &options.cpu_workers) && options.cpu_workers > 0,
                 "TANDEM_NUM_WORKERS='", text, "' is not a positive number of threads");
  }
  if (const char* text = std::getenv("TANDEM_MAX_IN_FLIGHT")) {
    TANDEM_CHECK(absl::SimpleAtoi(text, &options.max_in_flight) && options.max_in_flight >= 0,
                 "TANDEM_MAX_IN_FLIGHT='", text,
                 "' is not a number of ops (0 lets the frontend run ahead without bound)");
  }
  return options;
}

// At exit: finish pending work, stop the workers, then write the profile, so
// the profile holds every op the program pushed.
void shut_down_at_exit() {
  Global& g = global();
  std::lock_guard lock(g.mu);
  for (auto& engine : g.engines) engine->shutdown(ShutdownMode::kFinish);
  try {
    profiler::stop();
  } catch (const Error& e) {
    std::fprintf(stderr, "tandem: %s\n", e.what());
  }
}

void install_locked(Global& g, EngineKind kind, EngineOptions options) {
  g.engines.push_back(make_engine(kind, options));
  g.engine.store(g.engines.back().get(), std::memory_order_release);
}

}  // namespace

Var* new_var(Device device) { return Var::create(device); }

std::unique_ptr<Engine> make_engine(EngineKind kind, EngineOptions options) {
  if (kind == EngineKind::kNaive) return std::make_unique<NaiveEngine>();
  return std::make_unique<ThreadedEngine>(options);
}

Engine& current() {
  Global& g = global();
  if (Engine* engine = g.engine.load(std::memory_order_acquire)) return *engine;
  std::lock_guard lock(g.mu);
  if (g.engine.load(std::memory_order_relaxed) == nullptr) {
    if (const char* path = std::getenv("TANDEM_PROFILE"); path && *path) profiler::start(path);
    install_locked(g, kind_from_environment(), options_from_environment());
    std::atexit(shut_down_at_exit);
  }
  return *g.engine.load(std::memory_order_relaxed);
}

void finish_before_exit() {
  current();
  std::atexit(shut_down_at_exit);
}

void configure(EngineKind kind, EngineOptions options) {
  Engine& old = current();
  old.wait_all();  // Throws pending failures before anything changes.
  Global& g = global();
  std::lock_guard lock(g.mu);
  old.shutdown(ShutdownMode::kFinish);
  install_locked(g, kind, options);
}

}  // namespace tandem::engine
