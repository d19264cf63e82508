// What the Tandem benchmarks and their libtorch peer (bench/torch/) share:
// timing and medians, memory figures, the "key value" lines a child process
// reports, and the workloads themselves (the tiny-op list, the GEMM sizes, the
// synthetic training batches and the training loop's timing), so that both
// sides measure the same thing the same way.
//
// Plain C++17 with no Tandem and no libtorch include: the peer, which alone
// links libtorch, includes it too.
//
// Note [Side by side in separate processes]
// A Tandem bench runs its own figures in-process, then runs each libtorch
// configuration as a child (bench/torch/torch_peer) and reads the "key value"
// lines it prints on stdout. Separate processes keep the two runtimes' thread
// pools (Tandem's engine workers; libtorch's OpenMP and inter-op pools) from
// competing for the same two cores, let each child's environment choose its
// threads and BLAS before the libraries load, and give every configuration a
// peak RSS of its own.
#pragma once

#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace bench {

using Clock = std::chrono::steady_clock;

inline double ns_between(Clock::time_point begin, Clock::time_point end) {
  return std::chrono::duration<double, std::nano>(end - begin).count();
}

inline double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  size_t n = values.size();
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

// ---------------------------------------------------------------------------
// Processes, flags and result lines.
// ---------------------------------------------------------------------------

// A field of /proc/self/status in MiB: "VmHWM" (peak resident set) or "VmRSS"
// (resident now). 0 where /proc is missing.
inline double proc_status_mib(const char* field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  size_t length = std::strlen(field);
  while (std::getline(status, line)) {
    if (line.compare(0, length, field) == 0 && line.size() > length && line[length] == ':') {
      return std::strtod(line.c_str() + length + 1, nullptr) / 1024;  // The value is in kB.
    }
  }
  return 0;
}

// The value of `--name value` in argv, or `fallback`.
inline std::string flag(int argc, char** argv, const char* name, const std::string& fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return argv[i + 1];
  }
  return fallback;
}

inline bool has_flag(int argc, char** argv, const char* name) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return true;
  }
  return false;
}

// One result line of a child process.
inline void emit(const std::string& key, double value) {
  std::printf("%s %.9g\n", key.c_str(), value);
  std::fflush(stdout);
}

using Results = std::map<std::string, double>;

// The value of `key`, or NaN when the child did not report it.
inline double get(const Results& results, const std::string& key) {
  auto it = results.find(key);
  return it == results.end() ? std::nan("") : it->second;
}

// Runs `command` with /bin/sh and parses the "key value" lines it prints (any
// other line is ignored, so a child may print notes). nullopt when it fails.
inline std::optional<Results> run_child(const std::string& command) {
  std::fflush(stdout);  // The child inherits stderr; keep our own output in order.
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return std::nullopt;
  Results results;
  char line[512];
  while (std::fgets(line, sizeof line, pipe) != nullptr) {
    char key[256];
    double value;
    if (std::sscanf(line, "%255s %lf", key, &value) == 2) results[key] = value;
  }
  int status = pclose(pipe);
  if (status != 0) {
    std::fprintf(stderr, "bench: `%s` failed (status %d)\n", command.c_str(), status);
    return std::nullopt;
  }
  return results;
}

// The folder of the running executable, with a trailing '/'.
inline std::string self_dir() {
  char path[4096];
  ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) return "./";
  std::string exe(path, static_cast<size_t>(n));
  return exe.substr(0, exe.rfind('/') + 1);
}

// The program at `relative` to this executable's folder, quoted for the shell.
inline std::string program_beside(const std::string& relative) {
  std::string quoted(1, '\'');  // Built up with +=: GCC 12's -Wrestrict misfires on "'" + s.
  quoted += self_dir();
  quoted += relative;
  quoted += '\'';
  return quoted;
}

