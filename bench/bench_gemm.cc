// sgemm throughput: tandem::matmul vs oneDNN's own dnnl_sgemm vs torch::mm,
// against the CPU's peak. Target: Tandem >= 90% of dnnl_sgemm.
//
//   build/release/bench/bench_gemm    # ~1-2 min, most of it libtorch with the reference BLAS
//
// C = A B with n x n float32 row-major matrices, n in kGemmSizes. Each figure
// is GFLOP/s = 2 n^3 / (median seconds per product), bench::gemm_gflops.
// * Tandem: `tandem::matmul(a, b)` and a wait for the result, so the op's
//   dispatch and the engine's hand-off are counted along with oneDNN's matmul
//   primitive that runs it.
// * oneDNN: `dnnl_sgemm` called directly on this thread (OpenMP, 2 threads):
//   what the library underneath can do with no framework around it.
// * libtorch: `torch::mm` in each configuration of Note [libtorch
//   configurations] (harness.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "dnnl.h"

#include "bench/harness.h"
#include "tandem/tandem.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace {

using tandem::Tensor;

// ---------------------------------------------------------------------------
// The CPU's peak.
// ---------------------------------------------------------------------------
//
// Note [Peak FLOP/s]
// peak = cores x clock x FLOPs per cycle per core, where FLOPs per cycle =
// FMA pipes x float lanes x 2. The lanes follow from cpuid (16 with AVX-512,
// 8 with AVX2), but the number of FMA pipes, and whether a 512-bit FMA takes
// one pass or two (Zen 4 splits it, Zen 5 and Intel's server cores do not),
// cannot be read from any flag, and a VM's nominal clock need not be the one
// it runs at. So both factors are measured: the clock from a chain of
// dependent adds (one per cycle on every x86 core), and the FLOPs per cycle
// from an FMA loop with enough independent accumulators to fill every pipe,
// timed on one core. The printed peak is cores x measured clock x the FLOPs
// per cycle rounded to a power of two; the FMA loop on all cores at once is
// printed beside it as the machine's reachable ceiling.
#if defined(__x86_64__)

double measure_clock_ghz() {
  constexpr int64_t kIterations = 100'000'000;
  std::vector<double> ghz;
  for (int run = 0; run < 5; ++run) {
    int64_t n = kIterations, chain = 0;
    bench::Clock::time_point begin = bench::Clock::now();
    // Four dependent adds per iteration: 4 cycles, whatever the branch costs.
    asm volatile(
        "1:\n\t"
        "add $1, %1\n\tadd $1, %1\n\tadd $1, %1\n\tadd $1, %1\n\t"
        "sub $1, %0\n\tjnz 1b"
        : "+r"(n), "+r"(chain));
    ghz.push_back(4.0 * kIterations / bench::ns_between(begin, bench::Clock::now()));
  }
  return *std::max_element(ghz.begin(), ghz.end());  // The fastest: least disturbed.
}

constexpr int kAccumulators = 12;  // >= FMA latency (4) x pipes (2), with room.

// FLOPs done by fma_loop(iterations) with `lanes`-wide vectors.
double fma_flops(int64_t iterations, int lanes) {
  return 2.0 * kAccumulators * lanes * static_cast<double>(iterations);
}

__attribute__((target("avx512f"))) float fma_loop_avx512(int64_t iterations) {
  __m512 acc[kAccumulators];
  for (__m512& a : acc) a = _mm512_set1_ps(1.0f);
  const __m512 mul = _mm512_set1_ps(0.999999f), add = _mm512_set1_ps(1e-6f);
  for (int64_t i = 0; i < iterations; ++i) {
    for (__m512& a : acc) a = _mm512_fmadd_ps(a, mul, add);
  }
  __m512 sum = acc[0];
  for (int k = 1; k < kAccumulators; ++k) sum = _mm512_add_ps(sum, acc[k]);
  float lanes[16];  // Not _mm512_reduce_add_ps: GCC 12 warns inside it (-Wuninitialized).
  _mm512_storeu_ps(lanes, sum);
  return lanes[0];
}

__attribute__((target("avx2,fma"))) float fma_loop_avx2(int64_t iterations) {
  __m256 acc[kAccumulators];
  for (__m256& a : acc) a = _mm256_set1_ps(1.0f);
  const __m256 mul = _mm256_set1_ps(0.999999f), add = _mm256_set1_ps(1e-6f);
  for (int64_t i = 0; i < iterations; ++i) {
    for (__m256& a : acc) a = _mm256_fmadd_ps(a, mul, add);
  }
  __m256 sum = acc[0];
  for (int k = 1; k < kAccumulators; ++k) sum = _mm256_add_ps(sum, acc[k]);
  float lanes[8];
  _mm256_storeu_ps(lanes, sum);
  return lanes[0];
}

struct Peak {
  const char* isa = "unknown";
  int cores = 1;
  double clock_ghz = 0;
  double flops_per_cycle = 0;  // Measured, one core.
  double theoretical = 0;      // GFLOP/s, Note [Peak FLOP/s].
  double fma_all_cores = 0;    // GFLOP/s, the FMA loop on every core at once.
};

