#include "core/profiler.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/engine/engine.h"
#include "core/error.h"
#include "core/tensor.h"

namespace tandem {
namespace {

using nlohmann::json;

bool contains(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
}

// The profiler and the engine are process-global: every test starts with no
// pending work and leaves the profiler stopped, whatever happens in between.
class ProfilerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    drain();
    ASSERT_FALSE(profiler::enabled());
  }
  void TearDown() override {
    try {
      profiler::stop();
    } catch (const Error&) {
      // The test has already checked what it expected of stop().
    }
    EXPECT_FALSE(profiler::enabled());
  }

  // Every test's failures were reported when it ended (tests/drain_engine_environment.cc).
  static void drain() { engine::current().wait_all(); }

  static std::string temp_path(const char* name) {
    std::string path = ::testing::TempDir() + name;
    std::remove(path.c_str());
    return path;
  }

  static json read_json(const std::string& path) {
    std::ifstream in(path);
    EXPECT_TRUE(in.good()) << "cannot open " << path;
    return json::parse(in);  // Throws (failing the test) on invalid JSON.
  }

  // Pushes `count` ops that write one tensor, each named `name`, then waits for all.
  static void run_ops(const char* name, int count) {
    Tensor t = Tensor::empty({16});
    float* p = t.data<float>();
    for (int i = 0; i < count; ++i) {
      engine::current().push(
          [p, i](const engine::RunContext&) {
            p[i % 16] = static_cast<float>(i);
            std::this_thread::sleep_for(std::chrono::microseconds(50));
          },
          Device::cpu(), {}, {t.var()}, name);
    }
    t.wait_to_read();
  }

  // Records a profile of a few named ops and returns the parsed trace.
  json profile_some_ops() {
    std::string path = temp_path("tandem_profiler_test.json");
    profiler::start(path);
    EXPECT_TRUE(profiler::enabled());
    run_ops("profiled_alpha", 3);
    run_ops("profiled_beta", 2);
    drain();  // Every op has finished (and recorded) before stop.
    profiler::stop();
    EXPECT_FALSE(profiler::enabled());
    return read_json(path);
  }
};

// The "X" events of category `cat` named `name`.
std::vector<json> complete_events(const json& trace, std::string_view cat, std::string_view name) {
  std::vector<json> found;
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] == "X" && e["cat"] == cat && e["name"] == name) found.push_back(e);
  }
  return found;
}

// tid -> thread name, from the "thread_name" metadata events.
std::map<int, std::string> thread_names(const json& trace) {
  std::map<int, std::string> names;
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") {
      names[e["tid"].get<int>()] = e["args"]["name"].get<std::string>();
    }
  }
  return names;
}

// Verifies that the file is a JSON object with a traceEvents array of well-formed events.
TEST_F(ProfilerTest, WritesValidChromeTrace) {
  json trace = profile_some_ops();
  ASSERT_TRUE(trace.is_object());
  ASSERT_TRUE(trace.contains("traceEvents"));
  ASSERT_TRUE(trace["traceEvents"].is_array());
  EXPECT_FALSE(trace["traceEvents"].empty());
  for (const json& e : trace["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph") && e.contains("pid") && e.contains("tid")) << e.dump();
    if (e["ph"] == "X") {
      EXPECT_TRUE(e["ts"].is_number()) << e.dump();
      EXPECT_GE(e["dur"].get<double>(), 0.0) << e.dump();
    }
  }
}

// Verifies that each push is on the pushing thread and each execution, with the op's name, on
// a different (worker) thread.
TEST_F(ProfilerTest, PushesOnCallerThreadExecutionsOnWorker) {
  json trace = profile_some_ops();
  std::map<int, std::string> names = thread_names(trace);
  for (auto [name, count] : {std::pair{"profiled_alpha", 3}, std::pair{"profiled_beta", 2}}) {
    SCOPED_TRACE(name);
    std::vector<json> pushes = complete_events(trace, "push", name);
    std::vector<json> executes = complete_events(trace, "execute", name);
    ASSERT_EQ(static_cast<int>(pushes.size()), count);
    ASSERT_EQ(static_cast<int>(executes.size()), count);
    std::set<int> push_tids;
    for (const json& e : pushes) push_tids.insert(e["tid"].get<int>());
    ASSERT_EQ(push_tids.size(), 1u);  // All from this test's thread.
    int frontend = *push_tids.begin();
    EXPECT_TRUE(names[frontend].starts_with("frontend")) << names[frontend];
    for (const json& e : executes) {
      int tid = e["tid"].get<int>();
      EXPECT_NE(tid, frontend);
      EXPECT_TRUE(contains(names[tid], "worker")) << names[tid];
    }
  }
}

