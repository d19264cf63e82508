// Engine benchmarks: what one op costs to push, to run and to read back, and
// whether independent work really runs in parallel. Figures, not pass/fail;
// each table prints the target it is measured against.
//
//   build/release/bench/bench_engine                  # all of it, ~30 s
//   build/release/bench/bench_engine --no_tables      # only (a), the Google Benchmark part
//   build/release/bench/bench_engine --benchmark_filter=Write
//
// (a) Push overhead: Google Benchmark, one iteration = one push of an empty op;
//     the engine is drained (wait_all) every kBatch pushes with the timer paused.
// (b) The classic loop, 10000 x `y = x + 1` (and the chained `x = x + 1`):
//     wait after each op vs push all and wait once, against the cost model
//     async total = t1 + N * t2 + t3 (see Note [Loop figures]).
// (c) Two independent chains of ~1 ms ops: two workers vs one.
//
// Everything runs on the threaded engine, engine::current(), with its default
// worker count (one) and no bound on run-ahead (kMeasuredEngine) unless a
// figure says otherwise.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "benchmark/benchmark.h"

#include "bench/harness.h"
#include "tandem/tandem.h"

namespace {

using bench::Clock;
using bench::median;
using bench::ns_between;
using tandem::Device;
using tandem::Tensor;
using tandem::engine::Engine;
using tandem::engine::EngineKind;
using tandem::engine::EngineOptions;
using tandem::engine::RunContext;
using tandem::engine::Var;

// y = x + c on a one-element float tensor, pushed straight through the engine
// API: the engine's share of an op, with no registry in front (same kernel,
// same captures (two tensors), one output allocated on the caller per op).
// BM_PushAddOp measures the same op through the registry (tandem::add), and
// bench_ops compares whole op calls with libtorch.
Tensor add_scalar(const Tensor& x, float c) {
  Tensor y = Tensor::empty({1});
  tandem::engine::current().push(
      [x, y, c](const RunContext&) { y.data<float>()[0] = x.data<float>()[0] + c; }, Device::cpu(),
      {x.var()}, {y.var()}, "add");
  return y;
}

// ---------------------------------------------------------------------------
// (a) Push overhead of an empty op.
// ---------------------------------------------------------------------------

constexpr int kBatch = 1000;  // Pushes between two drains of the engine.

// One iteration pushes one empty op that writes (or only reads) one of
// state.range(0) vars, round robin. The time is the caller's: push only.
void BM_PushEmpty(benchmark::State& state, bool write) {
  Engine& engine = tandem::engine::current();
  std::vector<Var*> vars(static_cast<size_t>(state.range(0)));
  for (Var*& var : vars) var = tandem::engine::new_var();
  size_t i = 0;
  for (auto _ : state) {
    Var* var = vars[i % vars.size()];
    if (write) {
      engine.push([](const RunContext&) {}, Device::cpu(), {}, {var}, "empty");
    } else {
      engine.push([](const RunContext&) {}, Device::cpu(), {var}, {}, "empty");
    }
    if (++i % kBatch == 0) {
      state.PauseTiming();
      engine.wait_all();
      state.ResumeTiming();
    }
  }
  engine.wait_all();
  for (Var* var : vars) engine.delete_var(var);
  state.counters["vars"] = static_cast<double>(vars.size());
}

// The push half of `y = x + 1`: allocate y, copy two tensor handles into the
// closure, push. This is t1 of (b) without the contention of a running loop.
void BM_PushAddScalar(benchmark::State& state) {
  Engine& engine = tandem::engine::current();
  Tensor x = Tensor::from_vector(std::vector<float>{1.0f}, {1});
  size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(add_scalar(x, 1.0f));
    if (++i % kBatch == 0) {
      state.PauseTiming();
      engine.wait_all();
      state.ResumeTiming();
    }
  }
  engine.wait_all();
}

// BM_PushAddScalar through the public API: registry lookup, shape inference
// and attribute parsing on the caller, then the same kind of push.
void BM_PushAddOp(benchmark::State& state) {
  Engine& engine = tandem::engine::current();
  Tensor x = Tensor::from_vector(std::vector<float>{1.0f}, {1});
  size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(tandem::add(x, 1.0));
    if (++i % kBatch == 0) {
      state.PauseTiming();
      engine.wait_all();
      state.ResumeTiming();
    }
  }
  engine.wait_all();
}

