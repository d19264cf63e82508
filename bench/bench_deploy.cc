// Deployment (issue 5's benchmark): the tutorial's CNN exported by Tandem and
// loaded with tandem::load, side by side with the same architecture traced
// to TorchScript (bench/torch/trace_cnn.py, frozen) and loaded with
// torch::jit::load by bench/torch/torch_peer. Reported: load time, the first
// call at batch 1, load + first call (target: Tandem faster than
// TorchScript), steady-state batch-1 and batch-64 latency, peak RSS and file
// size. Every figure comes from a fresh child process, since load and first
// call are what a newly started server pays; each is the median over
// several children.
//
//   bench_deploy [--quick]
//   bench_deploy --child MODEL.json     (what the parent runs for Tandem)
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "bench/harness.h"
#include "bench/tutorial_models.h"
#include "eager/autograd.h"
#include "eager/ops.h"
#include "serialization/file_io.h"
#include "serialization/model.h"

using namespace tandem;
namespace fs = std::filesystem;

namespace {

void run_child(const std::string& path) {
  std::mt19937 rng(0);
  std::normal_distribution<float> normal;
  std::vector<float> values(64 * 28 * 28);
  for (float& v : values) v = normal(rng);
  const Tensor images = Tensor::from_vector(values, Shape{64, 1, 28, 28});
  LoadedModel model;
  bench::deploy_figures(
      [&] { model = load(path); },
      [&](int64_t batch) { model.run({images.slice(0, batch)})[0].wait_to_read(); });
}

const char* const kKeys[] = {"load_ms", "first_call_ms", "batch1_ms", "batch64_ms", "peak_rss_mib"};

// The median of each key over the children that succeeded.
bench::Results medians(const std::vector<bench::Results>& runs) {
  bench::Results out;
  for (const char* key : kKeys) {
    std::vector<double> values;
    for (const bench::Results& r : runs) values.push_back(bench::get(r, key));
    out[key] = bench::median(values);
  }
  return out;
}

void print_row(const char* label, const bench::Results& r, double file_kib) {
  std::printf("  %-22s %8.1f %10.2f %12.1f %9.3f %10.3f %9.0f %9.0f\n", label,
              bench::get(r, "load_ms"), bench::get(r, "first_call_ms"),
              bench::get(r, "load_ms") + bench::get(r, "first_call_ms"), bench::get(r, "batch1_ms"),
              bench::get(r, "batch64_ms"), bench::get(r, "peak_rss_mib"), file_kib);
}

double kib(const fs::path& path) {
  std::error_code ignored;
  auto size = fs::file_size(path, ignored);
  return ignored ? 0 : static_cast<double>(size) / 1024;
}

// An exported model's two files: the graph and the params file it names.
double model_kib(const fs::path& json) {
  const auto params = serialization::params_file_named_by(
      serialization::read_file(json.string(), serialization::kMaxGraphFileBytes));
  return kib(json) + (params ? kib(json.parent_path() / *params) : 0);
}

}  // namespace

int main(int argc, char** argv) try {
  if (bench::has_flag(argc, argv, "--child")) {
    run_child(bench::flag(argc, argv, "--child", ""));
    return 0;
  }
  const int children = bench::has_flag(argc, argv, "--quick") ? 3 : 7;
  const fs::path dir =
      fs::temp_directory_path() / ("tandem-bench-deploy-" + std::to_string(getpid()));
  fs::create_directories(dir);

  // The Tandem model: hybridized, called once at batch 1, exported.
  manual_seed(0);
  auto model = bench::make_tutorial_cnn();
  model->eval();
  model->hybridize();
  {
    NoGradGuard no_grad;
    (*model)(randn({1, 1, 28, 28}));
  }
  model->export_model((dir / "cnn").string());

  // The TorchScript model, when the peer and Python's torch are here.
  std::vector<bench::TorchConfig> configs = bench::torch_configs();
  const fs::path script = fs::path(TANDEM_SOURCE_DIR) / "bench/torch/trace_cnn.py";
  const bool torchscript = !configs.empty() &&
                           bench::run_child("/usr/bin/python3 '" + script.string() + "' '" +
                                            (dir / "cnn.pt").string() + "'")
                               .has_value() &&
                           fs::exists(dir / "cnn.pt");

  std::vector<bench::Results> ours, theirs;
  for (int c = 0; c < children; ++c) {
    if (auto r = bench::run_child(bench::program_beside("bench_deploy") + " --child '" +
                                  (dir / "cnn.json").string() + "'")) {
      ours.push_back(*r);
    }
    if (torchscript) {
      if (auto r = bench::run_torch_peer(configs[0],
                                         "deploy --model '" + (dir / "cnn.pt").string() + "'")) {
        theirs.push_back(*r);
      }
    }
  }

  std::printf("Tutorial CNN, a fresh process per run, median of %d runs; times in ms\n", children);
  std::printf("  %-22s %8s %10s %12s %9s %10s %9s %9s\n", "", "load", "1st call", "load+1st",
              "batch 1", "batch 64", "RSS MiB", "file KiB");
  bench::Results tandem_figures = medians(ours);
  print_row("Tandem (tandem::load)", tandem_figures, model_kib(dir / "cnn.json"));
  if (torchscript) {
    bench::Results torch_figures = medians(theirs);
    std::string label = "TorchScript (" + configs[0].label + ")";
    print_row(label.c_str(), torch_figures, kib(dir / "cnn.pt"));
    const double ratio =
        (bench::get(tandem_figures, "load_ms") + bench::get(tandem_figures, "first_call_ms")) /
        (bench::get(torch_figures, "load_ms") + bench::get(torch_figures, "first_call_ms"));
    std::printf("  load + first call, Tandem / TorchScript: %.2fx (target < 1)\n", ratio);
  } else {
    std::printf(
        "  (no TorchScript row: needs bench/torch/torch_peer (libtorch-dev) and python3-torch;"
        " tools/tandem.sh bench installs both)\n");
  }
  fs::remove_all(dir);
  return 0;
} catch (const Error& e) {
  std::fprintf(stderr, "bench_deploy: %s\n", e.what());
  return 1;
}