// Verifies that every thread in the trace has a thread_name metadata event.
TEST_F(ProfilerTest, ThreadsHaveNames) {
  json trace = profile_some_ops();
  std::map<int, std::string> names = thread_names(trace);
  bool has_worker = false;
  for (const auto& [tid, name] : names) has_worker |= name.starts_with("cpu worker");
  EXPECT_TRUE(has_worker);
  for (const json& e : trace["traceEvents"]) {
    EXPECT_TRUE(names.contains(e["tid"].get<int>())) << e.dump();
  }
}

// Verifies that a process named by set_process (a rank of a distributed
// program) writes its own file, its events under its id and name.
TEST_F(ProfilerTest, ANamedProcessWritesItsOwnFile) {
  const std::string path = temp_path("tandem_profiler_process.json");
  const std::string own = temp_path("tandem_profiler_process.rank3.json");
  profiler::start(path);
  profiler::set_process(3, "rank 3", "rank3");
  run_ops("profiled_rank_op", 1);
  drain();
  profiler::stop();
  profiler::set_process(1, "", "");  // As other tests expect.
  EXPECT_FALSE(std::filesystem::exists(path));
  json trace = read_json(own);
  bool named = false;
  for (const json& e : trace["traceEvents"]) {
    EXPECT_EQ(e["pid"], 3) << e.dump();
    named |= e["ph"] == "M" && e["name"] == "process_name" && e["args"]["name"] == "rank 3";
  }
  EXPECT_TRUE(named);
  EXPECT_EQ(complete_events(trace, "execute", "profiled_rank_op").size(), 1u);
}

// Verifies that flow starts ("s", at the push) and finishes ("f", at the execution) pair up by
// id, on different threads, with the finish no earlier than the start.
TEST_F(ProfilerTest, FlowEventsPairUpById) {
  json trace = profile_some_ops();
  std::map<uint64_t, json> starts;
  std::map<uint64_t, json> finishes;
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] == "s") {
      EXPECT_TRUE(starts.emplace(e["id"].get<uint64_t>(), e).second) << "duplicate " << e.dump();
    } else if (e["ph"] == "f") {
      EXPECT_TRUE(finishes.emplace(e["id"].get<uint64_t>(), e).second) << "duplicate " << e.dump();
    }
  }
  EXPECT_GE(starts.size(), 5u);
  EXPECT_EQ(starts.size(), finishes.size());
  for (const auto& [id, s] : starts) {
    SCOPED_TRACE(id);
    EXPECT_NE(id, 0u);
    auto f = finishes.find(id);
    ASSERT_NE(f, finishes.end()) << s.dump();
    EXPECT_NE(s["tid"], f->second["tid"]);
    EXPECT_LE(s["ts"].get<double>(), f->second["ts"].get<double>());
  }
}

// Verifies that op names needing JSON escapes come back intact.
TEST_F(ProfilerTest, EscapesOpNames) {
  static constexpr const char* kName = "quote\" back\\slash\ttab\nnewline";
  std::string path = temp_path("tandem_profiler_escape.json");
  profiler::start(path);
  run_ops(kName, 1);
  drain();
  profiler::stop();
  json trace = read_json(path);
  EXPECT_EQ(complete_events(trace, "execute", kName).size(), 1u);
  EXPECT_EQ(complete_events(trace, "push", kName).size(), 1u);
}

