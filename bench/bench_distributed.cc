// Data parallelism on this machine: what Tandem's collectives cost over the
// plain MPI call, how much of DistributedDataParallel's all-reduce hides
// behind backward, and a scaling model for bigger machines built from the
// measured figures (bench/README.md, "bench_distributed").
//
//   build/release/bench/bench_distributed [--ranks 2] [--steps 100]
//
// Started alone it starts itself again under mpirun with --ranks processes,
// each with one OpenMP thread (the ranks share this machine's cores). Rank 0
// prints.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

#include "bench/harness.h"
#include "bench/tutorial_models.h"
#include "tandem/tandem.h"

using namespace tandem;
using bench::Clock;

namespace {

// Runs this program under mpirun and returns its exit status.
int run_under_mpirun(int argc, char** argv) {
  std::string command = "mpirun --allow-run-as-root --oversubscribe -x OMP_NUM_THREADS=1 -np " +
                        bench::flag(argc, argv, "--ranks", "2") + " " +
                        bench::program_beside("bench_distributed");
  for (int i = 1; i < argc; ++i) command += std::string(" '") + argv[i] + "'";
  std::fflush(stdout);
  const int status = std::system(command.c_str());
  return status == 0 ? 0 : 1;
}

// Median microseconds of `iterations` runs of `plain` (MPI_Allreduce) and of
// `ours` (Tandem's all_reduce, pushed and waited for), alternating.
struct Pair {
  double mpi_us, tandem_us;
};

Pair time_all_reduce(int64_t floats, int iterations) {
  Tensor x = full({floats}, 1.0);
  std::vector<float> in(static_cast<size_t>(floats), 1.0f), out(in.size());
  std::vector<double> mpi, ours;
  for (int i = -2; i < iterations; ++i) {  // Two rounds of warm-up.
    distributed::barrier();
    auto begin = Clock::now();
    MPI_Allreduce(in.data(), out.data(), static_cast<int>(floats), MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
    auto end = Clock::now();
    if (i >= 0) mpi.push_back(bench::ns_between(begin, end) / 1000);
    distributed::barrier();
    begin = Clock::now();
    distributed::all_reduce(x).wait_to_read();
    end = Clock::now();
    if (i >= 0) ours.push_back(bench::ns_between(begin, end) / 1000);
  }
  return {bench::median(mpi), bench::median(ours)};
}

void bandwidth_table(int size) {
  if (distributed::rank() == 0) {
    std::printf(
        "\nall-reduce (sum, float32), %d ranks: median time, and bus bandwidth "
        "(bytes * 2(n-1)/n / time)\n",
        size);
    std::printf("%10s %12s %12s %8s %14s %14s\n", "bytes", "MPI us", "Tandem us", "ratio",
                "MPI GB/s", "Tandem GB/s");
  }
  for (int64_t bytes : {int64_t{4} << 10, int64_t{64} << 10, int64_t{1} << 20, int64_t{4} << 20,
                        int64_t{16} << 20, int64_t{64} << 20}) {
    const int64_t floats = bytes / 4;
    // About 1 GiB a size, at least 30 calls: medians steady enough to
    // compare at the 5% the issue asks for.
    const int iterations =
        static_cast<int>(std::clamp<int64_t>((int64_t{1} << 30) / bytes, 30, 400));
    Pair t = time_all_reduce(floats, iterations);
    const double bus = static_cast<double>(bytes) * 2 * (size - 1) / size;
    if (distributed::rank() == 0) {
      std::printf("%10lld %12.1f %12.1f %7.3fx %14.2f %14.2f\n", static_cast<long long>(bytes),
                  t.mpi_us, t.tandem_us, t.tandem_us / t.mpi_us, bus / t.mpi_us / 1000,
                  bus / t.tandem_us / 1000);
    }
  }
}

// The fraction of the time the communication thread spent in all-reduces
// during which the worker was running kernels, from a TANDEM_PROFILE trace.
double hidden_fraction(const std::string& profile) {
  std::ifstream in(profile);
  nlohmann::json trace = nlohmann::json::parse(in);
  std::map<int, std::string> threads;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") threads[e["tid"]] = e["args"]["name"];
  }
  std::vector<std::pair<double, double>> busy, exchanges;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X" || e["cat"] != "execute") continue;
    const std::string& thread = threads[e["tid"]];
    const double begin = e["ts"], end = begin + e["dur"].get<double>();
    if (thread.starts_with("cpu worker")) busy.emplace_back(begin, end);
    if (thread.starts_with("communication") && e["name"] == "all_reduce") {
      exchanges.emplace_back(begin, end);
    }
  }
  double total = 0, hidden = 0;
  for (const auto& [begin, end] : exchanges) {
    total += end - begin;
    for (const auto& [b, e] : busy) hidden += std::max(0.0, std::min(end, e) - std::max(begin, b));
  }
  return total > 0 ? hidden / total : 0;
}

