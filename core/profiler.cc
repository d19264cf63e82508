#include "core/profiler.h"

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"

#include "core/error.h"

namespace tandem::profiler {
namespace detail {
std::atomic<bool> enabled{false};
}  // namespace detail

namespace {

struct Event {
  const char* name;
  int64_t begin_ns;
  int64_t end_ns;
  uint64_t flow;
  EventKind kind;
};

struct ThreadBuffer {
  std::mutex mu;  // Uncontended except while `stop` reads the buffer.
  int tid = 0;
  std::string name;
  std::vector<Event> events;
};

struct Registry {
  std::mutex mu;
  std::string path;
  bool running = false;
  int next_tid = 1;
  int pid = 1;  // set_process
  std::string process_name;
  std::string tag;
  // Buffers stay registered after their thread exits, so its events are kept.
  std::vector<std::shared_ptr<ThreadBuffer>> buffers;
};

Registry& registry() {
  static Registry* instance = new Registry;  // Never destroyed: used at exit.
  return *instance;
}

ThreadBuffer& this_thread_buffer() {
  thread_local std::shared_ptr<ThreadBuffer> buffer = [] {
    auto created = std::make_shared<ThreadBuffer>();
    Registry& r = registry();
    std::lock_guard lock(r.mu);
    created->tid = r.next_tid++;
    created->name = str_cat("frontend ", created->tid);
    r.buffers.push_back(created);
    return created;
  }();
  return *buffer;
}

// JSON string contents: names are ours or the user's, so escape them.
std::string escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += str_cat("\\u00", absl::Hex(static_cast<unsigned char>(c), absl::kZeroPad2));
    } else {
      out += c;
    }
  }
  return out;
}

const char* category(EventKind kind) {
  switch (kind) {
    case EventKind::kPush:
      return "push";
    case EventKind::kExecute:
      return "execute";
    case EventKind::kWait:
      return "wait";
  }
  return "event";
}

struct ThreadEvents {
  int tid;
  std::string name;
  std::vector<Event> events;
};

// Takes every thread's events out of its buffer, leaving the buffers empty.
std::vector<ThreadEvents> take_events(const std::vector<std::shared_ptr<ThreadBuffer>>& buffers) {
  std::vector<ThreadEvents> taken;
  for (const auto& buffer : buffers) {
    std::lock_guard lock(buffer->mu);
    taken.push_back({buffer->tid, buffer->name, std::move(buffer->events)});
    buffer->events.clear();
  }
  return taken;
}

// The file a profile given `path` goes to: `tag` (set_process) before the
// extension, if there is a tag.
std::string tagged(const std::string& path, const std::string& tag) {
  if (tag.empty()) return path;
  const size_t slash = path.find_last_of('/');
  const size_t dot = path.find_last_of('.');
  if (dot == std::string::npos || (slash != std::string::npos && dot < slash)) {
    return str_cat(path, ".", tag);
  }
  return str_cat(path.substr(0, dot), ".", tag, path.substr(dot));
}

// The profile is written to this file beside `path`, then renamed onto it,
// so that `path` is never left half written.
std::string partial_path(const std::string& path) { return path + ".partial"; }

// Throws tandem::Error naming `path` unless a file can be created there.
void check_writable(const std::string& path) {
  std::string partial = partial_path(path);
  bool created = std::ofstream(partial, std::ios::trunc).good();
  std::remove(partial.c_str());
  TANDEM_CHECK(created, "profiler: cannot write '", path, "': cannot create '", partial, "' (",
               std::strerror(errno), ")");
}

void write_trace(const std::string& path, const std::vector<ThreadEvents>& threads, int pid,
                 const std::string& process_name) {
  std::string partial = partial_path(path);
  std::ofstream out(partial, std::ios::trunc);
  TANDEM_CHECK(out.good(), "profiler: cannot open '", partial, "' for writing");
  out << "{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n";
  bool first = true;
  auto separator = [&] { return std::exchange(first, false) ? "" : ",\n"; };
  auto micros = [](int64_t ns) {
    return str_cat(ns / 1000, ".", absl::Dec(ns % 1000, absl::kZeroPad3));
  };
  if (!process_name.empty()) {
    out << separator() << "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" << pid
        << ",\"args\":{\"name\":\"" << escape(process_name) << "\"}}";
  }
  for (const ThreadEvents& thread : threads) {
    out << separator() << "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" << pid
        << ",\"tid\":" << thread.tid << ",\"args\":{\"name\":\"" << escape(thread.name) << "\"}}";
    for (const Event& e : thread.events) {
      out << separator() << "{\"ph\":\"X\",\"cat\":\"" << category(e.kind) << "\",\"name\":\""
          << escape(e.name) << "\",\"pid\":" << pid << ",\"tid\":" << thread.tid
          << ",\"ts\":" << micros(e.begin_ns) << ",\"dur\":" << micros(e.end_ns - e.begin_ns)
          << "}";
      if (e.flow != 0 && e.kind != EventKind::kWait) {
        // A flow arrow from the push to the execution of the same op.
        bool start = e.kind == EventKind::kPush;
        out << separator() << "{\"ph\":\"" << (start ? "s" : "f") << "\","
            << (start ? "" : "\"bp\":\"e\",") << "\"cat\":\"op\",\"name\":\"op\",\"id\":" << e.flow
            << ",\"pid\":" << pid << ",\"tid\":" << thread.tid << ",\"ts\":" << micros(e.begin_ns)
            << "}";
      }
    }
  }
  out << "\n]}\n";
  out.close();
  bool written = !out.fail() && std::rename(partial.c_str(), path.c_str()) == 0;
  if (!written) std::remove(partial.c_str());
  TANDEM_CHECK(written, "profiler: failed writing '", path, "' (", std::strerror(errno), ")");
}

}  // namespace

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void start(std::string path) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  TANDEM_CHECK(!r.running, "profiler: already running (writing to '", r.path, "')");
  check_writable(tagged(path, r.tag));
  r.path = std::move(path);
  r.running = true;
  take_events(r.buffers);  // Drop stragglers recorded after the last stop().
  detail::enabled.store(true, std::memory_order_relaxed);
}

void stop() {
  Registry& r = registry();
  std::vector<std::shared_ptr<ThreadBuffer>> buffers;
  std::string path, process_name;
  int pid = 1;
  {
    std::lock_guard lock(r.mu);
    if (!r.running) return;
    r.running = false;
    detail::enabled.store(false, std::memory_order_relaxed);
    buffers = r.buffers;
    path = tagged(r.path, r.tag);
    pid = r.pid;
    process_name = r.process_name;
  }
  write_trace(path, take_events(buffers), pid, process_name);
}

void set_process(int id, std::string name, const std::string& tag) {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  if (r.running) check_writable(tagged(r.path, tag));
  r.pid = id;
  r.process_name = std::move(name);
  r.tag = tag;
}

void set_thread_name(std::string name) {
  ThreadBuffer& buffer = this_thread_buffer();
  std::lock_guard lock(buffer.mu);
  buffer.name = std::move(name);
}

void record(EventKind kind, const char* name, int64_t begin_ns, int64_t end_ns, uint64_t flow) {
  ThreadBuffer& buffer = this_thread_buffer();
  std::lock_guard lock(buffer.mu);
  buffer.events.push_back(Event{name, begin_ns, end_ns, flow, kind});
}

}  // namespace tandem::profiler