// ---------------------------------------------------------------------------
// libtorch configurations (Note [libtorch configurations]).
// ---------------------------------------------------------------------------
//
// Note [libtorch configurations]
// Debian's libtorch 1.13 runs ATen's intra-op work on OpenMP (libgomp), sends
// float GEMMs (torch::mm, nn::Linear) to whatever libblas.so.3 the system
// provides (the reference BLAS by default: one thread, ~6 GFLOP/s here; or
// OpenBLAS when a libopenblas0 package is installed), runs convolutions on
// oneDNN, and takes tensor memory from plain malloc. Each configuration runs
// with OMP_NUM_THREADS=2, at::set_num_threads(2) and
// at::set_num_interop_threads(1), so exactly one pool of two threads does the
// work; the BLAS is picked per child through LD_LIBRARY_PATH, whatever the
// system's alternative points at. OpenBLAS's OpenMP build shares libgomp's
// pool with ATen (its pthread build would add a second pool of two threads:
// the oversubscription trap), so tools/tandem.sh bench installs
// libopenblas0-openmp. The configurations, best first:
// * "tuned": OpenBLAS, and glibc told to keep freed memory
//   (MALLOC_MMAP_THRESHOLD_ 32 MiB, MALLOC_TRIM_THRESHOLD_ 1 GiB). With
//   glibc's defaults every activation-sized tensor is a fresh mmap that is
//   page-faulted in and unmapped again each step; on this VM that is most of
//   a training step (perf: page faults and clear_page). PyTorch's own tuning
//   guide recommends a caching malloc (jemalloc, tcmalloc) for the same
//   reason; these two variables get the same effect with no extra package.
// * "OpenBLAS": OpenBLAS, glibc's defaults.
// * "Debian": what libtorch-dev gives out of the box: the reference BLAS
//   (when installed, which libtorch's dependencies guarantee), glibc's defaults.
// * The current PyTorch, whose wheel carries libtorch for C++: `tools/tandem.sh
//   bench` installs it from PyPI into a virtual environment (build/peers) and
//   builds the same torch_peer.cc against it (bench/torch_pip/torch_peer
//   beside the benches). It brings its own BLAS (MKL) and OpenMP; its
//   configurations are "pip tuned" (glibc keeps freed memory, as above) and
//   "pip".
struct TorchConfig {
  std::string label;    // What the tables print.
  std::string env;      // Prepended to the peer's command line.
  std::string program;  // The peer, relative to the benches' folder.
};

// The configurations this machine can run, best first (Debian's libtorch,
// then the wheel's); empty when no peer was built.
inline std::vector<TorchConfig> torch_configs() {
  std::vector<TorchConfig> configs;
  const std::string threads = "OMP_NUM_THREADS=2 ";
  const std::string keep_memory =
      "MALLOC_MMAP_THRESHOLD_=33554432 MALLOC_TRIM_THRESHOLD_=1073741824 ";
  if (access((self_dir() + "torch/torch_peer").c_str(), X_OK) == 0) {
    const std::string peer = "torch/torch_peer";
    const std::string openblas = "/usr/lib/x86_64-linux-gnu/openblas-openmp";
    const std::string reference = "/usr/lib/x86_64-linux-gnu/blas";
    if (access(openblas.c_str(), R_OK) == 0) {
      configs.push_back(
          {"1.13 tuned", threads + keep_memory + "LD_LIBRARY_PATH=" + openblas + " ", peer});
      configs.push_back({"1.13 OpenBLAS", threads + "LD_LIBRARY_PATH=" + openblas + " ", peer});
    }
    if (access(reference.c_str(), R_OK) == 0) {
      configs.push_back({"1.13 Debian", threads + "LD_LIBRARY_PATH=" + reference + " ", peer});
    }
    if (configs.empty()) configs.push_back({"1.13", threads, peer});
  }
  if (access((self_dir() + "torch_pip/torch_peer").c_str(), X_OK) == 0) {
    configs.push_back({"pip tuned", threads + keep_memory, "torch_pip/torch_peer"});
    configs.push_back({"pip", threads, "torch_pip/torch_peer"});
  }
  return configs;
}

// Runs the peer in `config` with `args`.
inline std::optional<Results> run_torch_peer(const TorchConfig& config, const std::string& args) {
  return run_child(config.env + program_beside(config.program) + " " + args);
}

// PyTorch from Python (bench/torch/peer.py: TorchScript, torch.compile,
// onnxruntime), run by the virtual environment `tools/tandem.sh bench`
// makes in build/peers: the command to run it with, or empty where there is
// none. `source_dir` is the repository's root.
inline std::string python_peer(const std::string& source_dir) {
  const std::string python = self_dir() + "../../peers/bin/python";
  const std::string script = source_dir + "/bench/torch/peer.py";
  if (access(python.c_str(), X_OK) != 0 || access(script.c_str(), R_OK) != 0) return "";
  return "OMP_NUM_THREADS=2 '" + python + "' '" + script + "'";
}

