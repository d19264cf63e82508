// Deployment and inference latency, Tandem vs PyTorch, in two parts:
//
// (1) A saved model in a fresh process: the tutorial's CNN and the standard
//     MLP and LeNet-5 (Note [Standard workloads] in harness.h) exported by
//     Tandem and loaded with tandem::load, side by side with the same
//     architectures traced to TorchScript and frozen (bench/torch/
//     trace_model.py) and loaded with torch::jit::load by each libtorch peer
//     (Debian's, the wheel's), and exported to ONNX and run by onnxruntime
//     (bench/torch/peer.py). Reported: load time, the first call at batch 1,
//     their sum (target, issue 16: <= 5 ms for Tandem), steady batch-1 and
//     batch-64 latency, peak RSS. Each figure is the median over several
//     fresh children, since load and first call are what a newly started
//     server pays.
// (2) Steady inference latency of the standard models at batch 1 and 64, in
//     eval mode without gradients: Tandem's hybridized module and loaded
//     model; each libtorch configuration eager; TorchScript; PyTorch's
//     torch.compile and onnxruntime from Python; and the small product
//     mm([1, 64], [64, 64]) eager. Targets (issue 16), against the best peer:
//     batch-1 MLP <= 0.5x, LeNet <= 0.6x, the small product <= 0.5x, batch
//     64 below 1x.
//
//   bench_deploy [--quick]
//   bench_deploy --child MODEL.json          (a fresh process: tandem::load and calls)
//   bench_deploy --child-latency mlp|lenet   (the hybridized module and the small product)
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

