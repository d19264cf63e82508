// The GPU figures of issue 6, each side by side in one process on cuda:0:
//   (a) GEMM TFLOP/s at 1024..8192: Tandem's matmul vs cublasGemmEx called
//       directly with the same data types and compute type, for float32
//       exact, TF32, float32 with bf16 math (MatmulPrecision), and bfloat16
//       tensors (Tandem's column says n/a while CUDA matmul takes float32 and
//       float64 only);
//   (b) the classic `y = x + 1` loop, 10000 ops on a [16] tensor, on the CPU
//       and on the GPU: the time the frontend takes to push the ops vs the
//       time to the final value. The frontend never waits for the GPU when
//       its push time on cuda matches its push time on the CPU and stays
//       below the time to the final value;
//   (c) training samples/s of the tutorial's CNN (bench/tutorial_models.h)
//       on synthetic Fashion-MNIST-shaped batches of 64 and 128, Adam, the
//       loss read every 20 steps, eager vs one hybridized training step;
//   (d) batch-1 inference latency of the tutorial's MLP and CNN: eager,
//       hybridized replayed node by node, and hybridized as one CUDA graph
//       launch per call (Note [One launch per call] in trace/executor.h).
// Timing is wall clock around work that ends with a full wait (Tandem: the
// result's wait_to_read and the engine's wait_all; cuBLAS: a stream
// synchronize), after warm-up; each figure is a median of repetitions. A
// section that fails prints its error and the others still run; the exit
// status is then 1. Without a CUDA device the program prints one line and
// exits 0. Under 2 minutes on an H200. Usage: bench_cuda [--quick]
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "bench/harness.h"
#include "bench/tutorial_models.h"
#include "core/device.h"
#include "core/engine/engine.h"
#include "eager/autograd.h"
#include "eager/hybridize.h"
#include "eager/nn/nn.h"
#include "eager/ops.h"
#include "eager/optim/optim.h"
#include "kernels/matmul_precision.h"

using namespace tandem;

namespace {

const Device kGpu = Device::cuda(0);

void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
  }
}

void check_cublas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw std::runtime_error(std::string(what) + ": cuBLAS status " + std::to_string(status));
  }
}

void wait_all() { engine::current().wait_all(); }

// ---------------------------------------------------------------------------
// (a) GEMM.
// ---------------------------------------------------------------------------

// Seconds per product: `enqueue()` starts one product, `finish()` waits for
// everything enqueued. One warm-up product, one to size the samples (each
// at least ~20 ms of products, at least 2), then the median of `samples`.
double seconds_per_product(const std::function<void()>& enqueue,
                           const std::function<void()>& finish, int samples) {
  enqueue();
  finish();
  auto begin = bench::Clock::now();
  enqueue();
  finish();
  const double one = bench::ns_between(begin, bench::Clock::now()) / 1e9;
  const int reps = std::clamp(static_cast<int>(0.02 / std::max(one, 1e-7)) + 1, 2, 1000);
  std::vector<double> per_product;
  for (int s = 0; s < samples; ++s) {
    begin = bench::Clock::now();
    for (int r = 0; r < reps; ++r) enqueue();
    finish();
    per_product.push_back(bench::ns_between(begin, bench::Clock::now()) / 1e9 / reps);
  }
  return bench::median(per_product);
}

// Uniform values in [-1, 1), the same for both sides: a cheap generator,
// since an 8192 x 8192 matrix has 67M of them.
std::vector<float> host_matrix(int64_t n, uint32_t seed) {
  std::vector<float> values(n * n);
  for (float& v : values) {
    seed = seed * 1664525u + 1013904223u;
    v = static_cast<float>(seed >> 8) * (2.0f / 16777216.0f) - 1.0f;
  }
  return values;
}

// bfloat16 bits of each value (truncated: these are benchmark inputs).
std::vector<uint16_t> to_bf16_bits(const std::vector<float>& values) {
  std::vector<uint16_t> bits(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    uint32_t word;
    std::memcpy(&word, &values[i], sizeof word);
    bits[i] = static_cast<uint16_t>(word >> 16);
  }
  return bits;
}

