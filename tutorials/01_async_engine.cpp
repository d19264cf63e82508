// Tutorial 1: the asynchronous engine.
//
// Every Tandem op is pushed to an engine that runs it later, on a worker
// thread, once the tensors it reads are ready. The caller gets its result
// tensor at once and blocks only when it reads a value. Steps:
//   1. z = x * y + 2: the pushes return at once; reading z waits.
//   2. Which thread ran each op.
//   3. A loop of small ops: waiting after each one vs once at the end.
//   4. A kernel that throws: the error surfaces at the wait, naming the op and
//      the line that pushed it, and the engine keeps working.
//   5. The naive engine: the same error, thrown at the push line.
//
//   build/release/tutorials/01_async_engine           # or: tools/tandem.sh demo
//   build/release/tutorials/01_async_engine --quick   # what CI runs
//   TANDEM_PROFILE=trace.json build/release/tutorials/01_async_engine
//       # then open trace.json in ui.perfetto.dev: pushes on the frontend
//       # thread, executions on "cpu worker N", joined by arrows.
//
// Steps 1, 2 and 4 push small hand-written kernels straight through the
// engine API (traced_mul, traced_add, checked_sqrt), the way every op does
// internally, so that they can record where they ran or fail on purpose.
// Step 3 uses the real op, tandem::add.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tandem/tandem.h"

using tandem::Device;
using tandem::Tensor;
using tandem::engine::EngineKind;
using tandem::engine::RunContext;
using Clock = std::chrono::steady_clock;

namespace {

const Clock::time_point kStart = Clock::now();

// Milliseconds since the program started.
double now_ms() { return std::chrono::duration<double, std::milli>(Clock::now() - kStart).count(); }

std::string thread_name(std::thread::id id) {
  std::ostringstream out;
  out << id;
  return out.str();
}

// Where and when an op ran, filled in by its kernel. `work` makes the kernel
// pretend to be heavy (it sleeps), so that the asynchrony is visible.
struct RunInfo {
  std::chrono::milliseconds work{0};
  int worker = -1;
  std::thread::id thread;
  double begin_ms = 0;
  double end_ms = 0;
};

void note_begin(RunInfo* info, const RunContext& context) {
  if (info == nullptr) return;
  info->worker = context.worker;
  info->thread = std::this_thread::get_id();
  info->begin_ms = now_ms();
  std::this_thread::sleep_for(info->work);
}

void note_end(RunInfo* info) {
  if (info != nullptr) info->end_ms = now_ms();
}

// out = a * b, elementwise. The op reads a and b and writes out; the engine
// runs it once every earlier write of a and b has finished. `where` is the
// caller's line, which an error will name.
Tensor traced_mul(const Tensor& a, const Tensor& b, RunInfo* info = nullptr,
                  std::source_location where = std::source_location::current()) {
  Tensor out = Tensor::empty(a.shape());
  auto kernel = [a, b, out, info](const RunContext& context) {
    note_begin(info, context);
    for (int64_t i = 0; i < out.numel(); ++i) {
      out.data<float>()[i] = a.data<float>()[i] * b.data<float>()[i];
    }
    note_end(info);
  };
  tandem::engine::current().push(kernel, Device::cpu(), {a.var(), b.var()}, {out.var()}, "mul",
                                 where);
  return out;
}

// out = a + c, elementwise.
Tensor traced_add(const Tensor& a, float c, RunInfo* info = nullptr,
                  std::source_location where = std::source_location::current()) {
  Tensor out = Tensor::empty(a.shape());
  auto kernel = [a, c, out, info](const RunContext& context) {
    note_begin(info, context);
    for (int64_t i = 0; i < out.numel(); ++i) out.data<float>()[i] = a.data<float>()[i] + c;
    note_end(info);
  };
  tandem::engine::current().push(kernel, Device::cpu(), {a.var()}, {out.var()}, "add", where);
  return out;
}

// out = sqrt(a), elementwise; throws on a negative element, as a real kernel
// rejects bad input.
Tensor checked_sqrt(const Tensor& a, std::source_location where = std::source_location::current()) {
  Tensor out = Tensor::empty(a.shape());
  auto kernel = [a, out](const RunContext&) {
    for (int64_t i = 0; i < out.numel(); ++i) {
      float value = a.data<float>()[i];
      if (value < 0) throw std::domain_error("square root of a negative number");
      out.data<float>()[i] = std::sqrt(value);
    }
  };
  tandem::engine::current().push(kernel, Device::cpu(), {a.var()}, {out.var()}, "sqrt", where);
  return out;
}

std::string values(const Tensor& t) {
  std::string text;
  for (float v : t.to_vector<float>()) {
    char number[32];
    std::snprintf(number, sizeof(number), "%g", v);
    text += (text.empty() ? "[" : ", ") + std::string(number);
  }
  return text + "]";
}

// Milliseconds that `body` takes.
double time_ms(const std::function<void()>& body) {
  double begin = now_ms();
  body();
  return now_ms() - begin;
}

}  // namespace