void deploy_child(const std::string& path) {
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

// A standard model hybridized in eval mode: batch-1 and batch-64 latency;
// and the small product eager.
void latency_child(const std::string& model_name) {
  manual_seed(0);
  std::shared_ptr<nn::Module> model = bench::make_standard_model(model_name);
  model->eval();
  model->hybridize();
  NoGradGuard no_grad;
  for (int64_t batch : {1, 64}) {
    const Tensor x = rand({batch, 1, 28, 28});
    bench::emit("b" + std::to_string(batch) + "_us",
                bench::latency_us(batch == 1 ? 20000 : 2000, [&] { (*model)(x).wait_to_read(); }));
  }
  const Tensor a = rand({1, 64}), b = rand({64, 64});
  bench::emit("mm_1x64_us", bench::latency_us(100000, [&] { matmul(a, b).wait_to_read(); }));
}

const char* const kDeployKeys[] = {"load_ms", "first_call_ms", "batch1_ms", "batch64_ms",
                                   "peak_rss_mib"};

// The median of each key over the children that succeeded; nullopt if none did.
std::optional<bench::Results> medians(const std::vector<bench::Results>& runs) {
  if (runs.empty()) return std::nullopt;
  bench::Results out;
  for (const char* key : kDeployKeys) {
    std::vector<double> values;
    for (const bench::Results& r : runs) values.push_back(bench::get(r, key));
    out[key] = bench::median(values);
  }
  return out;
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

// A libtorch peer and the Python that traces its TorchScript files: Debian's
// libtorch with Debian's python3-torch, the wheel's with build/peers.
struct ScriptPeer {
  bench::TorchConfig config;  // The peer's first (best) configuration.
  std::string python;         // The interpreter, quoted.
};

std::vector<ScriptPeer> script_peers(const std::vector<bench::TorchConfig>& configs) {
  std::vector<ScriptPeer> peers;
  for (const bench::TorchConfig& config : configs) {
    bool seen = false;
    for (const ScriptPeer& p : peers) seen = seen || p.config.program == config.program;
    if (seen) continue;
    const bool wheel = config.program.find("torch_pip") != std::string::npos;
    const std::string python =
        wheel ? bench::self_dir() + "../../peers/bin/python" : std::string("/usr/bin/python3");
    if (access(python.c_str(), X_OK) == 0) peers.push_back({config, "'" + python + "'"});
  }
  return peers;
}

// One model's rows of part (1); returns Tandem's figures.
std::optional<bench::Results> deploy_rows(
    const std::string& name, const fs::path& dir, int children,
    const std::vector<ScriptPeer>& peers, const std::string& python_peer,
    std::vector<std::pair<std::string, bench::Results>>& loaded_latency) {
  manual_seed(0);
  std::shared_ptr<nn::Module> model =
      name == "cnn" ? bench::make_tutorial_cnn() : bench::make_standard_model(name);
  model->eval();
  model->hybridize();
  {
    NoGradGuard no_grad;
    (*model)(randn({1, 1, 28, 28}));
  }
  model->export_model((dir / name).string());
  const std::string json = (dir / (name + ".json")).string();

  auto print = [](const std::string& label, const std::optional<bench::Results>& r,
                  double file_kib) {
    std::printf("  %-6s %-24s", "", label.c_str());
    if (!r) {
      std::printf(" (failed)\n");
      return;
    }
    std::printf(" %8.1f %10.2f %12.1f %9.3f %10.3f %9.0f %9.0f\n", bench::get(*r, "load_ms"),
                bench::get(*r, "first_call_ms"),
                bench::get(*r, "load_ms") + bench::get(*r, "first_call_ms"),
                bench::get(*r, "batch1_ms"), bench::get(*r, "batch64_ms"),
                bench::get(*r, "peak_rss_mib"), file_kib);
  };
  std::printf("  %s\n", name.c_str());

  std::vector<bench::Results> runs;
  for (int c = 0; c < children; ++c) {
    if (auto r =
            bench::run_child(bench::program_beside("bench_deploy") + " --child '" + json + "'")) {
      runs.push_back(*r);
    }
  }
  std::optional<bench::Results> ours = medians(runs);
  print("Tandem (tandem::load)", ours, model_kib(json));
  if (ours) loaded_latency.emplace_back("Tandem loaded", *ours);

  const fs::path script = fs::path(TANDEM_SOURCE_DIR) / "bench/torch/trace_model.py";
  for (const ScriptPeer& peer : peers) {
    const std::string pt =
        (dir / (name + "-" + std::to_string(&peer - peers.data()) + ".pt")).string();
    if (!bench::run_child(peer.python + " '" + script.string() + "' " + name + " '" + pt + "'")) {
      continue;
    }
    std::vector<bench::Results> theirs;
    for (int c = 0; c < children; ++c) {
      if (auto r = bench::run_torch_peer(peer.config, "deploy --model '" + pt + "'")) {
        theirs.push_back(*r);
      }
    }
    const std::string label = "TorchScript " + peer.config.label;
    std::optional<bench::Results> figures = medians(theirs);
    print(label, figures, kib(pt));
    if (figures) loaded_latency.emplace_back(label, *figures);
  }
  if (!python_peer.empty() && name != "cnn") {
    std::vector<bench::Results> theirs;
    for (int c = 0; c < children; ++c) {
      if (auto r = bench::run_child(python_peer + " infer --mode ort --model " + name +
                                    " --data '" + dir.string() + "'")) {
        bench::Results figures = *r;
        figures["batch1_ms"] = bench::get(*r, "b1_us") / 1000;
        figures["batch64_ms"] = bench::get(*r, "b64_us") / 1000;
        theirs.push_back(figures);
      }
    }
    print("onnxruntime (Python)", medians(theirs), kib(dir / (name + ".onnx")));
  }
  return ours;
}

struct LatencyRow {
  std::string label;
  double b1_us, b64_us;
};

// One model's rows of part (2); returns the Tandem hybridized child's figures.
std::optional<bench::Results> latency_rows(
    const std::string& name, const std::vector<std::pair<std::string, bench::Results>>& loaded,
    const std::vector<bench::TorchConfig>& configs, const std::string& python_peer,
    const fs::path& dir, double b1_target) {
  std::vector<LatencyRow> ours, theirs;
  auto add = [](std::vector<LatencyRow>& rows, const std::string& label,
                const std::optional<bench::Results>& r) {
    if (r) rows.push_back({label, bench::get(*r, "b1_us"), bench::get(*r, "b64_us")});
  };
  std::optional<bench::Results> hybridized =
      bench::run_child(bench::program_beside("bench_deploy") + " --child-latency " + name);
  add(ours, "Tandem hybridized", hybridized);
  for (const auto& [label, r] : loaded) {
    LatencyRow row{label, bench::get(r, "batch1_ms") * 1000, bench::get(r, "batch64_ms") * 1000};
    (label.rfind("Tandem", 0) == 0 ? ours : theirs).push_back(row);
  }
  for (const bench::TorchConfig& config : configs) {
    add(theirs, "libtorch " + config.label + " eager",
        bench::run_torch_peer(config, "standard-infer --model " + name));
  }
  if (!python_peer.empty()) {
    for (const char* mode : {"eager", "compile", "ort"}) {
      add(theirs, std::string("Python ") + mode,
          bench::run_child(python_peer + " infer --mode " + mode + " --model " + name +
                           " --data '" + dir.string() + "'"));
    }
  }
  std::printf("  %s\n", name.c_str());
  for (const auto* rows : {&ours, &theirs}) {
    for (const LatencyRow& row : *rows) {
      std::printf("  %-6s %-28s %10.1f %10.1f\n", "", row.label.c_str(), row.b1_us, row.b64_us);
    }
  }
  const LatencyRow *best1 = nullptr, *best64 = nullptr;
  for (const LatencyRow& row : theirs) {
    if (best1 == nullptr || row.b1_us < best1->b1_us) best1 = &row;
    if (best64 == nullptr || row.b64_us < best64->b64_us) best64 = &row;
  }
  if (best1 == nullptr) return hybridized;
  for (const LatencyRow& row : ours) {
    std::printf(
        "  %-6s %s / best peer: batch 1 %.2fx (%s; target <= %.1fx), batch 64 %.2fx (%s; "
        "target < 1x)\n",
        "", row.label.c_str(), row.b1_us / best1->b1_us, best1->label.c_str(), b1_target,
        row.b64_us / best64->b64_us, best64->label.c_str());
  }
  return hybridized;
}

}  // namespace

int main(int argc, char** argv) try {
  if (bench::has_flag(argc, argv, "--child")) {
    deploy_child(bench::flag(argc, argv, "--child", ""));
    return 0;
  }
  if (bench::has_flag(argc, argv, "--child-latency")) {
    latency_child(bench::flag(argc, argv, "--child-latency", "mlp"));
    return 0;
  }
  const int children = bench::has_flag(argc, argv, "--quick") ? 3 : 7;
  const fs::path dir =
      fs::temp_directory_path() / ("tandem-bench-deploy-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::vector<bench::TorchConfig> configs = bench::torch_configs();
  const std::vector<ScriptPeer> peers = script_peers(configs);
  const std::string python = bench::python_peer(TANDEM_SOURCE_DIR);

  std::printf("(1) A fresh process per run, median of %d runs; times in ms\n", children);
  std::printf("  %-6s %-24s %8s %10s %12s %9s %10s %9s %9s\n", "", "", "load", "1st call",
              "load+1st", "batch 1", "batch 64", "RSS MiB", "file KiB");
  std::vector<std::pair<std::string, std::vector<std::pair<std::string, bench::Results>>>> loaded;
  for (const char* name : {"cnn", "mlp", "lenet"}) {
    loaded.emplace_back(name, std::vector<std::pair<std::string, bench::Results>>{});
    std::optional<bench::Results> ours =
        deploy_rows(name, dir, children, peers, python, loaded.back().second);
    if (ours) {
      std::printf("  %-6s load + first call: %.1f ms (target <= 5 ms)\n", "",
                  bench::get(*ours, "load_ms") + bench::get(*ours, "first_call_ms"));
    }
  }
  if (peers.empty()) {
    std::printf(
        "  (no TorchScript rows: needs bench/torch/torch_peer and a Python with torch; "
        "tools/tandem.sh bench installs both)\n");
  }

  std::printf("\n(2) Steady latency, us, median; eval mode, no gradients\n");
  std::printf("  %-6s %-28s %10s %10s\n", "", "", "batch 1", "batch 64");
  std::optional<bench::Results> ours;  // The MLP's child also times the small product.
  for (const auto& [name, rows] : loaded) {
    if (name == "cnn") continue;
    std::optional<bench::Results> r =
        latency_rows(name, rows, configs, python, dir, name == "mlp" ? 0.5 : 0.6);
    if (name == "mlp") ours = r;
  }
  double best = 0;
  std::string best_label;
  for (const bench::TorchConfig& config : configs) {
    if (auto r = bench::run_torch_peer(config, "standard-infer --model mlp")) {
      if (best == 0 || bench::get(*r, "mm_1x64_us") < best) {
        best = bench::get(*r, "mm_1x64_us");
        best_label = config.label;
      }
    }
  }
  if (ours) {
    std::printf("  mm([1, 64], [64, 64]) eager: Tandem %.3f us", bench::get(*ours, "mm_1x64_us"));
    if (best > 0) {
      std::printf(", best libtorch (%s) %.3f us: %.2fx (target <= 0.5x)", best_label.c_str(), best,
                  bench::get(*ours, "mm_1x64_us") / best);
    }
    std::printf("\n");
  }
  fs::remove_all(dir);
  return 0;
} catch (const Error& e) {
  std::fprintf(stderr, "bench_deploy: %s\n", e.what());
  return 1;
}