struct StepFigures {
  double step_ms;     // Median training step.
  double hidden = 0;  // hidden_fraction of the profiled steps.
  int64_t gradient_bytes = 0;
  size_t buckets = 0;
};

// The tutorial's CNN, Adam, batches of `batch` rows per rank; DDP with
// `cap_mb` buckets, or no communication at all when cap_mb is 0.
StepFigures cnn_steps(int steps, int64_t batch, double cap_mb) {
  manual_seed(1);
  auto net = bench::make_tutorial_cnn();
  std::unique_ptr<distributed::DistributedDataParallel> ddp;
  if (cap_mb > 0) {
    ddp = std::make_unique<distributed::DistributedDataParallel>(
        net, distributed::DataParallelOptions{.bucket_cap_mb = cap_mb});
  }
  optim::Adam opt(net->parameters());
  Tensor x = randn({batch, 1, 28, 28});
  Tensor y = cast(mul(rand({batch}), 9.99), DType::kInt64);  // Labels 0..9.
  auto step = [&] {
    Tensor loss = cross_entropy((*net)(x), y);
    opt.zero_grad();
    loss.backward();
    opt.step();
    engine::current().wait_all();
  };
  for (int i = 0; i < 3; ++i) step();
  std::vector<double> times;
  for (int i = 0; i < steps; ++i) {
    distributed::barrier();
    auto begin = Clock::now();
    step();
    times.push_back(bench::ns_between(begin, Clock::now()) / 1e6);
  }
  StepFigures figures{bench::median(times)};
  for (const Tensor& p : net->parameters())
    figures.gradient_bytes += static_cast<int64_t>(p.nbytes());
  if (ddp) {
    figures.buckets = ddp->buckets().size();
    // Each rank writes its own file (profiler::set_process): .rankN.json.
    profiler::start("/tmp/tandem_bench_distributed.json");
    for (int i = 0; i < 5; ++i) step();
    profiler::stop();
    const double mine = hidden_fraction(
        str_cat("/tmp/tandem_bench_distributed.rank", distributed::rank(), ".json"));
    figures.hidden =
        distributed::all_reduce(full({1}, mine, DType::kFloat64), distributed::ReduceOp::kMean)
            .item<double>();
  }
  return figures;
}

}  // namespace

// Ring all-reduce of `bytes` in `buckets` buckets over n workers at
// `gbit_s`, each message step costing `alpha_us` of latency: 2(n-1)/n of
// the bytes cross each link, in 2(n-1) steps per bucket.
double ring_ms(int64_t bytes, int n, double gbit_s, double alpha_us, size_t buckets) {
  const double bandwidth = 2.0 * (n - 1) / n * static_cast<double>(bytes) / (gbit_s * 1e9 / 8);
  const double latency = 2.0 * (n - 1) * alpha_us * 1e-6 * static_cast<double>(buckets);
  return (bandwidth + latency) * 1e3;
}

