// Memory: what the caching allocator keeps and how high the process's
// resident set climbs, for workloads whose tensor sizes change and for
// steady training loops.
//
//   build/release/bench/bench_memory               # every row, ~2 min
//   build/release/bench/bench_memory --row sweep   # one row (see kRows)
//
// Rows, each in a child process of its own, so that each peak RSS is its own
// (Note [Side by side in separate processes] in harness.h):
//   sweep:   eager inference of the tutorial's CNN (bench/tutorial_models.h)
//            at batch sizes 1, 101, 201, ... up to 4000, reading each answer
//            (a server answering requests of every size; every 100th size,
//            which still asks for nearly every size class, to keep the row
//            to seconds); the inputs are slices of one 4000-row batch, made
//            before the timing starts.
//   storm:   the tutorial's MLP hybridized (Module::hybridize) and called at
//            the 2000 batch sizes 1..2000: a trace, a graph and a memory
//            plan for each (the module keeps 8 graphs, HybridizeOptions; its
//            warning for each new trace goes to /dev/null).
//   <model>-<eager|hybrid>: training of the tutorial's MLP or CNN, batch
//            128, Adam lr 1e-3, on Fashion-MNIST (Debian's
//            dataset-fashion-mnist, as tutorials/02 loads it; synthetic
//            batches, bench::synthetic_batches, where it is missing), loss
//            read every 20 steps; eager, or the whole step hybridized.
// Each row prints samples/s (sweep and storm: samples of all calls over the
// wall time), peak RSS (VmHWM), the CPU allocator's cached bytes at the end
// and the most it held cached after any call, and its peak bytes in use;
// the training rows also the peak in use after the warm-up (steady use) and,
// hybridized, the bytes of the step's memory plan (planned).
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench/harness.h"
#include "bench/tutorial_models.h"
#include "core/allocator.h"
#include "tandem/tandem.h"

