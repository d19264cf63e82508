// ONNX models trained elsewhere: PyTorch's exports of ResNet-18, MobileNet-V2,
// SqueezeNet 1.1, a small transformer encoder and an LSTM classifier
// (bench/onnx/export_models.py, Debian's python3-torch and
// python3-torchvision, fixed random weights, the batch free), run by
// Tandem's importer side by side with onnxruntime (the deployment standard,
// from the virtual environment `tools/tandem.sh bench` makes) and with
// PyTorch itself, eager and as frozen TorchScript (bench/onnx/peer.py).
//
// Per model and runtime, each a fresh process (the median of --runs of
// them): the import or load, the first call at batch 1, and the steady
// latency at batch 1 and 32. Tandem's outputs are checked against torch's at
// batch 1, 2 and 32 (the importer builds at batch 4, so all three are sizes
// it did not build at): the largest error relative to the largest output.
//
//   bench_onnx [--runs N] [--models DIR]
//   bench_onnx --child DIR NAME        (one fresh Tandem process)
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bench/harness.h"
#include "serialization/npy.h"
#include "serialization/onnx_import.h"

using namespace tandem;
namespace fs = std::filesystem;

namespace {

const std::vector<std::string> kModels = {"resnet18", "mobilenet_v2", "squeezenet1_1",
                                          "transformer_encoder", "lstm"};

// The largest |a - b| over the largest |b|.
double relative_error(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to_vector<float>(), y = b.to_vector<float>();
  if (x.size() != y.size()) return INFINITY;
  double diff = 0, scale = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    diff = std::max(diff, std::abs(double(x[i]) - y[i]));
    scale = std::max(scale, std::abs(double(y[i])));
  }
  return diff / std::max(scale, 1e-30);
}

void child(const std::string& folder, const std::string& name) {
  auto file = [&](const std::string& what, int batch) {
    return (fs::path(folder) / (name + "." + what + std::to_string(batch) + ".npy")).string();
  };
  std::vector<Tensor> inputs(33);
  for (int batch : {1, 2, 32})
    inputs[size_t(batch)] = serialization::read_npy(file("input", batch));
  using Clock = std::chrono::steady_clock;
  auto ms_since = [](Clock::time_point begin) {
    return std::chrono::duration<double, std::milli>(Clock::now() - begin).count();
  };
  Clock::time_point begin = Clock::now();
  const LoadedModel model = import_onnx((fs::path(folder) / (name + ".onnx")).string());
  bench::emit("load_ms", ms_since(begin));
  auto run = [&](int batch) { model.run({inputs[size_t(batch)]})[0].wait_to_read(); };
  begin = Clock::now();
  run(1);
  bench::emit("first_call_ms", ms_since(begin));
  // The same calls as bench/onnx/peer.py's.
  for (auto [batch, calls] : {std::pair{1, 20}, std::pair{32, 5}}) {
    run(batch);  // A new batch size instantiates and plans once; not a steady call.
    std::vector<double> samples;
    for (int i = 0; i < calls; ++i) {
      begin = Clock::now();
      run(batch);
      samples.push_back(ms_since(begin));
    }
    bench::emit("batch" + std::to_string(batch) + "_ms", bench::median(samples));
  }
  for (int batch : {1, 2, 32}) {
    const Tensor y = model.run({inputs[size_t(batch)]})[0];
    bench::emit("error_batch" + std::to_string(batch),
                relative_error(y, serialization::read_npy(file("output", batch))));
  }
}

// The median of each figure over `runs` children.
bench::Results median_of(const std::string& command, int runs) {
  std::map<std::string, std::vector<double>> all;
  for (int r = 0; r < runs; ++r) {
    if (std::optional<bench::Results> got = bench::run_child(command)) {
      for (const auto& [key, value] : *got) all[key].push_back(value);
    }
  }
  bench::Results medians;
  for (auto& [key, values] : all) medians[key] = bench::median(values);
  return medians;
}

}  // namespace

int main(int argc, char** argv) {
  if (bench::has_flag(argc, argv, "--child")) {
    child(bench::flag(argc, argv, "--child", ""), argv[argc - 1]);
    return 0;
  }
  const int runs = std::atoi(bench::flag(argc, argv, "--runs", "3").c_str());
  const std::string folder = bench::flag(argc, argv, "--models", bench::self_dir() + "onnx_models");
  const std::string source = TANDEM_SOURCE_DIR;
  std::printf("bench_onnx: PyTorch's ONNX exports run by Tandem, onnxruntime and PyTorch\n");
  if (!fs::exists(fs::path(folder) / "lstm.onnx")) {
    const std::string export_command = "/usr/bin/python3 '" + source +
                                       "/bench/onnx/export_models.py' '" + folder +
                                       "' > /dev/null 2>&1";
    if (std::system(export_command.c_str()) != 0) {
      std::printf(
          "  (no models: bench/onnx/export_models.py needs Debian's python3-torch and "
          "python3-torchvision; tools/tandem.sh bench installs them)\n");
      return 0;
    }
  }
  const std::string peer = "'" + source + "/bench/onnx/peer.py'";
  const std::string venv = bench::self_dir() + "../../peers/bin/python";
  struct Runtime {
    std::string label, command;
  };
  std::printf("  %d fresh processes per row (median); ms; error: Tandem vs torch, relative\n",
              runs);
  std::printf("  %-20s %-22s %9s %11s %9s %10s\n", "model", "runtime", "load", "first call",
              "batch 1", "batch 32");
  for (const std::string& name : kModels) {
    const std::string args = " '" + folder + "' " + name;
    std::vector<Runtime> runtimes = {
        {"Tandem", "OMP_NUM_THREADS=2 " + bench::program_beside("bench_onnx") + " --child" + args}};
    if (access(venv.c_str(), X_OK) == 0) {
      runtimes.push_back(
          {"onnxruntime", "OMP_NUM_THREADS=2 '" + venv + "' " + peer + " ort" + args});
    }
    runtimes.push_back(
        {"torch 1.13 eager", "OMP_NUM_THREADS=2 /usr/bin/python3 " + peer + " eager" + args});
    runtimes.push_back({"torch 1.13 TorchScript",
                        "OMP_NUM_THREADS=2 /usr/bin/python3 " + peer + " script" + args});
    bench::Results tandem;
    for (const Runtime& runtime : runtimes) {
      const bench::Results r = median_of(runtime.command, runs);
      if (runtime.label == "Tandem") tandem = r;
      std::printf("  %-20s %-22s %9.2f %11.2f %9.2f %10.2f", name.c_str(), runtime.label.c_str(),
                  bench::get(r, "load_ms"), bench::get(r, "first_call_ms"),
                  bench::get(r, "batch1_ms"), bench::get(r, "batch32_ms"));
      if (runtime.label != "Tandem") {
        std::printf("   Tandem / it: batch 1 %.2fx, batch 32 %.2fx",
                    bench::get(tandem, "batch1_ms") / bench::get(r, "batch1_ms"),
                    bench::get(tandem, "batch32_ms") / bench::get(r, "batch32_ms"));
      }
      std::printf("\n");
    }
    std::printf("  %-20s error at batch 1 %.2g, 2 %.2g, 32 %.2g\n", name.c_str(),
                bench::get(tandem, "error_batch1"), bench::get(tandem, "error_batch2"),
                bench::get(tandem, "error_batch32"));
  }
  return 0;
}