BENCHMARK_CAPTURE(BM_PushEmpty, write, true)
    ->Arg(1)
    ->Arg(16)
    ->MinTime(0.1)
    ->Repetitions(10)
    ->ReportAggregatesOnly(true)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_PushEmpty, read, false)
    ->Arg(1)
    ->Arg(16)
    ->MinTime(0.1)
    ->Repetitions(10)
    ->ReportAggregatesOnly(true)
    ->UseRealTime();
BENCHMARK(BM_PushAddScalar)
    ->MinTime(0.1)
    ->Repetitions(10)
    ->ReportAggregatesOnly(true)
    ->UseRealTime();
BENCHMARK(BM_PushAddOp)->MinTime(0.1)->Repetitions(10)->ReportAggregatesOnly(true)->UseRealTime();

// ---------------------------------------------------------------------------
// (b) The classic loop.
// ---------------------------------------------------------------------------
//
// Note [Loop figures]
// N ops of `y = x + 1` (independent: every op reads the same x) or
// `x = x + 1` (chained: each op reads the previous op's output), each figure
// the median of kLoopRuns runs:
// * async total: push all N, then one read back (`to_vector`) of the last
//   result; from the first push to the value in hand.
// * sync total: the same with `wait_to_read()` after every push.
// * t1, push cost: the caller's time in the async push loop / N. This is
//   what the caller pays while the workers run the ops beside it (contention
//   included); BM_PushAddScalar in (a) is the same push with no loop running.
// * t2, execution cost: N ops are pushed behind a "gate" op that holds x's
//   var, so they are all queued when the gate opens; t2 = wall time from
//   opening the gate until wait_all() returns / N. It is what the engine's
//   workers need per op: the kernel, dependency bookkeeping, dispatch to a
//   worker, closure destruction (which frees the tensor), for all workers
//   together (independent ops can run on two workers at once; a chain runs on
//   one). The naive engine row runs the same loop inline on the caller: the
//   kernel plus a push with no threads at all.
// * t3, read back: `to_vector` (one wait + copy) of a tensor already ready.
// * model: t1 + N * t2 + t3, i.e. the ops stream through the workers as fast
//   as they can run them while the caller pushes. It is exact only when
//   pushing keeps ahead (t1 <= t2); otherwise the caller's pushes set the pace
//   and async ~= N * t1, which the table also prints.

constexpr int kLoopOps = 10000;
constexpr int kLoopRuns = 11;

enum class Loop { kIndependent, kChained };

// One step of the loop; returns the tensor the loop reads back at the end.
Tensor loop_step(Loop loop, Tensor& x) {
  if (loop == Loop::kChained) return x = add_scalar(x, 1.0f);
  return add_scalar(x, 1.0f);
}

float expected_value(Loop loop) { return loop == Loop::kChained ? kLoopOps : 1.0f; }

void check_value(Loop loop, float value) {
  if (value != expected_value(loop)) {
    std::fprintf(stderr, "bench_engine: wrong result %g, expected %g\n", value,
                 expected_value(loop));
    std::exit(1);
  }
}

struct LoopRun {
  double push_ns = 0;   // The push loop only.
  double total_ns = 0;  // Push loop + read back.
};

LoopRun run_loop(Loop loop, bool sync) {
  Tensor x = Tensor::from_vector(std::vector<float>{0.0f}, {1});
  tandem::engine::current().wait_all();
  Tensor y;
  Clock::time_point begin = Clock::now();
  for (int i = 0; i < kLoopOps; ++i) {
    y = loop_step(loop, x);
    if (sync) y.wait_to_read();
  }
  Clock::time_point pushed = Clock::now();
  float value = y.to_vector<float>()[0];
  Clock::time_point end = Clock::now();
  check_value(loop, value);
  tandem::engine::current().wait_all();
  return {ns_between(begin, pushed), ns_between(begin, end)};
}

// t2 of Note [Loop figures]: drains N ops that are already queued.
double run_queued(Loop loop) {
  Engine& engine = tandem::engine::current();
  Tensor x = Tensor::from_vector(std::vector<float>{0.0f}, {1});
  engine.wait_all();
  std::atomic<int> open{0};
  engine.push([&open](const RunContext&) { open.wait(0, std::memory_order_acquire); },
              Device::cpu(), {}, {x.var()}, "gate");
  Tensor y;
  for (int i = 0; i < kLoopOps; ++i) y = loop_step(loop, x);
  Clock::time_point begin = Clock::now();
  open.store(1, std::memory_order_release);
  open.notify_one();
  engine.wait_all();
  Clock::time_point end = Clock::now();
  check_value(loop, y.to_vector<float>()[0]);
  return ns_between(begin, end) / kLoopOps;
}