Peak measure_peak() {
  Peak peak;
  peak.cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  bool avx512 = __builtin_cpu_supports("avx512f");
  bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (!avx512 && !avx2) return peak;
  peak.isa = avx512 ? "AVX-512F FMA" : "AVX2 FMA";
  int lanes = avx512 ? 16 : 8;
  auto fma_loop = [avx512](int64_t iterations) {
    return avx512 ? fma_loop_avx512(iterations) : fma_loop_avx2(iterations);
  };
  constexpr int64_t kIterations = 20'000'000;
  // GFLOP/s of `threads` FMA loops at once, best of 5.
  auto fma_gflops = [&](int threads) {
    double best = 0;
    for (int run = 0; run < 5; ++run) {
      std::vector<float> sinks(static_cast<size_t>(threads));
      bench::Clock::time_point begin = bench::Clock::now();
      std::vector<std::thread> others;
      for (int t = 1; t < threads; ++t) {
        others.emplace_back([&, t] { sinks[t] = fma_loop(kIterations); });
      }
      sinks[0] = fma_loop(kIterations);
      for (std::thread& other : others) other.join();
      double ns = bench::ns_between(begin, bench::Clock::now());
      best = std::max(best, threads * fma_flops(kIterations, lanes) / ns);
    }
    return best;
  };
  peak.clock_ghz = measure_clock_ghz();
  peak.flops_per_cycle = fma_gflops(1) / peak.clock_ghz;
  double rounded = std::exp2(std::round(std::log2(peak.flops_per_cycle)));
  peak.theoretical = peak.cores * peak.clock_ghz * rounded;
  peak.fma_all_cores = fma_gflops(peak.cores);
  return peak;
}

#else

struct Peak {
  const char* isa = "unknown";
  int cores = 1;
  double clock_ghz = 0, flops_per_cycle = 0, theoretical = 0, fma_all_cores = 0;
};
Peak measure_peak() { return {}; }

#endif

// ---------------------------------------------------------------------------
// The products.
// ---------------------------------------------------------------------------

double tandem_gflops(int n) {
  Tensor a = tandem::randn({n, n});
  Tensor b = tandem::randn({n, n});
  return bench::gemm_gflops(n, [&] { tandem::matmul(a, b).wait_to_read(); });
}

double onednn_gflops(int n) {
  std::vector<float> a(static_cast<size_t>(n) * n, 0.5f), b(a), c(a);
  return bench::gemm_gflops(
      n, [&] { dnnl_sgemm('N', 'N', n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n); });
}

}  // namespace

int main() {
  Peak peak = measure_peak();
  std::vector<double> tandem_rate, onednn_rate;
  for (int n : bench::kGemmSizes) {
    tandem_rate.push_back(tandem_gflops(n));
    onednn_rate.push_back(onednn_gflops(n));
  }
  // The children run after Tandem's figures, with Tandem's engine idle.
  tandem::engine::current().wait_all();
  std::vector<bench::TorchConfig> configs = bench::torch_configs();
  std::vector<std::optional<bench::Results>> torch;
  for (const bench::TorchConfig& config : configs) {
    torch.push_back(bench::run_torch_peer(config, "gemm"));
  }

  std::printf("CPU: %d cores, %s, clock %.2f GHz (measured), %.1f FLOPs/cycle/core (measured)\n",
              peak.cores, peak.isa, peak.clock_ghz, peak.flops_per_cycle);
  std::printf(
      "  peak %.0f GFLOP/s (cores x clock x FLOPs/cycle rounded to a power of 2); "
      "FMA loop on all cores %.0f GFLOP/s\n",
      peak.theoretical, peak.fma_all_cores);
  std::printf("\nsgemm C = A B, n x n float32, GFLOP/s (median)\n");
  std::printf("  %6s %10s %10s %14s", "n", "Tandem", "dnnl_sgemm", "Tandem/oneDNN");
  for (const bench::TorchConfig& config : configs) {
    std::printf(" %18s", ("torch::mm " + config.label).c_str());
  }
  std::printf(" %12s\n", "Tandem/peak");
  for (size_t i = 0; i < std::size(bench::kGemmSizes); ++i) {
    int n = bench::kGemmSizes[i];
    std::printf("  %6d %10.1f %10.1f %13.2fx", n, tandem_rate[i], onednn_rate[i],
                tandem_rate[i] / onednn_rate[i]);
    for (const std::optional<bench::Results>& results : torch) {
      std::printf(" %18.1f",
                  results ? bench::get(*results, "gflops_" + std::to_string(n)) : std::nan(""));
    }
    std::printf(" %11.0f%%\n", 100 * tandem_rate[i] / peak.theoretical);
  }
  std::printf("  target: Tandem / oneDNN >= 0.90x\n");
  if (configs.empty()) bench::print_no_peer_note();
  return 0;
}