inline void print_no_peer_note() {
  std::printf(
      "  (no libtorch column: bench/torch/torch_peer was not built; install libtorch-dev, e.g. "
      "with tools/tandem.sh bench, and re-run cmake)\n");
}

// ---------------------------------------------------------------------------
// (1) Per-op eager overhead on tiny tensors.
// ---------------------------------------------------------------------------

// Each side implements these ops with its own API; `key` names the result line.
enum class TinyOp { kAddScalar, kMul, kRelu, kSum, kMatmul };

struct TinyOpCase {
  TinyOp op;
  std::vector<int64_t> shape;  // Of x.
  const char* key;
  const char* label;
};

inline const std::vector<TinyOpCase>& tiny_op_cases() {
  static const std::vector<TinyOpCase> cases = {
      {TinyOp::kAddScalar, {1}, "add_scalar_1", "y = x + 1       [1]"},
      {TinyOp::kAddScalar, {16}, "add_scalar_16", "y = x + 1       [16]"},
      {TinyOp::kMul, {16}, "mul_16", "y = x * x       [16]"},
      {TinyOp::kRelu, {16}, "relu_16", "y = relu(x)     [16]"},
      {TinyOp::kSum, {16}, "sum_16", "y = sum(x)      [16]"},
      {TinyOp::kMatmul, {4, 4}, "matmul_4x4", "y = x @ x       [4, 4]"},
  };
  return cases;
}

constexpr int kTinyOpsPerLoop = 10000;
constexpr int kTinyOpRuns = 11;

// Median over kTinyOpRuns of the time per op of `loop()`, which runs
// kTinyOpsPerLoop ops and waits for them. One unmeasured loop warms up first.
template <class Loop>
double tiny_op_ns(Loop&& loop) {
  loop();
  std::vector<double> per_op;
  for (int run = 0; run < kTinyOpRuns; ++run) {
    Clock::time_point begin = Clock::now();
    loop();
    per_op.push_back(ns_between(begin, Clock::now()) / kTinyOpsPerLoop);
  }
  return median(per_op);
}

// ---------------------------------------------------------------------------
// (2) sgemm.
// ---------------------------------------------------------------------------

constexpr int kGemmSizes[] = {256, 512, 1024, 2048};

// GFLOP/s of `multiply()` (one n x n x n product, finished when it returns):
// the median over up to 5 samples, each repeating it for >= 0.2 s, stopping
// early after ~10 s (the reference BLAS needs seconds per product at 2048).
template <class Multiply>
double gemm_gflops(int n, Multiply&& multiply) {
  multiply();  // Warm-up: JIT kernels, primitive caches, page faults.
  std::vector<double> seconds_per_product;
  Clock::time_point start = Clock::now();
  while (seconds_per_product.size() < 5 && ns_between(start, Clock::now()) < 10e9) {
    int reps = 0;
    Clock::time_point begin = Clock::now();
    do {
      multiply();
      ++reps;
    } while (ns_between(begin, Clock::now()) < 0.2e9);
    seconds_per_product.push_back(ns_between(begin, Clock::now()) / 1e9 / reps);
  }
  return 2.0 * n * n * n / median(seconds_per_product) / 1e9;
}

// ---------------------------------------------------------------------------
// (3) Training: the MLP and the CNN of tutorials/02_train_fashion_mnist.cpp.
// ---------------------------------------------------------------------------

constexpr int64_t kBatchSize = 128;  // The tutorial's default.
constexpr double kLearningRate = 1e-3;
constexpr int kImageSide = 28;
constexpr int kClasses = 10;
constexpr int kReportEvery = 20;  // The tutorial reads the loss every 20 steps.

// A pool of synthetic Fashion-MNIST-shaped batches, which each side turns
// into its own tensors before it starts timing and then cycles through:
// images already normalized (float32 [B, 1, 28, 28], row-major) and int64
// labels. Each class is a fixed random pattern plus noise, so the loss falls
// and both sides can be seen to train, not only to run.
constexpr int kSyntheticBatches = 16;

struct SyntheticBatch {
  std::vector<float> images;
  std::vector<int64_t> labels;
};