// Device memory for the peer, freed on scope exit.
struct DeviceBuffer {
  explicit DeviceBuffer(size_t nbytes) { check_cuda(cudaMalloc(&ptr, nbytes), "cudaMalloc"); }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* ptr = nullptr;
};

struct GemmMode {
  const char* label;
  MatmulPrecision tandem_precision;
  cublasComputeType_t compute;
  bool bf16_tensors;  // Else float32 tensors.
};

const GemmMode kGemmModes[] = {
    {"fp32 exact", MatmulPrecision::kFloat32, CUBLAS_COMPUTE_32F, false},
    {"fp32 TF32", MatmulPrecision::kTF32, CUBLAS_COMPUTE_32F_FAST_TF32, false},
    {"fp32 bf16 math", MatmulPrecision::kBFloat16, CUBLAS_COMPUTE_32F_FAST_16BF, false},
    {"bf16 tensors", MatmulPrecision::kFloat32, CUBLAS_COMPUTE_32F, true},
};

// TFLOP/s of Tandem's matmul on a, b in `mode` (NaN where Tandem cannot
// multiply bfloat16 tensors on the GPU).
double tandem_tflops(const GemmMode& mode, const Tensor& a32, const Tensor& b32, int samples) {
  NoGradGuard no_grad;
  const int64_t n = a32.shape()[0];
  double tflops = std::nan("");
  set_cuda_matmul_precision(mode.tandem_precision);
  try {
    Tensor a = mode.bf16_tensors ? cast(a32, DType::kBFloat16) : a32;
    Tensor b = mode.bf16_tensors ? cast(b32, DType::kBFloat16) : b32;
    Tensor c;
    const double s = seconds_per_product([&] { c = matmul(a, b); },
                                         [&] {
                                           c.wait_to_read();
                                           wait_all();
                                         },
                                         samples);
    tflops = 2.0 * n * n * n / s / 1e12;
  } catch (const std::exception&) {
    set_cuda_matmul_precision(MatmulPrecision::kFloat32);
    if (!mode.bf16_tensors) throw;  // Only bfloat16 tensors may be unsupported.
    try {
      wait_all();  // Collects the failure if it was asynchronous.
    } catch (const std::exception&) {
    }
  }
  set_cuda_matmul_precision(MatmulPrecision::kFloat32);
  return tflops;
}