// t3 of Note [Loop figures].
double run_read_back() {
  Tensor y = add_scalar(Tensor::from_vector(std::vector<float>{0.0f}, {1}), 1.0f);
  tandem::engine::current().wait_all();
  constexpr int kReads = 1000;
  std::vector<double> samples;
  for (int i = 0; i < kReads; ++i) {
    Clock::time_point begin = Clock::now();
    benchmark::DoNotOptimize(y.to_vector<float>());
    samples.push_back(ns_between(begin, Clock::now()));
  }
  return median(samples);
}

void print_loop_table(Loop loop, double t3) {
  std::vector<double> async_push, async_total, sync_total, queued;
  for (int run = 0; run < kLoopRuns; ++run) {
    LoopRun a = run_loop(loop, /*sync=*/false);
    async_push.push_back(a.push_ns / kLoopOps);
    async_total.push_back(a.total_ns);
    sync_total.push_back(run_loop(loop, /*sync=*/true).total_ns);
    queued.push_back(run_queued(loop));
  }
  double t1 = median(async_push);
  double t2 = median(queued);
  double total = median(async_total);
  double sync = median(sync_total);
  double model = t1 + kLoopOps * t2 + t3;
  const char* label = loop == Loop::kChained ? "chained   x = x + 1 (each op reads the last)"
                                             : "independent   y = x + 1 (every op reads x)";
  std::printf("\n(b) %d x %s, %d workers, median of %d runs\n", kLoopOps, label,
              tandem::engine::current().num_workers(Device::cpu()), kLoopRuns);
  std::printf("  t1  push, per op (caller, async loop)      %9.0f ns\n", t1);
  std::printf("  t2  execution, per op (queued, workers)    %9.0f ns\n", t2);
  std::printf("  t3  read back (to_vector, ready tensor)    %9.0f ns\n", t3);
  std::printf("  async total (push all, wait once)          %9.3f ms\n", total / 1e6);
  std::printf("  model t1 + N*t2 + t3                       %9.3f ms\n", model / 1e6);
  std::printf("  ratio async / model                        %9.2f x   (target <= 1.2)\n",
              total / model);
  std::printf("  push-bound estimate N*t1 + t2 + t3         %9.3f ms\n",
              (kLoopOps * t1 + t2 + t3) / 1e6);
  std::printf("  sync total (wait after each op)            %9.3f ms  (%.0f ns/op)\n", sync / 1e6,
              sync / kLoopOps);
  std::printf("  speedup async vs sync                      %9.2f x\n", sync / total);
}

// The engine these figures measure: the default worker count, and no bound
// on how far the frontend runs ahead (Note [Bounded run-ahead] in
// core/engine/threaded_engine.cc): the loops measure the queue itself, and
// run_queued holds kLoopOps ops behind a gate, which a bound would deadlock.
constexpr EngineOptions kMeasuredEngine{.max_in_flight = 0};

// The same loop on the naive engine (no threads): the kernel plus a push.
void print_naive_row() {
  tandem::engine::configure(EngineKind::kNaive);
  for (Loop loop : {Loop::kIndependent, Loop::kChained}) {
    std::vector<double> per_op;
    for (int run = 0; run < kLoopRuns; ++run) {
      per_op.push_back(run_loop(loop, /*sync=*/false).total_ns / kLoopOps);
    }
    std::printf("  naive engine, %-11s loop, per op (inline)  %6.0f ns\n",
                loop == Loop::kChained ? "chained" : "independent", median(per_op));
  }
  tandem::engine::configure(EngineKind::kThreaded, kMeasuredEngine);
}

// ---------------------------------------------------------------------------
// (c) Two independent chains of heavy ops.
// ---------------------------------------------------------------------------

constexpr int64_t kHeavyElements = 16 * 1024;  // 64 KiB per buffer: stays in L2.
constexpr int kChainOps = 20;
constexpr int kHeavyRuns = 7;

// `passes` sweeps of v = v * a + b: real arithmetic the compiler cannot fold.
void heavy_kernel(float* v, int64_t n, int passes) {
  for (int pass = 0; pass < passes; ++pass) {
    for (int64_t i = 0; i < n; ++i) v[i] = v[i] * 0.9999f + 0.0001f;
  }
}

// The number of passes that takes about `target_ns` on this machine.
int calibrate_passes(double target_ns) {
  std::vector<float> buffer(kHeavyElements, 1.0f);
  constexpr int kProbe = 200;
  std::vector<double> samples;
  for (int i = 0; i < 5; ++i) {
    Clock::time_point begin = Clock::now();
    heavy_kernel(buffer.data(), kHeavyElements, kProbe);
    samples.push_back(ns_between(begin, Clock::now()));
  }
  benchmark::DoNotOptimize(buffer.data());
  // The fastest probe: the others were slowed down by whatever else ran.
  double per_pass = *std::min_element(samples.begin(), samples.end()) / kProbe;
  return std::max(1, static_cast<int>(target_ns / per_pass));
}