inline std::vector<SyntheticBatch> synthetic_batches() {
  std::mt19937 rng(42);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int64_t> label(0, kClasses - 1);
  constexpr int kPixels = kImageSide * kImageSide;
  std::vector<float> patterns(kClasses * kPixels);
  for (float& v : patterns) v = normal(rng);
  std::vector<SyntheticBatch> batches(kSyntheticBatches);
  for (SyntheticBatch& batch : batches) {
    batch.images.resize(kBatchSize * kPixels);
    batch.labels.resize(kBatchSize);
    for (int64_t i = 0; i < kBatchSize; ++i) {
      batch.labels[i] = label(rng);
      for (int p = 0; p < kPixels; ++p) {
        batch.images[i * kPixels + p] =
            0.5f * patterns[batch.labels[i] * kPixels + p] + normal(rng);
      }
    }
  }
  return batches;
}

// Note [Training figures]
// One child process per model and framework runs:
// * warm-up: kReportEvery steps, then a full wait. One whole window between
//   two reads of the loss, because that is how far ahead Tandem's frontend
//   runs: its caching allocator grows to hold a window's tensors (and the
//   kernel pages them in) here, not in the timed part;
// * throughput: `steps` steps as the tutorial runs them (the loss is read
//   every kReportEvery steps; between reads Tandem only pushes work), then a
//   full wait; samples/s = steps * batch / that time;
// * step time: `steps / 4` more steps, each followed by a full wait; the
//   median of those (for libtorch, which runs synchronously, the same as
//   throughput's step time; for Tandem, the time without any overlap between
//   steps);
// * memory: peak RSS (VmHWM) at the end, and its growth over the RSS at the
//   start of main (libraries loaded, nothing allocated).
//
// `step(i)` runs forward, loss, zero_grad, backward and the optimizer step
// on synthetic batch i; `loss()` reads the last loss (a wait); `sync()` waits for
// all pending work. Prints the result lines.
template <class Step, class Loss, class Sync>
void run_training(int steps, double start_rss_mib, Step&& step, Loss&& loss, Sync&& sync) {
  int next = 0;
  auto run_step = [&] {
    step(next);
    next = (next + 1) % kSyntheticBatches;
  };
  for (int i = 0; i < kReportEvery; ++i) run_step();
  double first_loss = loss();
  sync();

  Clock::time_point begin = Clock::now();
  double last_loss = 0;
  for (int i = 1; i <= steps; ++i) {
    run_step();
    if (i % kReportEvery == 0) last_loss = loss();
  }
  sync();
  double seconds = ns_between(begin, Clock::now()) / 1e9;

  std::vector<double> step_ms;
  for (int i = 0; i < std::max(1, steps / 4); ++i) {
    Clock::time_point step_begin = Clock::now();
    run_step();
    sync();
    step_ms.push_back(ns_between(step_begin, Clock::now()) / 1e6);
  }

  emit("samples_per_s", steps * kBatchSize / seconds);
  emit("median_step_ms", median(step_ms));
  emit("first_loss", first_loss);
  emit("last_loss", last_loss);
  emit("peak_rss_mib", proc_status_mib("VmHWM"));
  emit("rss_growth_mib", proc_status_mib("VmHWM") - start_rss_mib);
}

// ---------------------------------------------------------------------------
// (4) The standard workloads: Fashion-MNIST's first 10,000 training samples,
// an MLP and LeNet-5, SGD, as every framework's tutorial writes them.
// ---------------------------------------------------------------------------
//
// Note [Standard workloads]
// What users compare frameworks on, exactly as described here so that every
// side runs the same thing (Tandem's bench_train and bench_deploy, the
// libtorch peers in bench/torch/torch_peer.cc, PyTorch from Python in
// bench/torch/peer.py):
// * data: the first kStandardSamples training images of Fashion-MNIST, uint8
//   [N, 28, 28], and their labels; read by the Tandem bench from Debian's
//   dataset-fashion-mnist (synthetic uint8 images where it is missing) and
//   handed to the peers as raw files (write_standard_data). The order of an
//   epoch is one fixed permutation (standard_order).
// * a training step, inside the timed loop: gather the batch's uint8 images
//   and labels by index, convert the images to float32 and scale them by
//   1/255, forward, cross-entropy, zero the gradients, backward, SGD step
//   (lr 0.1, momentum 0.9). Layers start from PyTorch's default init.
// * models: "mlp" is Flatten, Linear(784, 256), ReLU, Linear(256, 128),
//   ReLU, Linear(128, 10); "lenet" is LeNet-5 with ReLU and max pooling:
//   Conv2d(1, 6, 5, padding 2), ReLU, MaxPool2d(2), Conv2d(6, 16, 5), ReLU,
//   MaxPool2d(2), Flatten, Linear(400, 120), ReLU, Linear(120, 84), ReLU,
//   Linear(84, 10).
// * an epoch is the kStandardSamples / batch full batches (9,984 samples at
//   batch 64 and at 256); a run is one warm-up epoch, then kTimedEpochs
//   epochs, each timed to its last loss read: samples/s is their median.

