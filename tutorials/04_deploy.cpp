// Tutorial 4: run an exported model in a program that has none of its code.
//
//   build/release/tutorials/02_train_fashion_mnist   # trains, then exports fashion_mnist_cnn.*
//   build/release/tutorials/04_deploy                # loads and runs it
//   build/release/tutorials/04_deploy fashion_mnist_mlp
//
// This program links only core, kernels, trace and serialization (see
// tutorials/CMakeLists.txt): no nn modules, no autograd, no optimizer, no
// model definition. Everything it runs comes from two files: the graph
// (fashion_mnist_cnn.json, readable) and the weights
// (fashion_mnist_cnn.<checksum>.params, the file the graph names).
//
// Steps:
//   1. Load the model and print its signature.
//   2. Read the test images the demo saved beside it (NumPy .npy files).
//   3. Run them as one batch and count correct predictions.
//   4. Time batch-1 calls, the latency a served request sees.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "core/error.h"
#include "serialization/model.h"
#include "serialization/npy.h"

using namespace tandem;

int main(int argc, char** argv) try {
  std::string path = "fashion_mnist_cnn";
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg != "--quick") path = arg;  // --quick (CI's smoke run) changes nothing here.
  }

  // 1. Load: both files are checked completely, the parameters become
  // constants of the graph, and the inference passes run (batch norm folds
  // into the convolutions' weights).
  auto start = std::chrono::steady_clock::now();
  LoadedModel model = load(path + ".json");
  double load_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::printf("loaded %s.json in %.1f ms (%zu nodes)\n", path.c_str(), load_ms,
              model.file().graph.nodes.size());
  for (const auto& spec : model.inputs()) {
    std::printf("  input  %s: %s%s\n", spec.name.c_str(),
                std::string(dtype_name(spec.dtype)).c_str(), spec.shape_text().c_str());
  }
  for (const auto& spec : model.outputs()) {
    std::printf("  output %s: %s%s\n", spec.name.c_str(),
                std::string(dtype_name(spec.dtype)).c_str(), spec.shape_text().c_str());
  }

  // 2. The images (float32 [100, 1, 28, 28], already normalized) and labels.
  Tensor images = serialization::read_npy(path + "_images.npy");
  std::vector<int64_t> labels = serialization::read_npy(path + "_labels.npy").to_vector<int64_t>();

  // 3. One call for the whole batch; reading the logits waits for it.
  std::vector<float> logits = model.run({images})[0].to_vector<float>();
  const size_t classes = logits.size() / labels.size();
  int correct = 0;
  for (size_t i = 0; i < labels.size(); ++i) {
    auto row = logits.begin() + static_cast<std::ptrdiff_t>(i * classes);
    correct += std::max_element(row, row + static_cast<std::ptrdiff_t>(classes)) - row == labels[i];
  }
  std::printf("%d of %zu test images classified correctly\n", correct, labels.size());

  // 4. Batch-1 latency: a new batch size, so the first call plans the graph
  // for it; later calls replay that plan.
  Tensor one = images.slice(0, 1);
  std::vector<double> ms;
  for (int call = 0; call < 50; ++call) {
    auto t0 = std::chrono::steady_clock::now();
    model.run({one})[0].wait_to_read();
    ms.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  double first = ms.front();
  std::sort(ms.begin() + 1, ms.end());
  std::printf("batch-1 latency: first call %.2f ms (plans batch size 1), then median %.3f ms\n",
              first, ms[ms.size() / 2]);
  return 0;
} catch (const tandem::Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