void gemm_section(bool quick) {
  const int samples = quick ? 3 : 5;
  std::printf(
      "\n(a) GEMM n x n x n, TFLOP/s (median of %d samples of >= 20 ms): Tandem matmul vs "
      "cublasGemmEx\n",
      samples);
  std::printf("  %6s  %-15s %10s %10s %8s\n", "n", "mode", "Tandem", "cuBLAS", "ratio");
  // The peer's own handle and stream, as a program calling cuBLAS would have.
  struct Peer {
    Peer() {
      check_cublas(cublasCreate(&handle), "cublasCreate");
      check_cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
      check_cublas(cublasSetStream(handle, stream), "cublasSetStream");
    }
    ~Peer() {
      cublasDestroy(handle);
      cudaStreamDestroy(stream);
    }
    cublasHandle_t handle = nullptr;
    cudaStream_t stream = nullptr;
  } peer;

  const std::vector<int64_t> sizes =
      quick ? std::vector<int64_t>{1024, 4096} : std::vector<int64_t>{1024, 2048, 4096, 8192};
  bool any_missing = false;
  for (int64_t n : sizes) {
    // The same values on both sides.
    const std::vector<float> ha = host_matrix(n, 1), hb = host_matrix(n, 2);
    const Tensor a = Tensor::from_vector<float>(ha, {n, n}).to(kGpu);
    const Tensor b = Tensor::from_vector<float>(hb, {n, n}).to(kGpu);
    const size_t count = static_cast<size_t>(n * n);
    DeviceBuffer a32(count * 4), b32(count * 4), c32(count * 4);
    DeviceBuffer a16(count * 2), b16(count * 2), c16(count * 2);
    check_cuda(cudaMemcpy(a32.ptr, ha.data(), count * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
    check_cuda(cudaMemcpy(b32.ptr, hb.data(), count * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
    check_cuda(cudaMemcpy(a16.ptr, to_bf16_bits(ha).data(), count * 2, cudaMemcpyHostToDevice),
               "cudaMemcpy");
    check_cuda(cudaMemcpy(b16.ptr, to_bf16_bits(hb).data(), count * 2, cudaMemcpyHostToDevice),
               "cudaMemcpy");
    for (const GemmMode& mode : kGemmModes) {
      const double ours = tandem_tflops(mode, a, b, samples);
      // cuBLAS called directly. Square products: row- or column-major alike.
      const cudaDataType type = mode.bf16_tensors ? CUDA_R_16BF : CUDA_R_32F;
      const void* pa = mode.bf16_tensors ? a16.ptr : a32.ptr;
      const void* pb = mode.bf16_tensors ? b16.ptr : b32.ptr;
      void* pc = mode.bf16_tensors ? c16.ptr : c32.ptr;
      const float one = 1, zero = 0;
      const int ni = static_cast<int>(n);
      const double s = seconds_per_product(
          [&] {
            check_cublas(
                cublasGemmEx(peer.handle, CUBLAS_OP_N, CUBLAS_OP_N, ni, ni, ni, &one, pa, type, ni,
                             pb, type, ni, &zero, pc, type, ni, mode.compute, CUBLAS_GEMM_DEFAULT),
                "cublasGemmEx");
          },
          [&] { check_cuda(cudaStreamSynchronize(peer.stream), "cudaStreamSynchronize"); },
          samples);
      const double theirs = 2.0 * n * n * n / s / 1e12;
      if (std::isnan(ours)) {
        any_missing = true;
        std::printf("  %6lld  %-15s %10s %10.1f %8s\n", static_cast<long long>(n), mode.label,
                    "n/a", theirs, "-");
      } else {
        std::printf("  %6lld  %-15s %10.1f %10.1f %8.2f\n", static_cast<long long>(n), mode.label,
                    ours, theirs, ours / theirs);
      }
      std::fflush(stdout);
    }
  }
  if (any_missing) std::printf("  (n/a: Tandem's CUDA matmul refused bfloat16 tensors)\n");
}

// ---------------------------------------------------------------------------
// (b) The `y = x + 1` loop.
// ---------------------------------------------------------------------------

struct LoopTimes {
  double push_ms, final_ms;
};

// Medians over `reps` loops of `ops` ops on x: the time until the last push
// returned and the time until the final value was there.
LoopTimes add_loop(const Tensor& x, bool chained, int ops, int reps, Tensor* last) {
  std::vector<double> push, final;
  for (int r = 0; r <= reps; ++r) {  // Loop 0 warms up.
    auto begin = bench::Clock::now();
    Tensor y = x;
    for (int i = 0; i < ops; ++i) y = add(chained ? y : x, 1.0);
    const double pushed = bench::ns_between(begin, bench::Clock::now());
    y.wait_to_read();
    wait_all();
    const double done = bench::ns_between(begin, bench::Clock::now());
    if (r > 0) {
      push.push_back(pushed / 1e6);
      final.push_back(done / 1e6);
    }
    *last = y;
  }
  return {bench::median(push), bench::median(final)};
}

void loop_section(bool quick) {
  const int ops = 10000, reps = quick ? 3 : 5;
  NoGradGuard no_grad;
  Tensor x_gpu = randn({16}, DType::kFloat32, kGpu);
  Tensor x_cpu = x_gpu.to(Device::cpu());
  std::printf("\n(b) %d ops on a [16] float32 tensor, median of %d loops\n", ops, reps);
  std::printf("  %-28s %12s %14s %12s\n", "loop", "push only", "final value", "push/op");
  Tensor chained_cpu, chained_gpu, unused;
  for (bool chained : {false, true}) {
    for (Device device : {Device::cpu(), kGpu}) {
      Tensor* last = !chained ? &unused : device.is_cpu() ? &chained_cpu : &chained_gpu;
      LoopTimes t = add_loop(device.is_cpu() ? x_cpu : x_gpu, chained, ops, reps, last);
      std::string label =
          std::string(chained ? "x = x + 1 (chained), " : "y = x + 1, ") + device.to_string();
      std::printf("  %-28s %9.2f ms %11.2f ms %9.2f us\n", label.c_str(), t.push_ms, t.final_ms,
                  t.push_ms * 1e3 / ops);
    }
  }
  // One op at a time: the round trip a waiting frontend would pay per op.
  std::vector<double> per_op;
  for (int r = 0; r < reps; ++r) {
    auto begin = bench::Clock::now();
    for (int i = 0; i < ops / 10; ++i) add(x_gpu, 1.0).wait_to_read();
    per_op.push_back(bench::ns_between(begin, bench::Clock::now()) / 1e3 / (ops / 10));
  }
  std::printf("  %-28s %27s %9.2f us\n", "wait after every op, cuda:0", "", bench::median(per_op));
  // The chained loops ran the same float32 additions on both devices.
  std::vector<float> cpu = chained_cpu.to_vector<float>();
  std::vector<float> gpu = chained_gpu.to(Device::cpu()).to_vector<float>();
  float max_diff = 0;
  for (size_t i = 0; i < cpu.size(); ++i) max_diff = std::max(max_diff, std::abs(cpu[i] - gpu[i]));
  std::printf("  chained result, cuda:0 vs cpu: max |difference| %g (same float32 additions)\n",
              max_diff);
}

// ---------------------------------------------------------------------------
// (c) CNN training.
// ---------------------------------------------------------------------------

struct TrainFigures {
  double samples_per_s, first_loss, last_loss;
};

TrainFigures train_cnn(int64_t batch, bool hybridized, int steps,
                       const std::vector<bench::SyntheticBatch>& data) {
  manual_seed(1);
  auto model = bench::make_tutorial_cnn();
  model->to(kGpu);  // Before making the optimizer (eager/nn/module.h).
  optim::Adam opt(model->parameters(), optim::AdamOptions{.lr = bench::kLearningRate});
  HybridFunction::Fn fn = bench::training_step(*model, opt);
  HybridFunction step(fn);
  // The first `batch` samples of each synthetic batch, on the GPU before timing.
  constexpr int64_t kPixels = bench::kImageSide * bench::kImageSide;
  std::vector<Tensor> xs, ys;
  for (const bench::SyntheticBatch& b : data) {
    std::vector<float> images(b.images.begin(), b.images.begin() + batch * kPixels);
    std::vector<int64_t> labels(b.labels.begin(), b.labels.begin() + batch);
    xs.push_back(
        Tensor::from_vector<float>(images, {batch, 1, bench::kImageSide, bench::kImageSide})
            .to(kGpu));
    ys.push_back(Tensor::from_vector<int64_t>(labels, {batch}).to(kGpu));
  }
  auto run = [&](int i) {
    const std::vector<Tensor> in = {xs[i % xs.size()], ys[i % ys.size()]};
    return hybridized ? step(in)[0] : fn(in)[0];
  };
  // Warm-up: a window between two loss reads (Note [Training figures] in
  // bench/harness.h), which also traces and captures the hybridized step.
  Tensor loss;
  for (int i = 0; i < bench::kReportEvery; ++i) loss = run(i);
  const double first_loss = loss.item<float>();
  wait_all();
  double last_loss = first_loss;
  auto begin = bench::Clock::now();
  for (int i = 1; i <= steps; ++i) {
    loss = run(i);
    if (i % bench::kReportEvery == 0) last_loss = loss.item<float>();
  }
  wait_all();
  const double seconds = bench::ns_between(begin, bench::Clock::now()) / 1e9;
  return {steps * batch / seconds, first_loss, last_loss};
}

void training_section(bool quick) {
  const int steps = quick ? 40 : 200;
  const std::vector<bench::SyntheticBatch> data = bench::synthetic_batches();
  std::printf(
      "\n(c) tutorial CNN training on synthetic Fashion-MNIST batches, Adam, %d steps, loss read "
      "every %d\n",
      steps, bench::kReportEvery);
  std::printf("  %-6s %14s %14s %8s   %s\n", "batch", "eager", "hybridized", "ratio",
              "loss at step 20 -> end (eager; hybridized)");
  for (int64_t batch : {int64_t{64}, int64_t{128}}) {
    TrainFigures eager = train_cnn(batch, false, steps, data);
    TrainFigures graph = train_cnn(batch, true, steps, data);
    std::printf("  %-6lld %10.0f s/s %10.0f s/s %7.2fx   %.3f -> %.3f; %.3f -> %.3f\n",
                static_cast<long long>(batch), eager.samples_per_s, graph.samples_per_s,
                graph.samples_per_s / eager.samples_per_s, eager.first_loss, eager.last_loss,
                graph.first_loss, graph.last_loss);
    std::fflush(stdout);
  }
  std::printf("  (s/s: samples per second)\n");
}

// ---------------------------------------------------------------------------
// (d) Batch-1 inference latency.
// ---------------------------------------------------------------------------

// Median wall time of `fn` (which waits for its own result), in us, after
// `warmup` calls.
double median_us(int warmup, int reps, const std::function<void()>& fn) {
  for (int i = 0; i < warmup; ++i) fn();
  std::vector<double> samples;
  for (int r = 0; r < reps; ++r) {
    auto begin = bench::Clock::now();
    fn();
    samples.push_back(bench::ns_between(begin, bench::Clock::now()) / 1e3);
  }
  return bench::median(samples);
}

void latency_section(bool quick) {
  const int reps = quick ? 30 : 300;
  std::printf("\n(d) batch-1 inference latency on cuda:0, median of %d calls (result waited for)\n",
              reps);
  std::printf("  %-6s %12s %12s %12s %8s\n", "model", "eager", "node by node", "CUDA graph",
              "ratio");
  struct Case {
    const char* name;
    std::shared_ptr<nn::Module> model;
  };
  manual_seed(1);
  const Case cases[] = {{"MLP", bench::make_tutorial_mlp()}, {"CNN", bench::make_tutorial_cnn()}};
  for (const Case& c : cases) {
    nn::Module& model = *c.model;
    model.to(kGpu);
    model.eval();
    NoGradGuard no_grad;
    Tensor x = randn({1, 1, bench::kImageSide, bench::kImageSide}, DType::kFloat32, kGpu);
    const double eager = median_us(5, reps, [&] { model.forward(x).wait_to_read(); });
    // Hybridized, replayed node by node, then as one CUDA graph launch per call
    // (the warm-up holds the trace, the first replay and the capture).
    double hybridized[2];
    for (bool cuda_graph : {false, true}) {
      model.hybridize(true, {.cuda_graph = cuda_graph});
      hybridized[cuda_graph] = median_us(5, reps, [&] { model(x).wait_to_read(); });
      model.hybridize(false);
    }
    std::printf("  %-6s %9.1f us %9.1f us %9.1f us %7.2fx\n", c.name, eager, hybridized[0],
                hybridized[1], eager / hybridized[1]);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (cuda_device_count() == 0) {
    std::printf("no CUDA device: bench_cuda skipped\n");
    return 0;
  }
  const bool quick = bench::has_flag(argc, argv, "--quick");
  cudaDeviceProp prop;
  check_cuda(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  std::printf("bench_cuda: %s (sm_%d%d, %d SMs, %.0f GiB), driver %d, runtime %d%s\n", prop.name,
              prop.major, prop.minor, prop.multiProcessorCount, prop.totalGlobalMem / 1073741824.0,
              driver, runtime, quick ? ", --quick" : "");
  const struct {
    const char* name;
    void (*run)(bool);
  } sections[] = {{"(a) GEMM", gemm_section},
                  {"(b) y = x + 1 loop", loop_section},
                  {"(c) CNN training", training_section},
                  {"(d) batch-1 latency", latency_section}};
  int failed = 0;
  auto start = bench::Clock::now();
  for (const auto& section : sections) {
    auto begin = bench::Clock::now();
    try {
      section.run(quick);
    } catch (const std::exception& e) {
      ++failed;
      std::printf("  %s FAILED: %s\n", section.name, e.what());
      try {
        wait_all();  // Leave no stored failure for the next section.
      } catch (const std::exception&) {
      }
    }
    std::printf("  [%s: %.1f s]\n", section.name,
                bench::ns_between(begin, bench::Clock::now()) / 1e9);
    std::fflush(stdout);
  }
  std::printf("\nbench_cuda: %d of 4 sections failed, %.1f s in all\n", failed,
              bench::ns_between(start, bench::Clock::now()) / 1e9);
  return failed == 0 ? 0 : 1;
}