constexpr int64_t kStandardSamples = 10000;
constexpr int64_t kStandardPixels = 28 * 28;
constexpr double kStandardLr = 0.1;
constexpr double kStandardMomentum = 0.9;
constexpr int kTimedEpochs = 3;

struct StandardData {
  std::vector<uint8_t> images;  // kStandardSamples x 28 x 28.
  std::vector<uint8_t> labels;  // kStandardSamples, each in [0, 10).
};

// The order of every epoch: a permutation of [0, kStandardSamples), the same
// on every side (std::mt19937's output is specified; its distributions are
// not, so the shuffle is written out).
inline std::vector<int64_t> standard_order() {
  std::vector<int64_t> order(kStandardSamples);
  for (int64_t i = 0; i < kStandardSamples; ++i) order[i] = i;
  std::mt19937 rng(16);
  for (int64_t i = kStandardSamples - 1; i > 0; --i) {
    std::swap(order[i], order[rng() % static_cast<uint64_t>(i + 1)]);
  }
  return order;
}

// The indices of each step of an epoch at `batch`: full batches only.
inline std::vector<std::vector<int64_t>> standard_batches(int64_t batch) {
  std::vector<int64_t> order = standard_order();
  std::vector<std::vector<int64_t>> batches;
  for (int64_t begin = 0; begin + batch <= kStandardSamples; begin += batch) {
    batches.emplace_back(order.begin() + begin, order.begin() + begin + batch);
  }
  return batches;
}

// Raw files in `dir`: images.u8 and labels.u8, as StandardData holds them,
// and order.i64, standard_order() in native byte order (for Python, whose
// generators seed MT19937 differently).
inline bool write_standard_data(const std::string& dir, const StandardData& data) {
  auto write = [&](const std::string& name, const void* bytes, size_t size) {
    FILE* f = std::fopen((dir + "/" + name).c_str(), "wb");
    if (f == nullptr) return false;
    bool ok = std::fwrite(bytes, 1, size, f) == size;
    return std::fclose(f) == 0 && ok;
  };
  std::vector<int64_t> order = standard_order();
  return write("images.u8", data.images.data(), data.images.size()) &&
         write("labels.u8", data.labels.data(), data.labels.size()) &&
         write("order.i64", order.data(), order.size() * sizeof(int64_t));
}

inline std::optional<StandardData> read_standard_data(const std::string& dir) {
  auto read = [&](const std::string& name, std::vector<uint8_t>& bytes, size_t size) {
    bytes.resize(size);
    FILE* f = std::fopen((dir + "/" + name).c_str(), "rb");
    if (f == nullptr) return false;
    bool ok = std::fread(bytes.data(), 1, size, f) == size;
    std::fclose(f);
    return ok;
  };
  StandardData data;
  if (!read("images.u8", data.images, kStandardSamples * kStandardPixels) ||
      !read("labels.u8", data.labels, kStandardSamples)) {
    return std::nullopt;
  }
  return data;
}

// Runs one warm-up epoch and kTimedEpochs timed ones of `step(i)` (batch i of
// the epoch), reading the loss with `loss()` (a wait) at the end of each, and
// prints: samples_per_s (the median epoch), first_loss (after the warm-up),
// last_loss, peak_rss_mib.
template <class Step, class Loss>
void run_standard_epochs(int64_t batch, Step&& step, Loss&& loss) {
  const int64_t steps = kStandardSamples / batch;
  for (int64_t i = 0; i < steps; ++i) step(i);
  const double first_loss = loss();
  std::vector<double> samples_per_s;
  double last_loss = first_loss;
  for (int epoch = 0; epoch < kTimedEpochs; ++epoch) {
    Clock::time_point begin = Clock::now();
    for (int64_t i = 0; i < steps; ++i) step(i);
    last_loss = loss();
    samples_per_s.push_back(steps * batch / (ns_between(begin, Clock::now()) / 1e9));
  }
  emit("samples_per_s", median(samples_per_s));
  emit("first_loss", first_loss);
  emit("last_loss", last_loss);
  emit("peak_rss_mib", proc_status_mib("VmHWM"));
}

