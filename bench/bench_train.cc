// Training throughput and peak memory, Tandem vs PyTorch, in two suites:
//
//   build/release/bench/bench_train                          # both suites, ~8 min
//   build/release/bench/bench_train --suite standard         # the standard workloads
//   build/release/bench/bench_train --suite tutorial [--model mlp|cnn] [--steps N]
//
// * standard: Note [Standard workloads] in harness.h: the MLP and LeNet-5 on
//   Fashion-MNIST's first 10,000 samples, SGD 0.1/0.9, batch 64 and 256, the
//   uint8 images gathered and scaled inside the timed loop. Tandem eager and
//   with the whole step hybridized; every libtorch configuration
//   (harness.h, Note [libtorch configurations]); PyTorch from Python eager
//   and with torch.compile (bench/torch/peer.py). Targets (issue 16): eager
//   >= 1.2x the best peer, hybridized >= 1.5x, hybridized peak memory <=
//   eager's.
// * tutorial: the MLP and the CNN of tutorials/02_train_fashion_mnist.cpp,
//   Adam lr 1e-3, batch 128, on synthetic batches (bench::synthetic_batches)
//   with cross-entropy; the tutorial's per-batch accuracy bookkeeping is left
//   out on both sides. Tandem's default engine, its naive engine
//   (TANDEM_ENGINE=naive: every op inline on the caller, which shows what the
//   threaded engine's overlap gains or costs) and the libtorch configurations.
//   What each figure means: Note [Training figures] in harness.h.
//
// Every row is a child process of its own (Note [Side by side in separate
// processes]) with 2 threads.
#include <sys/stat.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench/harness.h"
#include "bench/tutorial_models.h"
#include "tandem/tandem.h"