namespace {

using namespace tandem;

constexpr int64_t kSweepMax = 4000;
constexpr int64_t kSweepStep = 100;
constexpr int64_t kStormShapes = 2000;

const char* const kRows[] = {"sweep",      "storm",     "mlp-eager",
                             "mlp-hybrid", "cnn-eager", "cnn-hybrid"};

// Watches the CPU allocator's cache between calls, and keeps the peak in use
// across a reset of it (the steady-state peak of the training rows).
struct CacheWatch {
  size_t max_cached = 0;
  size_t peak_before_reset = 0;
  void sample() { max_cached = std::max(max_cached, allocator_for(Device::cpu()).stats().cached); }
  void reset_peak() {
    peak_before_reset = allocator_for(Device::cpu()).stats().peak_in_use;
    allocator_for(Device::cpu()).reset_peak();
  }
};

void emit_memory(const CacheWatch& watch) {
  engine::current().wait_all();
  AllocatorStats stats = allocator_for(Device::cpu()).stats();
  bench::emit("cached_mib", stats.cached / 1048576.0);
  bench::emit("max_cached_mib", std::max(watch.max_cached, stats.cached) / 1048576.0);
  bench::emit("peak_in_use_mib", std::max(stats.peak_in_use, watch.peak_before_reset) / 1048576.0);
  bench::emit("peak_rss_mib", bench::proc_status_mib("VmHWM"));
}

// Rows sweep and storm: `model_name` at batch sizes 1, 1 + step, ... up to
// `max_batch`, eager or hybridized, reading each call's answer.
void inference_child(const std::string& model_name, bool hybridized, int64_t max_batch,
                     int64_t step) {
  manual_seed(0);
  std::shared_ptr<nn::Module> model =
      model_name == "cnn" ? bench::make_tutorial_cnn() : bench::make_tutorial_mlp();
  model->eval();
  if (hybridized) model->hybridize();
  NoGradGuard no_grad;
  Tensor inputs = randn({max_batch, 1, bench::kImageSide, bench::kImageSide});
  inputs.wait_to_read();
  CacheWatch watch;
  bench::Clock::time_point begin = bench::Clock::now();
  int64_t samples = 0;
  for (int64_t batch = 1; batch <= max_batch; batch += step) {
    (*model)(inputs.slice(0, batch)).wait_to_read();
    samples += batch;
    watch.sample();
  }
  bench::emit("samples_per_s", samples / (bench::ns_between(begin, bench::Clock::now()) / 1e9));
  emit_memory(watch);
}

// The training batches: Fashion-MNIST's first `count` batches of 128 when
// the data set is installed, synthetic ones otherwise.
void training_batches(int count, std::vector<Tensor>& images, std::vector<Tensor>& labels) {
  try {
    data::FashionMnist train = data::load_fashion_mnist("train");
    constexpr float kMean = 0.2860f, kStd = 0.3530f;  // As tutorials/02 normalizes.
    for (int i = 0; i < count; ++i) {
      int64_t begin = i * bench::kBatchSize;
      Tensor x = train.images.slice(begin, begin + bench::kBatchSize);
      images.push_back(data::to_float(x, 1.0f / (255 * kStd), -kMean / kStd)
                           .reshape({-1, 1, bench::kImageSide, bench::kImageSide}));
      labels.push_back(data::to_int64(train.labels.slice(begin, begin + bench::kBatchSize)));
    }
    bench::emit("fashion_mnist", 1);
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_memory: %s; training on synthetic batches\n", e.what());
    for (const bench::SyntheticBatch& batch : bench::synthetic_batches()) {
      images.push_back(Tensor::from_vector(
          batch.images, {bench::kBatchSize, 1, bench::kImageSide, bench::kImageSide}));
      labels.push_back(Tensor::from_vector(batch.labels, {bench::kBatchSize}));
    }
    bench::emit("fashion_mnist", 0);
  }
}

// Rows <model>-<eager|hybrid>: `steps` timed training steps after a warm-up
// window, the loss read every bench::kReportEvery steps.
void training_child(const std::string& model_name, bool hybridized, int steps) {
  manual_seed(0);
  std::shared_ptr<nn::Module> model =
      model_name == "cnn" ? bench::make_tutorial_cnn() : bench::make_tutorial_mlp();
  model->train();
  optim::Adam optimizer(model->parameters(), {.lr = bench::kLearningRate});
  std::vector<Tensor> images, labels;
  training_batches(64, images, labels);
  HybridFunction::Fn eager_step = bench::training_step(*model, optimizer);
  HybridFunction hybrid_step(eager_step);
  CacheWatch watch;
  auto run_steps = [&](int first, int count) {
    Tensor loss;
    for (int i = first; i < first + count; ++i) {
      size_t b = static_cast<size_t>(i) % images.size();
      std::vector<Tensor> batch{images[b], labels[b]};
      loss = (hybridized ? hybrid_step(batch) : eager_step(batch))[0];
      if ((i + 1) % bench::kReportEvery == 0) {
        loss.item<float>();
        watch.sample();
      }
    }
    engine::current().wait_all();
  };
  run_steps(0, bench::kReportEvery);  // Warm-up: traces, caches, page faults.
  watch.reset_peak();
  bench::Clock::time_point begin = bench::Clock::now();
  run_steps(bench::kReportEvery, steps);
  double seconds = bench::ns_between(begin, bench::Clock::now()) / 1e9;
  bench::emit("samples_per_s", steps * bench::kBatchSize / seconds);
  bench::emit("steady_peak_in_use_mib",
              allocator_for(Device::cpu()).stats().peak_in_use / 1048576.0);
  if (hybridized) {
    bench::emit("planned_mib",
                hybrid_step.last_executor()->memory_plan().planned_bytes / 1048576.0);
  }
  emit_memory(watch);
}

void run_child(const std::string& row, int steps) {
  if (row == "sweep") return inference_child("cnn", false, kSweepMax, kSweepStep);
  if (row == "storm") return inference_child("mlp", true, kStormShapes, 1);
  std::string model = row.substr(0, row.find('-'));
  bool hybridized = row.substr(row.find('-') + 1) == "hybrid";
  training_child(model, hybridized, steps > 0 ? steps : (model == "cnn" ? 200 : 400));
}

}  // namespace

int main(int argc, char** argv) try {
  std::string only = bench::flag(argc, argv, "--row", "");
  int steps = std::stoi(bench::flag(argc, argv, "--steps", "0"));
  if (bench::has_flag(argc, argv, "--child")) {
    run_child(only, steps);
    return 0;
  }
  std::printf(
      "Memory: one process per row; MiB; CPU allocator cache at the end / most after a "
      "call\n");
  std::printf("  %-11s %10s %9s %9s %9s %9s %11s %8s\n", "row", "samples/s", "peak RSS", "cached",
              "max cache", "peak use", "steady use", "planned");
  for (const char* row : kRows) {
    if (!only.empty() && only != row) continue;
    std::string command = bench::program_beside("bench_memory") + " --child --row " + row +
                          " --steps " + std::to_string(steps);
    if (std::string(row) == "storm") command += " 2>/dev/null";
    std::optional<bench::Results> r = bench::run_child(command);
    if (!r) {
      std::printf("  %-11s (failed)\n", row);
      continue;
    }
    // nan where a row has no such figure (inference: no steady phase; eager: no plan).
    std::printf("  %-11s %10.0f %9.0f %9.1f %9.1f %9.1f %11.1f %8.1f%s\n", row,
                bench::get(*r, "samples_per_s"), bench::get(*r, "peak_rss_mib"),
                bench::get(*r, "cached_mib"), bench::get(*r, "max_cached_mib"),
                bench::get(*r, "peak_in_use_mib"), bench::get(*r, "steady_peak_in_use_mib"),
                bench::get(*r, "planned_mib"),
                bench::get(*r, "fashion_mnist") == 0 ? "  (synthetic batches)" : "");
  }
  return 0;
} catch (const tandem::Error& e) {
  std::fprintf(stderr, "bench_memory: %s\n", e.what());
  return 1;
}