// Median latency in microseconds of `run()` (which waits for its result) over
// `calls` calls, after `calls / 10 + 1` unmeasured ones.
template <class Run>
double latency_us(int calls, Run&& run) {
  for (int i = 0; i < calls / 10 + 1; ++i) run();
  std::vector<double> samples;
  samples.reserve(static_cast<size_t>(calls));
  for (int i = 0; i < calls; ++i) {
    Clock::time_point begin = Clock::now();
    run();
    samples.push_back(ns_between(begin, Clock::now()) / 1e3);
  }
  return median(samples);
}

// ---------------------------------------------------------------------------
// Deployment: a saved model loaded and run in a fresh process (bench_deploy).
// ---------------------------------------------------------------------------

// Reports, as result lines: the time `load()` takes; the first `run(1)`
// (which includes whatever the runtime plans or compiles lazily); the median
// steady-state latency of `run(1)` and `run(64)`; the peak RSS. `run(batch)`
// must wait for its result. Called once per child process, so that "load"
// and "first call" are what a freshly started server pays.
template <class Load, class Run>
void deploy_figures(Load load, Run run) {
  auto ms_since = [](Clock::time_point begin) { return ns_between(begin, Clock::now()) / 1e6; };
  Clock::time_point begin = Clock::now();
  load();
  emit("load_ms", ms_since(begin));
  begin = Clock::now();
  run(1);
  emit("first_call_ms", ms_since(begin));
  for (auto [batch, calls] : {std::pair<int64_t, int>{1, 200}, std::pair<int64_t, int>{64, 30}}) {
    run(batch);  // A new batch size may plan once; not a steady-state call.
    std::vector<double> samples;
    for (int i = 0; i < calls; ++i) {
      begin = Clock::now();
      run(batch);
      samples.push_back(ms_since(begin));
    }
    emit("batch" + std::to_string(batch) + "_ms", median(samples));
  }
  emit("peak_rss_mib", proc_status_mib("VmHWM"));
}

// ---------------------------------------------------------------------------
// (7) Sequence models: attention and an LSTM layer, forward + backward.
// ---------------------------------------------------------------------------

// The workloads of bench_sequence and the peer's "sequence" mode: attention
// over [batch 8, heads 8, seq, dim 64] for seq 128 and 512 (q, k and v
// require grad; the loss is the sum of the output), and one LSTM layer of
// hidden and input size 256 over [batch 32, seq 100] (the loss is the sum of
// its output; the parameters get gradients).
struct SequenceShapes {
  static constexpr int64_t kAttentionBatch = 8, kHeads = 8, kHeadDim = 64;
  static constexpr int64_t kLstmBatch = 32, kLstmLength = 100, kLstmSize = 256;
  // Tutorial 05's language model and training step (bench/tutorial_models.h):
  // byte vocabulary, d_model, heads, context and batch.
  static constexpr int64_t kLmVocab = 256, kLmModel = 128, kLmHeads = 4, kLmLayers = 2;
  static constexpr int64_t kLmContext = 64, kLmBatch = 32;
  static constexpr double kLmLr = 3e-3, kLmWeightDecay = 0.01, kLmDropout = 0.1;
  static constexpr int kWarmup = 2, kRuns = 10;
};

// Runs `step` (one forward + backward that waits for its result) kWarmup
// times, then reports the median of kRuns as `ms` and the peak RSS as
// `peak_rss_mib`: one workload per child process, so the peak is its own.
template <class Step>
void sequence_figures(Step step) {
  for (int i = 0; i < SequenceShapes::kWarmup; ++i) step();
  std::vector<double> samples;
  for (int i = 0; i < SequenceShapes::kRuns; ++i) {
    Clock::time_point begin = Clock::now();
    step();
    samples.push_back(ns_between(begin, Clock::now()) / 1e6);
  }
  emit("ms", median(samples));
  emit("peak_rss_mib", proc_status_mib("VmHWM"));
}

}  // namespace bench