void projection(const StepFigures& alone, const StepFigures& overlapped, double alpha_us) {
  std::printf(
      "\nscaling model: the CNN's measured step (%.1f ms of compute per rank, %.2f MB "
      "of gradients), ring all-reduce with %.0f us per message step, %.0f%% of it hidden behind "
      "backward as measured with the default buckets; efficiency = compute / step\n",
      alone.step_ms, static_cast<double>(alone.gradient_bytes) / 1e6, alpha_us,
      100 * overlapped.hidden);
  std::printf("%8s %8s %12s %10s %12s %18s\n", "workers", "Gb/s", "all-reduce", "step ms",
              "efficiency", "bucket >= (10%)");
  for (int n : {8, 64, 512}) {
    for (double gbit : {25.0, 100.0, 400.0}) {
      const double ar = ring_ms(alone.gradient_bytes, n, gbit, alpha_us, overlapped.buckets);
      const double exposed = ar * (1 - overlapped.hidden);
      const double step = std::max(alone.step_ms, alone.step_ms + exposed);
      // The bucket whose latency is at most 10% of its bandwidth time:
      // 2(n-1) alpha <= 0.1 * 2(n-1)/n * b / BW, so b >= 10 n alpha BW.
      const double bucket_mb = 10.0 * n * alpha_us * 1e-6 * gbit * 1e9 / 8 / 1e6;
      std::printf("%8d %8.0f %9.2f ms %10.2f %11.0f%% %15.1f MB%s\n", n, gbit, ar, step,
                  100 * alone.step_ms / step, bucket_mb,
                  bucket_mb * 1e6 > static_cast<double>(alone.gradient_bytes) ? " (> model)" : "");
    }
  }
}

int main(int argc, char** argv) try {
  if (std::getenv("OMPI_COMM_WORLD_SIZE") == nullptr) return run_under_mpirun(argc, argv);
  distributed::init();
  const int size = distributed::world_size();
  const int steps = std::atoi(bench::flag(argc, argv, "--steps", "100").c_str());
  const bool root = distributed::rank() == 0;
  if (root) std::printf("bench_distributed: %d ranks on this machine\n", size);
  bandwidth_table(size);

  const int64_t batch = 64;
  if (root) {
    std::printf("\nthe tutorial's CNN, Adam, %lld rows per rank per step: median step time\n",
                static_cast<long long>(batch));
  }
  const StepFigures alone = cnn_steps(steps, batch, 0);
  std::vector<std::pair<double, StepFigures>> runs;
  for (double cap : {25.0, 1.0, 0.25}) runs.emplace_back(cap, cnn_steps(steps, batch, cap));
  // What the step's gradients cost to all-reduce with nothing else running.
  const double exchange_ms = time_all_reduce(alone.gradient_bytes / 4, 50).tandem_us / 1000;
  if (root) {
    std::printf("%30s %8.2f ms   (all-reduce of its %.2f MB of gradients alone: %.2f ms)\n",
                "no communication", alone.step_ms, static_cast<double>(alone.gradient_bytes) / 1e6,
                exchange_ms);
    for (const auto& [cap, f] : runs) {
      const double exposed = f.step_ms - alone.step_ms;
      std::printf(
          "  DDP, bucket_cap_mb %5.2f (%zu) %8.2f ms   %+.2f ms exposed: %3.0f%% of "
          "the all-reduce hidden; profile: the worker busy during %3.0f%% of it\n",
          cap, f.buckets, f.step_ms, exposed, 100 * std::clamp(1 - exposed / exchange_ms, 0.0, 1.0),
          100 * f.hidden);
    }
    // The default buckets' overlap as the step times measured it, and 5 us
    // a message step: a datacenter network's, not this machine's shared
    // memory.
    StepFigures ddp = runs.front().second;
    ddp.hidden = std::clamp(1 - (ddp.step_ms - alone.step_ms) / exchange_ms, 0.0, 1.0);
    projection(alone, ddp, 5.0);
  }
  distributed::finalize();
  return 0;
} catch (const Error& e) {
  std::fprintf(stderr, "bench_distributed: %s\n", e.what());
  return 1;
}