// Pushes two chains of kChainOps heavy ops, interleaved, each op reading and
// writing its chain's tensor; returns the time until both are done.
double run_two_chains(Engine& engine, int passes) {
  Tensor a = Tensor::from_vector<float>(std::vector<float>(kHeavyElements, 1.0f), {kHeavyElements});
  Tensor b = Tensor::from_vector<float>(std::vector<float>(kHeavyElements, 1.0f), {kHeavyElements});
  Clock::time_point begin = Clock::now();
  for (int i = 0; i < kChainOps; ++i) {
    for (const Tensor& t : {a, b}) {
      engine.push(
          [t, passes](const RunContext&) { heavy_kernel(t.data<float>(), t.numel(), passes); },
          Device::cpu(), {t.var()}, {t.var()}, "heavy");
    }
  }
  engine.wait_all();
  return ns_between(begin, Clock::now());
}

// The machine's own ceiling: the same kernels on two plain threads vs one,
// with no engine. On a shared or virtualized 2-core machine this is often far
// from 0.5, and the engine's ratio should be judged against it.
double run_two_chains_raw(bool two_threads, int passes) {
  std::vector<float> a(kHeavyElements, 1.0f), b(kHeavyElements, 1.0f);
  auto chain = [passes](std::vector<float>& v) {
    for (int i = 0; i < kChainOps; ++i) heavy_kernel(v.data(), kHeavyElements, passes);
  };
  Clock::time_point begin = Clock::now();
  if (two_threads) {
    std::thread other([&] { chain(a); });
    chain(b);
    other.join();
  } else {
    chain(a);
    chain(b);
  }
  double ns = ns_between(begin, Clock::now());
  benchmark::DoNotOptimize(a.data());
  benchmark::DoNotOptimize(b.data());
  return ns;
}

void print_parallel_table() {
  int passes = calibrate_passes(1e6);
  auto parallel = tandem::engine::make_engine(EngineKind::kThreaded, {.cpu_workers = 2});
  auto serial = tandem::engine::make_engine(EngineKind::kThreaded, {.cpu_workers = 1});
  std::vector<double> parallel_ns, serial_ns, raw_parallel_ns, raw_serial_ns;
  for (int run = 0; run < kHeavyRuns; ++run) {
    parallel_ns.push_back(run_two_chains(*parallel, passes));
    serial_ns.push_back(run_two_chains(*serial, passes));
    raw_parallel_ns.push_back(run_two_chains_raw(/*two_threads=*/true, passes));
    raw_serial_ns.push_back(run_two_chains_raw(/*two_threads=*/false, passes));
  }
  double p = median(parallel_ns);
  double s = median(serial_ns);
  double raw_p = median(raw_parallel_ns);
  double raw_s = median(raw_serial_ns);
  std::printf(
      "\n(c) 2 independent chains x %d ops of ~1 ms (%d passes over %lld floats), "
      "median of %d runs\n",
      kChainOps, passes, static_cast<long long>(kHeavyElements), kHeavyRuns);
  std::printf("  serial   (1 worker)                        %9.2f ms  (%.3f ms/op)\n", s / 1e6,
              s / 1e6 / (2 * kChainOps));
  std::printf("  parallel (%d workers)                       %9.2f ms\n",
              parallel->num_workers(Device::cpu()), p / 1e6);
  std::printf("  ratio parallel / serial                    %9.2f x   (target <= 0.6)\n", p / s);
  std::printf("  no engine: 1 thread %.2f ms, 2 threads %.2f ms, ratio %.2f x (machine ceiling)\n",
              raw_s / 1e6, raw_p / 1e6, raw_p / raw_s);
}

}  // namespace

int main(int argc, char** argv) {
  // Our own flag first: Google Benchmark rejects flags it does not know.
  bool tables = true;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--no_tables") == 0) {
      tables = false;
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;

  tandem::engine::configure(EngineKind::kThreaded, kMeasuredEngine);
  std::printf("(a) push overhead of an empty op, ns per push (median: target <= 500 ns)\n");
  std::fflush(stdout);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  if (!tables) return 0;

  double t3 = run_read_back();
  print_loop_table(Loop::kIndependent, t3);
  print_loop_table(Loop::kChained, t3);
  print_naive_row();
  print_parallel_table();
  return 0;
}