// Verifies that a tiny op run inline (Note [Tiny ops run inline]) shows its push and its run,
// both on the calling thread.
TEST_F(ProfilerTest, TinyOpRunInlineIsProfiledOnTheCaller) {
  drain();  // Nothing pending: the op's var is free, so it runs inline.
  std::string path = temp_path("tandem_profiler_inline.json");
  profiler::start(path);
  Tensor t = Tensor::empty({1});
  engine::current().push_tiny([](const engine::RunContext&) {}, Device::cpu(), {}, {t.var()},
                              "profiled_inline");
  drain();
  profiler::stop();
  json trace = read_json(path);
  std::vector<json> pushes = complete_events(trace, "push", "profiled_inline");
  std::vector<json> executes = complete_events(trace, "execute", "profiled_inline");
  ASSERT_EQ(pushes.size(), 1u);
  ASSERT_EQ(executes.size(), 1u);
  EXPECT_EQ(pushes[0]["tid"], executes[0]["tid"]);
}

// Verifies that a stopped profiler records nothing: a later profile holds only its own ops.
TEST_F(ProfilerTest, RecordsOnlyWhileRunning) {
  run_ops("unprofiled_op", 2);
  drain();
  std::string path = temp_path("tandem_profiler_window.json");
  profiler::start(path);
  run_ops("window_op", 1);
  drain();
  profiler::stop();
  run_ops("after_stop_op", 1);
  json trace = read_json(path);
  EXPECT_TRUE(complete_events(trace, "execute", "unprofiled_op").empty());
  EXPECT_TRUE(complete_events(trace, "execute", "after_stop_op").empty());
  EXPECT_EQ(complete_events(trace, "execute", "window_op").size(), 1u);
}

// Verifies that starting a running profiler throws naming the file it is writing.
TEST_F(ProfilerTest, StartTwiceThrows) {
  std::string path = temp_path("tandem_profiler_twice.json");
  profiler::start(path);
  try {
    profiler::start(temp_path("tandem_profiler_other.json"));
    FAIL() << "the second start succeeded";
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), "already running")) << e.what();
    EXPECT_TRUE(contains(e.what(), path)) << e.what();
  }
  EXPECT_TRUE(profiler::enabled());
  profiler::stop();
  EXPECT_TRUE(std::ifstream(path).good());
}

// Verifies that stop without start does nothing and writes no file.
TEST_F(ProfilerTest, StopWhenNotRunningIsNoOp) {
  EXPECT_NO_THROW(profiler::stop());
  EXPECT_NO_THROW(profiler::stop());
  EXPECT_FALSE(profiler::enabled());
}

// Verifies that a path where no file can be created fails at start, not at the end of the run,
// with an Error naming it; that a path which stops being writable fails at stop, naming it and
// leaving no file behind; and that the profiler is left stopped and usable, with a clean slate
// for the next profile.
TEST_F(ProfilerTest, UnwritablePathThrowsNamingPath) {
  const std::string bad = "/nonexistent-dir/x.json";
  try {
    profiler::start(bad);
    FAIL() << "start accepted " << bad;
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), bad)) << e.what();
  }
  EXPECT_FALSE(profiler::enabled());

  const std::filesystem::path dir = ::testing::TempDir() + "tandem_profiler_removed_dir";
  std::filesystem::create_directories(dir);
  const std::string gone = (dir / "x.json").string();
  profiler::start(gone);
  run_ops("lost_op", 1);
  drain();
  std::filesystem::remove_all(dir);
  try {
    profiler::stop();
    FAIL() << "stop wrote to " << gone;
  } catch (const Error& e) {
    EXPECT_TRUE(contains(e.what(), gone)) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(gone));
  EXPECT_FALSE(profiler::enabled());
  EXPECT_NO_THROW(profiler::stop());

  std::string good = temp_path("tandem_profiler_after_failure.json");
  profiler::start(good);
  profiler::stop();
  json trace = read_json(good);
  EXPECT_TRUE(trace.contains("traceEvents"));
  // The failed profile's events belong to it, not to the next one.
  EXPECT_TRUE(complete_events(trace, "execute", "lost_op").empty());
  EXPECT_TRUE(complete_events(trace, "push", "lost_op").empty());
}

// Verifies that now_ns is a steady clock in nanoseconds.
TEST(ProfilerClockTest, NowIsMonotonicNanoseconds) {
  int64_t a = profiler::now_ns();
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  int64_t b = profiler::now_ns();
  EXPECT_GE(b - a, 2'000'000);
  EXPECT_LT(b - a, 2'000'000'000);
}

}  // namespace
}  // namespace tandem
