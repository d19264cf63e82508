// A Chrome-trace timeline of what the engine did, and when, on which thread.
//
//   TANDEM_PROFILE=trace.json ./my_program
//
// writes trace.json at exit; open it in chrome://tracing or ui.perfetto.dev.
// Each push appears on the frontend thread that made it and each execution on
// the worker that ran it, joined by an arrow. From code:
//
//   tandem::profiler::start("trace.json");
//   ...
//   tandem::profiler::stop();  // Writes the file.
//
// Recording costs nothing measurable while the profiler is off: one relaxed
// load per op. While on, each thread appends to its own buffer.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

namespace tandem::profiler {

namespace detail {
extern std::atomic<bool> enabled;
}  // namespace detail

inline bool enabled() { return detail::enabled.load(std::memory_order_relaxed); }

// Starts recording into memory; `stop` writes the events to `path`.
// Throws tandem::Error if the profiler is already running, or naming the
// path if no file can be created there (checked now, not at the end of a
// long run).
void start(std::string path);
// Stops recording and writes the file: to `path`.partial, then renamed onto
// `path`, so that `path` is never half written. Throws tandem::Error naming
// the path if it cannot be written. Does nothing if the profiler is not
// running.
void stop();

// Nanoseconds on a steady clock shared by every thread.
int64_t now_ns();

// The name this thread has in the timeline ("frontend N" by default).
void set_thread_name(std::string name);

// Names this process in the timeline, for a program that runs as several
// processes (distributed::init calls it with the rank): its events carry
// `id` as their process, under `name`, and its profile (recorded now or
// started later) goes to its own file, `tag` inserted before the path's
// extension (trace.json -> trace.rank1.json), so that the processes do not
// overwrite each other's. Throws tandem::Error naming the new path if a
// profile is being recorded and it cannot be written there.
void set_process(int id, std::string name, const std::string& tag);

enum class EventKind : uint8_t {
  kPush,     // On the caller's thread: time spent inside push().
  kExecute,  // On a worker (or the caller, for a tiny op run inline): the op running.
  kWait,     // On the caller's thread: blocked in wait() or wait_all().
};

// Records one complete event. `name` must outlive the profile (a string
// literal or registry name). `flow` links a push to its execution; 0 for none.
void record(EventKind kind, const char* name, int64_t begin_ns, int64_t end_ns, uint64_t flow);

}  // namespace tandem::profiler