namespace {

using namespace tandem;

// ---------------------------------------------------------------------------
// The tutorial suite.
// ---------------------------------------------------------------------------

// The child: trains one model and prints the result lines.
void tutorial_child(const std::string& model_name, int steps) {
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
void print_tutorial_row(const std::string& model, const char* framework, const std::string& config,
                        const std::optional<bench::Results>& r) {
  std::printf("  %-4s %-8s %-13s", model.c_str(), framework, config.c_str());
  if (!r) {
    std::printf(" (failed)\n");
    return;
  }
  std::printf(" %10.0f %10.2f %10.0f %10.0f %9.3g -> %.3g\n", bench::get(*r, "samples_per_s"),
              bench::get(*r, "median_step_ms"), bench::get(*r, "peak_rss_mib"),
              bench::get(*r, "rss_growth_mib"), bench::get(*r, "first_loss"),
              bench::get(*r, "last_loss"));
}

void tutorial_suite(const std::string& only, const std::string& steps_flag) {
  auto steps_for = [&](const std::string& model) {
    return steps_flag.empty() ? (model == "cnn" ? 200 : 400) : std::stoi(steps_flag);
  };
  std::vector<bench::TorchConfig> configs = bench::torch_configs();
  std::printf(
      "Tutorial suite: batch %lld, Adam lr %g, synthetic 28x28 batches, 2 threads, one process "
      "per row\n",
      static_cast<long long>(bench::kBatchSize), bench::kLearningRate);
  std::printf("  %-27s %10s %10s %10s %10s %s\n", "", "samples/s", "step ms", "peak MiB", "growth",
              "loss after warm-up -> end");
  for (std::string model : {"mlp", "cnn"}) {
    if (!only.empty() && only != model) continue;
    std::string args = "--model " + model + " --steps " + std::to_string(steps_for(model));
    std::string child = bench::program_beside("bench_train") + " --child tutorial " + args;
    std::optional<bench::Results> ours = bench::run_child(child);
    print_tutorial_row(model, "Tandem", "", ours);
    print_tutorial_row(model, "Tandem", "naive eng.",
                       bench::run_child("TANDEM_ENGINE=naive " + child));
    double best = 0;
    std::string best_label;
    for (const bench::TorchConfig& config : configs) {
      std::optional<bench::Results> theirs = bench::run_torch_peer(config, "train " + args);
      print_tutorial_row(model, "libtorch", config.label, theirs);
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
}

// ---------------------------------------------------------------------------
// The standard suite (Note [Standard workloads]).
// ---------------------------------------------------------------------------

// The standard data, from Debian's Fashion-MNIST where it is installed, else
// synthetic uint8 images (each class a fixed pattern plus noise, so that the
// loss falls); `fashion_mnist` says which.
bench::StandardData standard_data(bool& fashion_mnist) {
  bench::StandardData data;
  try {
    data::FashionMnist train = data::load_fashion_mnist("train");
    const std::vector<uint8_t> images = train.images.to_vector<uint8_t>();
    const std::vector<uint8_t> labels = train.labels.to_vector<uint8_t>();
    data.images.assign(images.begin(),
                       images.begin() + bench::kStandardSamples * bench::kStandardPixels);
    data.labels.assign(labels.begin(), labels.begin() + bench::kStandardSamples);
    fashion_mnist = true;
  } catch (const Error& e) {
    std::fprintf(stderr, "bench_train: %s; synthetic images instead\n", e.what());
    std::mt19937 rng(7);
    std::vector<uint8_t> patterns(bench::kClasses * bench::kStandardPixels);
    for (uint8_t& p : patterns) p = static_cast<uint8_t>(rng() % 192);
    for (int64_t i = 0; i < bench::kStandardSamples; ++i) {
      const int64_t label = static_cast<int64_t>(rng() % bench::kClasses);
      data.labels.push_back(static_cast<uint8_t>(label));
      for (int64_t p = 0; p < bench::kStandardPixels; ++p) {
        data.images.push_back(
            static_cast<uint8_t>(patterns[label * bench::kStandardPixels + p] + rng() % 64));
      }
    }
    fashion_mnist = false;
  }
  return data;
}

// The child: one standard run of Tandem, eager or with the step hybridized.
void standard_child(const std::string& model_name, int64_t batch, bool hybridized,
                    const std::string& dir) {
  std::optional<bench::StandardData> data = bench::read_standard_data(dir);
  TANDEM_CHECK(data.has_value(), "no standard data in ", dir);
  manual_seed(0);
  std::shared_ptr<nn::Module> model = bench::make_standard_model(model_name);
  model->train();
  optim::SGD optimizer(model->parameters(),
                       {.lr = bench::kStandardLr, .momentum = bench::kStandardMomentum});
  const int64_t n = bench::kStandardSamples;
  Tensor images = Tensor::from_vector<uint8_t>(data->images, {n, 28, 28});
  std::vector<int64_t> labels64(data->labels.begin(), data->labels.end());
  Tensor labels = Tensor::from_vector<int64_t>(labels64, {n});
  std::vector<Tensor> indices;
  for (const std::vector<int64_t>& b : bench::standard_batches(batch)) {
    indices.push_back(Tensor::from_vector<int64_t>(b, {batch}));
  }
  HybridFunction::Fn step = [&](const std::vector<Tensor>& in) {
    Tensor x =
        reshape(mul(cast(take(in[0], in[1]), DType::kFloat32), 1.0 / 255), {batch, 1, 28, 28});
    Tensor y = take(in[2], in[1]);
    optimizer.zero_grad();
    Tensor loss = cross_entropy(model->forward(x), y);
    loss.backward();
    optimizer.step();
    return std::vector<Tensor>{loss};
  };
  HybridFunction hybrid_step(step);
  Tensor loss;
  bench::run_standard_epochs(
      batch,
      [&](int64_t i) {
        std::vector<Tensor> in{images, indices[static_cast<size_t>(i)], labels};
        loss = (hybridized ? hybrid_step(in) : step(in))[0];
      },
      [&] { return static_cast<double>(loss.item<float>()); });
}

struct StandardRow {
  std::string framework, config;
  std::optional<bench::Results> results;
};

void print_standard_row(const std::string& workload, const StandardRow& row) {
  std::printf("  %-10s %-8s %-15s", workload.c_str(), row.framework.c_str(), row.config.c_str());
  if (!row.results) {
    std::printf(" (failed)\n");
    return;
  }
  const bench::Results& r = *row.results;
  std::printf(" %10.0f %10.0f %9.3g -> %.3g\n", bench::get(r, "samples_per_s"),
              bench::get(r, "peak_rss_mib"), bench::get(r, "first_loss"),
              bench::get(r, "last_loss"));
}

void standard_suite(const std::string& only_model) {
  bool fashion_mnist = false;
  const bench::StandardData data = standard_data(fashion_mnist);
  const std::string dir = bench::self_dir() + "standard-data";
  mkdir(dir.c_str(), 0755);
  TANDEM_CHECK(bench::write_standard_data(dir, data), "cannot write the standard data to ", dir);
  std::vector<bench::TorchConfig> configs = bench::torch_configs();
  const std::string python = bench::python_peer(TANDEM_SOURCE_DIR);
  std::printf(
      "Standard suite: %s, first %lld samples, SGD lr %g momentum %g, uint8 gathered and "
      "scaled in the step, 2 threads, one process per row; samples/s is the median of %d "
      "epochs\n",
      fashion_mnist ? "Fashion-MNIST" : "synthetic uint8 images (Fashion-MNIST not installed)",
      static_cast<long long>(bench::kStandardSamples), bench::kStandardLr, bench::kStandardMomentum,
      bench::kTimedEpochs);
  std::printf("  %-35s %10s %10s %s\n", "", "samples/s", "peak MiB", "loss after warm-up -> end");
  for (std::string model : {"mlp", "lenet"}) {
    if (!only_model.empty() && only_model != model) continue;
    for (int64_t batch : {64, 256}) {
      const std::string workload = model + " b" + std::to_string(batch);
      const std::string args =
          "--model " + model + " --batch " + std::to_string(batch) + " --data '" + dir + "'";
      const std::string child = bench::program_beside("bench_train") + " --child standard " + args;
      StandardRow eager{"Tandem", "eager", bench::run_child(child)};
      StandardRow hybrid{"Tandem", "hybridized", bench::run_child(child + " --hybridize")};
      print_standard_row(workload, eager);
      print_standard_row(workload, hybrid);
      std::vector<StandardRow> peers;
      for (const bench::TorchConfig& config : configs) {
        peers.push_back(
            {"libtorch", config.label, bench::run_torch_peer(config, "standard-train " + args)});
      }
      if (!python.empty()) {
        for (const char* mode : {"eager", "compile"}) {
          peers.push_back({"PyTorch", std::string("py ") + mode,
                           bench::run_child(python + " train --mode " + mode + " " + args)});
        }
      }
      const StandardRow* best = nullptr;
      for (const StandardRow& row : peers) {
        print_standard_row(workload, row);
        if (row.results && (best == nullptr || bench::get(*row.results, "samples_per_s") >
                                                   bench::get(*best->results, "samples_per_s"))) {
          best = &row;
        }
      }
      auto ratio = [&](const StandardRow& ours) {
        return ours.results ? bench::get(*ours.results, "samples_per_s") /
                                  bench::get(*best->results, "samples_per_s")
                            : std::nan("");
      };
      if (best != nullptr) {
        std::printf(
            "  %-10s vs best peer (%s %s): eager %.2fx (target >= 1.2x), hybridized %.2fx "
            "(target >= 1.5x)\n",
            workload.c_str(), best->framework.c_str(), best->config.c_str(), ratio(eager),
            ratio(hybrid));
      }
      if (eager.results && hybrid.results) {
        std::printf("  %-10s hybridized / eager peak RSS: %.2fx (target <= 1.00x)\n",
                    workload.c_str(),
                    bench::get(*hybrid.results, "peak_rss_mib") /
                        bench::get(*eager.results, "peak_rss_mib"));
      }
    }
  }
  if (configs.empty()) bench::print_no_peer_note();
}

}  // namespace

int main(int argc, char** argv) try {
  const std::string suite = bench::flag(argc, argv, "--suite", "");
  const std::string model = bench::flag(argc, argv, "--model", "");
  if (bench::has_flag(argc, argv, "--child")) {
    const std::string kind = bench::flag(argc, argv, "--child", "");
    if (kind == "standard") {
      standard_child(model, std::stoll(bench::flag(argc, argv, "--batch", "64")),
                     bench::has_flag(argc, argv, "--hybridize"),
                     bench::flag(argc, argv, "--data", ""));
    } else {
      const std::string steps = bench::flag(argc, argv, "--steps", "");
      tutorial_child(model, steps.empty() ? (model == "cnn" ? 200 : 400) : std::stoi(steps));
    }
    engine::current().wait_all();  // Finish the last updates before the process exits.
    return 0;
  }
  if (suite.empty() || suite == "standard") standard_suite(model);
  if (suite.empty() || suite == "tutorial") {
    tutorial_suite(model, bench::flag(argc, argv, "--steps", ""));
  }
  return 0;
} catch (const tandem::Error& e) {
  std::fprintf(stderr, "bench_train: %s\n", e.what());
  return 1;
}
