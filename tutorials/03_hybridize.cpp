// Tutorial 3: one switch from eager to a graph.
//
// The same model code runs eagerly (every op pushed as it is called) or, after
// hybridize, as a traced graph that is optimized once and replayed. This
// program shows both switches and what they buy:
//   1. module.hybridize(): inference through a cached graph;
//   2. tandem::hybridize(step): a whole training step (forward, loss,
//      backward, optimizer) traced once and replayed, step for step equal to
//      eager training;
//   3. what a trace cannot follow, and the error that says so.
//
//   build/release/tutorials/03_hybridize            # ~1 s
//   TANDEM_DUMP_GRAPHS=/tmp/graphs build/release/tutorials/03_hybridize
//                                                   # also writes each pass's graph
#include <chrono>
#include <cstdio>
#include <memory>
#include <vector>

#include "tandem/tandem.h"

using namespace tandem;
using Clock = std::chrono::steady_clock;

namespace {

std::shared_ptr<nn::Sequential> make_model() {
  return std::make_shared<nn::Sequential>(nn::Linear(32, 64), nn::ReLU(), nn::Linear(64, 64),
                                          nn::GELU(), nn::Linear(64, 4));
}

// Microseconds per call of `fn`, over `calls` calls, waiting at the end.
template <class Fn>
double microseconds_per_call(int calls, Fn fn) {
  auto start = Clock::now();
  Tensor last;
  for (int i = 0; i < calls; ++i) last = fn();
  last.wait_to_read();
  return std::chrono::duration<double, std::micro>(Clock::now() - start).count() / calls;
}

}  // namespace

int main(int argc, char** argv) try {
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  const int calls = quick ? 50 : 500;
  manual_seed(0);

  // 1. Inference. The first call traces (running eagerly); later calls with
  // the same input shape replay the optimized graph.
  auto model = make_model();
  model->eval();
  Tensor x = randn({1, 32});
  {
    NoGradGuard no_grad;
    Tensor eager = model->forward(x);
    double eager_us = microseconds_per_call(calls, [&] { return model->forward(x); });
    model->hybridize();
    Tensor graph = (*model)(x);
    double graph_us = microseconds_per_call(calls, [&] { return (*model)(x); });
    Tensor difference = max(abs(sub(graph, eager)));
    std::printf(
        "inference, batch 1: eager %.1f us, hybridized %.1f us per call; max difference %g\n",
        eager_us, graph_us, difference.item<float>());
    std::printf("the graph (%zu nodes):\n%s",
                model->hybrid_forward()->last_executor()->graph().nodes.size(),
                trace::to_text(model->hybrid_forward()->last_executor()->graph()).c_str());
  }
  model->hybridize(false);
  model->train();

  // 2. Training. The step reads parameters, gradients and Adam's state and
  // rebinds them in place (Tensor::assign_); the trace records all of it,
  // so replaying the graph trains the very same parameters.
  optim::Adam optimizer(model->parameters(), {.lr = 1e-2});
  Tensor inputs = randn({64, 32});
  std::vector<int64_t> labels(64);
  for (int i = 0; i < 64; ++i) labels[i] = i % 4;  // Random inputs, fixed labels: memorize them.
  Tensor targets = Tensor::from_vector<int64_t>(labels, {64});
  auto step = hybridize([&](const std::vector<Tensor>& batch) {
    optimizer.zero_grad();
    Tensor loss = cross_entropy((*model)(batch[0]), batch[1]);
    loss.backward();
    optimizer.step();
    return std::vector<Tensor>{loss};
  });
  for (int i = 0; i < (quick ? 10 : 50); ++i) {
    Tensor loss = step({inputs, targets})[0];
    if (i % 10 == 0) std::printf("step %2d: loss %.4f\n", i, loss.item<float>());
  }
  std::printf("traced %lld time(s), replayed %lld times\n",
              static_cast<long long>(step.stats().traces),
              static_cast<long long>(step.stats().replays));

  // 3. A branch on a value cannot be traced: the trace would freeze it. The
  // error names the line.
  auto branchy = hybridize([](const std::vector<Tensor>& in) {
    if (sum(in[0]).item<float>() > 0) return std::vector<Tensor>{in[0]};
    return std::vector<Tensor>{neg(in[0])};
  });
  try {
    branchy({x});
  } catch (const Error& e) {
    std::printf("as expected: %s\n", e.what());
  }
  engine::current().wait_all();
  return 0;
} catch (const Error& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