int main(int argc, char** argv) {
  bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  auto work = std::chrono::milliseconds(quick ? 20 : 200);
  auto& engine = tandem::engine::current();
  std::printf("Tandem tutorial 1: the asynchronous engine (%s engine, CPU workers: %d)\n",
              engine.kind() == EngineKind::kThreaded ? "threaded" : "naive",
              engine.num_workers(Device::cpu()));
  std::printf("Run with TANDEM_PROFILE=trace.json to see this run in ui.perfetto.dev.\n\n");

  // Step 1: push z = x * y + 2; each kernel pretends to work for a while.
  std::printf("1. z = x * y + 2, each kernel taking %lld ms\n",
              static_cast<long long>(work.count()));
  Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3});
  Tensor y = Tensor::from_vector(std::vector<float>{4, 5, 6}, {3});
  RunInfo mul_info, add_info;
  mul_info.work = add_info.work = work;
  double begin = now_ms();
  Tensor t = traced_mul(x, y, &mul_info);
  std::printf("   %7.2f ms  push mul returned\n", now_ms() - begin);
  Tensor z = traced_add(t, 2, &add_info);
  std::printf("   %7.2f ms  push add returned; z.shape() = %s is known without waiting\n",
              now_ms() - begin, z.shape().to_string().c_str());
  std::string z_values = values(z);  // Reading blocks until mul, then add, have run.
  std::printf("   %7.2f ms  z = %s: reading z waited for both kernels\n\n", now_ms() - begin,
              z_values.c_str());

  // Step 2: where each op ran (the kernels recorded it).
  std::printf("2. Where the ops ran (main thread: %s)\n",
              thread_name(std::this_thread::get_id()).c_str());
  for (auto [name, info] : {std::pair{"mul", &mul_info}, std::pair{"add", &add_info}}) {
    std::printf("   %s: worker %d, thread %s, from %.2f to %.2f ms\n", name, info->worker,
                thread_name(info->thread).c_str(), info->begin_ms - begin, info->end_ms - begin);
  }
  std::printf("   add read mul's output, so the engine started it only after mul ended.\n\n");

  // Step 3: a loop of tiny ops, waiting after each one vs once at the end.
  const int n = quick ? 1000 : 10000;
  std::printf("3. %d x `out = x + 1` on a one-element tensor\n", n);
  Tensor one = Tensor::from_vector(std::vector<float>{1}, {1});
  Tensor out;
  double sync_ms = time_ms([&] {
    for (int i = 0; i < n; ++i) {
      out = tandem::add(one, 1);
      out.wait_to_read();  // Blocks until this op has run.
    }
  });
  double async_ms = time_ms([&] {
    for (int i = 0; i < n; ++i) out = tandem::add(one, 1);  // Only pushes.
    out.wait_to_read();                                     // One wait for the last op.
  });
  std::printf("   sync  (wait after each op): %8.2f ms, %6.2f us/op\n", sync_ms, 1e3 * sync_ms / n);
  std::printf("   async (wait once at the end): %6.2f ms, %6.2f us/op, %.1fx faster\n", async_ms,
              1e3 * async_ms / n, sync_ms / async_ms);
  std::printf(
      "   Async, the caller queues ops while the workers run them; synchronously,\n"
      "   every op pays a round trip to a worker thread and back.\n\n");

  // Step 4: a kernel that throws. The push succeeds; the error travels with
  // the data and surfaces at the first wait that needs it.
  std::printf("4. An op that fails on a worker thread\n");
  Tensor negative = Tensor::from_vector(std::vector<float>{4, -1}, {2});
  try {
    Tensor root = checked_sqrt(negative);   // The error will name this line.
    Tensor shifted = tandem::add(root, 1);  // Reads a failed tensor: skipped, failure passed on.
    std::printf("   both pushes returned normally\n");
    shifted.wait_to_read();  // The error surfaces here (at the push with TANDEM_ENGINE=naive).
  } catch (const tandem::Error& e) {
    std::printf("   caught: %s\n", e.what());
    std::printf("   op '%s', pushed at %s\n", e.op().c_str(),
                tandem::format_location(e.where()).c_str());
  }
  std::printf("   the engine keeps working: x * y + 2 = %s\n\n",
              values(tandem::add(tandem::mul(x, y), 2)).c_str());

  // Step 5: the naive engine runs each op inside push, on the caller's thread.
  std::printf("5. The naive engine (or TANDEM_ENGINE=naive): each op runs inside push\n");
  tandem::engine::set_engine_kind(EngineKind::kNaive);
  RunInfo naive_info;
  Tensor naive_z = traced_add(traced_mul(x, y), 2, &naive_info);
  std::printf("   add ran on worker %d, thread %s: the main thread\n", naive_info.worker,
              thread_name(naive_info.thread).c_str());
  try {
    Tensor bad = checked_sqrt(negative);  // Throws right here, at the push.
    std::printf("   not reached\n");
  } catch (const tandem::Error& e) {
    std::printf("   caught at the push: %s\n", e.what());
  }
  std::printf("   z = %s; errors and debuggers now point at the line that pushed.\n",
              values(naive_z).c_str());
  return 0;
}
