// Tutorial 3: one switch from eager to a graph, on the demo's CNN.
//
// The same model code runs eagerly (every op pushed as it is called) or, after
// hybridize, as a traced graph that is optimized once and replayed. This
// program takes the CNN of tutorial 2 and real Fashion-MNIST batches and shows:
//   1. inference: model->hybridize(), timed before and after, and the
//      optimized graph written as a Graphviz DOT picture;
//   2. training: tandem::hybridize(step) on the whole step (forward, loss,
//      backward, Adam), timed before and after, with the same losses;
//   3. what a trace cannot follow, and the error that says so.
//
//   build/release/tutorials/03_hybridize                    # ~30 s
//   build/release/tutorials/03_hybridize --quick            # fewer steps (what CI runs)
//   dot -Tsvg hybridized_cnn.dot -o hybridized_cnn.svg      # the picture (Debian: graphviz)
//   TANDEM_DUMP_GRAPHS=/tmp/graphs build/release/tutorials/03_hybridize
//                                                           # the graph before/after each pass
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "tandem/tandem.h"

using namespace tandem;
using Clock = std::chrono::steady_clock;

namespace {

// The demo's CNN (tutorials/02_train_fashion_mnist.cpp).
std::shared_ptr<nn::Module> make_cnn() {
  return std::make_shared<nn::Sequential>(
      nn::Conv2d(1, 32, 3, 1, 1), nn::BatchNorm2d(32), nn::ReLU(), nn::MaxPool2d(2),
      nn::Conv2d(32, 64, 3, 1, 1), nn::BatchNorm2d(64), nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(),
      nn::Linear(64 * 7 * 7, 128), nn::ReLU(), nn::Dropout(0.25), nn::Linear(128, 10));
}

// Milliseconds per call of `fn` over `calls` calls, waiting for the last.
template <class Fn>
double ms_per_call(int calls, Fn fn) {
  auto start = Clock::now();
  Tensor last;
  for (int i = 0; i < calls; ++i) last = fn(i);
  last.wait_to_read();
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count() / calls;
}

}  // namespace

int main(int argc, char** argv) try {
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  manual_seed(0);
  data::FashionMnist fashion = data::load_fashion_mnist("train");
  std::vector<data::Batch> batches;  // Normalized as in tutorial 2.
  for (int64_t start = 0; start < 128 * 8; start += 128) {
    Tensor images = data::to_float(fashion.images.slice(start, start + 128), 1.0f / (255 * 0.3530f),
                                   -0.2860f / 0.3530f);
    batches.push_back({images.reshape({-1, 1, 28, 28}),
                       data::to_int64(fashion.labels.slice(start, start + 128))});
  }
  std::shared_ptr<nn::Module> model = make_cnn();

  // 1. Inference, batch 1. The first hybridized call traces (running
  // eagerly); later calls with the same input shape replay the graph, which
  // the passes optimized: batch norm folded into the convolutions, ReLUs
  // fused into them as oneDNN post-ops, buffers planned.
  const int calls = quick ? 20 : 200;
  model->eval();
  Tensor image = batches[0][0].slice(0, 1);
  {
    NoGradGuard no_grad;
    Tensor eager = model->forward(image);
    double eager_ms = ms_per_call(calls, [&](int) { return model->forward(image); });
    model->hybridize(true, {.inference = true});  // Parameters stay fixed while it runs.
    Tensor graph = (*model)(image);
    double graph_ms = ms_per_call(calls, [&](int) { return (*model)(image); });
    std::printf(
        "inference, batch 1: eager %.3f ms, hybridized %.3f ms per call (%.2fx); "
        "largest difference %.2g\n",
        eager_ms, graph_ms, eager_ms / graph_ms, max(abs(sub(graph, eager))).item<float>());
    const trace::Graph& optimized = model->hybrid_forward()->last_executor()->graph();
    std::ofstream("hybridized_cnn.dot") << trace::to_dot(optimized);
    std::printf("the optimized graph (%zu nodes; as a picture: hybridized_cnn.dot):\n%s",
                optimized.nodes.size(), trace::to_text(optimized).c_str());
  }
  model->hybridize(false);
  model->train();

  // 2. Training. The step reads parameters, gradients and Adam's state and
  // rebinds them in place (Tensor::assign_); the trace records all of it, so
  // replaying the graph trains the very same parameters. Two identical
  // models from one seed: eager and hybridized give the same losses.
  const int steps = quick ? 4 : 40;
  auto train = [&](bool hybridized) {
    manual_seed(1);
    std::shared_ptr<nn::Module> net = make_cnn();
    optim::Adam optimizer(net->parameters(), {.lr = 1e-3});
    HybridFunction::Fn step = [&](const std::vector<Tensor>& batch) {
      optimizer.zero_grad();
      Tensor loss = cross_entropy(net->forward(batch[0]), batch[1]);
      loss.backward();
      optimizer.step();
      return std::vector<Tensor>{loss};
    };
    HybridFunction traced(step, {.name = "train_step"});
    std::vector<float> losses;
    double ms = ms_per_call(steps, [&](int i) {
      const data::Batch& batch = batches[static_cast<size_t>(i) % batches.size()];
      Tensor loss = hybridized ? traced(batch)[0] : step(batch)[0];
      if (i % 10 == 0) losses.push_back(loss.item<float>());
      return loss;
    });
    return std::make_pair(ms, losses);
  };
  auto [eager_ms, eager_losses] = train(false);
  auto [graph_ms, graph_losses] = train(true);
  std::printf("training, batch 128: eager %.1f ms, hybridized %.1f ms per step (%.2fx)\n", eager_ms,
              graph_ms, eager_ms / graph_ms);
  for (size_t i = 0; i < eager_losses.size(); ++i) {
    std::printf("  step %2zu loss: eager %.5f, hybridized %.5f\n", i * 10, eager_losses[i],
                graph_losses[i]);
  }

  // 3. A branch on a value cannot be traced: the trace would freeze it. The
  // error names the line.
  auto branchy = hybridize([](const std::vector<Tensor>& in) {
    if (sum(in[0]).item<float>() > 0) return std::vector<Tensor>{in[0]};
    return std::vector<Tensor>{neg(in[0])};
  });
  try {
    branchy({image});
  } catch (const Error& e) {
    std::printf("as expected: %s\n", e.what());
  }
  engine::current().wait_all();
  return 0;
} catch (const Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
