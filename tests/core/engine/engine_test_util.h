// Shared helpers for the engine tests: the engine configurations every test
// runs on, and a log of what ops did, in the order they did it.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/engine/engine.h"
#include "core/error.h"

namespace tandem::engine::testing {

// One engine configuration under test.
struct EngineConfig {
  EngineKind kind;
  int workers;  // Threaded engine only.

  std::unique_ptr<Engine> make() const { return make_engine(kind, {.cpu_workers = workers}); }
  std::string name() const {
    return kind == EngineKind::kNaive ? "naive" : "threaded_" + std::to_string(workers);
  }
};

inline const std::vector<EngineConfig>& all_configs() {
  static const std::vector<EngineConfig> configs = {
      {EngineKind::kNaive, 1},
      {EngineKind::kThreaded, 1},
      {EngineKind::kThreaded, 2},
      {EngineKind::kThreaded, 8},
  };
  return configs;
}

inline std::string config_name(const ::testing::TestParamInfo<EngineConfig>& info) {
  return info.param.name();
}

// Ordered events recorded by ops: "begin <op>" / "end <op>".
class EventLog {
 public:
  void begin(int op) { add(op, true); }
  void end(int op) { add(op, false); }

  // Index of an event in the log; fails the test if it is missing.
  size_t index_of(int op, bool begin) const {
    std::lock_guard lock(mu_);
    for (size_t i = 0; i < events_.size(); ++i) {
      if (events_[i].op == op && events_[i].begin == begin) return i;
    }
    ADD_FAILURE() << "op " << op << (begin ? " never began" : " never ended");
    return 0;
  }
  // True if `first` ended before `second` began.
  bool ended_before_began(int first, int second) const {
    return index_of(first, false) < index_of(second, true);
  }
  size_t size() const {
    std::lock_guard lock(mu_);
    return events_.size();
  }

 private:
  struct Event {
    int op;
    bool begin;
  };
  void add(int op, bool begin) {
    std::lock_guard lock(mu_);
    events_.push_back({op, begin});
  }
  mutable std::mutex mu_;
  std::vector<Event> events_;
};

// An op body that logs its begin and end and takes a little time in between,
// so that an engine that ordered wrongly would be caught overlapping.
inline OpFn logged(EventLog& log, int op,
                   std::chrono::microseconds busy = std::chrono::microseconds(200)) {
  return [&log, op, busy](const RunContext&) {
    log.begin(op);
    std::this_thread::sleep_for(busy);
    log.end(op);
  };
}

// Vars owned by one test and deleted through its engine.
class VarSet {
 public:
  VarSet(Engine& engine, int count) : engine_(engine) {
    for (int i = 0; i < count; ++i) vars_.push_back(new_var());
  }
  // Waits for the ops left on the engine; a failure no wait reported fails
  // the test (a test that expects one waits for it).
  ~VarSet() {
    try {
      engine_.wait_all();
    } catch (const Error& e) {
      ADD_FAILURE() << "an op failed and no wait reported it: " << e.what();
    }
    for (Var* var : vars_) engine_.delete_var(var);
  }
  Var* operator[](size_t i) const { return vars_[i]; }
  size_t size() const { return vars_.size(); }

 private:
  Engine& engine_;
  std::vector<Var*> vars_;
};

}  // namespace tandem::engine::testing
