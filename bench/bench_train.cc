// Training throughput and peak memory, Tandem vs libtorch, for the MLP and the
// CNN of tutorials/02_train_fashion_mnist.cpp. Target: Tandem's eager
// samples/s >= 1.0x libtorch's.
//
//   build/release/bench/bench_train                 # both models, ~2 min
//   build/release/bench/bench_train --model mlp     # one model
//   flags: --steps N (timed steps per configuration; default 400 MLP, 200 CNN)
//
// Both sides build the tutorial's models layer for layer (same shapes,
// Dropout(0.25), BatchNorm with default momentum and eps), use Adam with
// lr 1e-3 and batch 128, and train on the same synthetic batches
// (bench::synthetic_batches) with cross-entropy; the tutorial's per-batch
// accuracy bookkeeping is left out on both sides. Each model and framework
// runs in a child process of its own (Note [Side by side in separate
// processes]) with 2 threads: Tandem's engine with its default one worker
// (oneDNN on 2 OpenMP threads), libtorch per Note [libtorch configurations].
// A second Tandem row runs the naive engine (TANDEM_ENGINE=naive: every op
// inline on the caller, nothing in flight), which shows what the threaded
// engine's overlap gains or costs, in time and in memory.
// What each figure means: Note [Training figures] in harness.h.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench/harness.h"
#include "bench/tutorial_models.h"
#include "tandem/tandem.h"

namespace {

using namespace tandem;

// The child: trains one model and prints the result lines.
void train_child(const std::string& model_name, int steps) {
  double start_rss = bench::proc_status_mib("VmRSS");
  manual_seed(0);
  std::shared_ptr<nn::Module> model =
      model_name == "cnn" ? bench::make_tutorial_cnn() : bench::make_tutorial_mlp();
  model->train();
  optim::Adam optimizer(model->parameters(), {.lr = bench::kLearningRate});
  std::vector<Tensor> images, labels;
  for (const bench::SyntheticBatch& batch : bench::synthetic_batches()) {
    images.push_back(Tensor::from_vector(
        batch.images, {bench::kBatchSize, 1, bench::kImageSide, bench::kImageSide}));
    labels.push_back(Tensor::from_vector(batch.labels, {bench::kBatchSize}));
  }
  Tensor loss;
  bench::run_training(
      steps, start_rss,
      [&](int i) {
        loss = cross_entropy(model->forward(images[i]), labels[i]);
        optimizer.zero_grad();
        loss.backward();
        optimizer.step();
      },
      [&] { return static_cast<double>(loss.item<float>()); },
      [] { engine::current().wait_all(); });
}

// `config`: empty for Tandem's default engine, "naive eng." for its naive
// engine, a TorchConfig's label for libtorch.
void print_row(const std::string& model, const char* framework, const std::string& config,
               const std::optional<bench::Results>& r) {
  std::printf("  %-4s %-8s %-11s", model.c_str(), framework, config.c_str());
  if (!r) {
    std::printf(" (failed)\n");
    return;
  }
  std::printf(" %10.0f %10.2f %10.0f %10.0f %9.3g -> %.3g\n", bench::get(*r, "samples_per_s"),
              bench::get(*r, "median_step_ms"), bench::get(*r, "peak_rss_mib"),
              bench::get(*r, "rss_growth_mib"), bench::get(*r, "first_loss"),
              bench::get(*r, "last_loss"));
}

}  // namespace

int main(int argc, char** argv) try {
  std::string only = bench::flag(argc, argv, "--model", "");
  std::string steps_flag = bench::flag(argc, argv, "--steps", "");
  auto steps_for = [&](const std::string& model) {
    return steps_flag.empty() ? (model == "cnn" ? 200 : 400) : std::stoi(steps_flag);
  };
  if (bench::has_flag(argc, argv, "--child")) {
    train_child(only, steps_for(only));
    engine::current().wait_all();  // Finish the last updates before the process exits.
    return 0;
  }

  std::vector<bench::TorchConfig> configs = bench::torch_configs();
  std::printf(
      "Training, batch %lld, Adam lr %g, synthetic 28x28 batches, 2 threads, one process per row\n",
      static_cast<long long>(bench::kBatchSize), bench::kLearningRate);
  std::printf("  %-25s %10s %10s %10s %10s %s\n", "", "samples/s", "step ms", "peak MiB", "growth",
              "loss after warm-up -> end");
  for (std::string model : {"mlp", "cnn"}) {
    if (!only.empty() && only != model) continue;
    std::string args = "--model " + model + " --steps " + std::to_string(steps_for(model));
    std::string child = bench::program_beside("bench_train") + " --child " + args;
    std::optional<bench::Results> ours = bench::run_child(child);
    print_row(model, "Tandem", "", ours);
    print_row(model, "Tandem", "naive eng.", bench::run_child("TANDEM_ENGINE=naive " + child));
    double best = 0;
    std::string best_label;
    for (const bench::TorchConfig& config : configs) {
      std::optional<bench::Results> theirs = bench::run_torch_peer(config, "train " + args);
      print_row(model, "libtorch", config.label, theirs);
      if (theirs && bench::get(*theirs, "samples_per_s") > best) {
        best = bench::get(*theirs, "samples_per_s");
        best_label = config.label;
      }
    }
    if (ours && best > 0) {
      std::printf("  %-4s Tandem / best libtorch (%s): %.2fx samples/s (target >= 1.00x)\n",
                  model.c_str(), best_label.c_str(), bench::get(*ours, "samples_per_s") / best);
    }
  }
  if (configs.empty()) bench::print_no_peer_note();
  return 0;
} catch (const tandem::Error& e) {
  std::fprintf(stderr, "bench_train: %s\n", e.what());
  return 1;
}
