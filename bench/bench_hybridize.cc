// Hybridize vs eager on this machine (issue 4's benchmark list):
//   (a) replay overhead per node on a chain of tiny ops (target <= 100 ns);
//   (b) an op-heavy small model: an Elman cell unrolled 32 steps at hidden
//       size 64, batch 1 (target: hybridized >= 2x eager);
//   (c) batch-1 inference latency of the tutorial's MLP and CNN;
//   (d) peak intermediate memory with and without memory planning (target:
//       planned <= 0.6x unplanned);
//   (e) training samples/s of the tutorial's CNN, eager vs one hybridized
//       training step (target: hybridized faster);
//   (f) elementwise fusion: two 4-op chains on 1e6 floats, graphs replayed
//       with and without the optimization passes.
// Each figure is a median over repetitions; eager and hybridized run side by
// side in one process. Usage: bench_hybridize [--quick]
#include <cstdio>
#include <functional>
#include <memory>
#include <vector>

#include "bench/harness.h"
#include "bench/tutorial_models.h"
#include "core/engine/engine.h"
#include "eager/autograd.h"
#include "eager/hybridize.h"
#include "eager/nn/nn.h"
#include "eager/ops.h"
#include "eager/optim/optim.h"

using namespace tandem;

namespace {

// Median wall time of `fn` (which must wait for its own results), in ns.
double time_ns(int repetitions, const std::function<void()>& fn) {
  fn();  // Warm up (and trace, for hybridized functions).
  std::vector<double> samples;
  for (int r = 0; r < repetitions; ++r) {
    auto begin = bench::Clock::now();
    fn();
    samples.push_back(bench::ns_between(begin, bench::Clock::now()));
  }
  return bench::median(samples);
}

void replay_overhead(int repetitions) {
  constexpr int kNodes = 1000;
  Tensor x = randn({1});
  auto chain = [](const std::vector<Tensor>& in) {
    Tensor v = in[0];
    for (int i = 0; i < kNodes; ++i) v = (i % 2) ? neg(v) : abs(v);
    return std::vector<Tensor>{v};
  };
  HybridFunction hybrid(chain, {.optimize = false});  // Keep every node.
  NoGradGuard no_grad;
  double eager = time_ns(repetitions, [&] { chain({x})[0].wait_to_read(); });
  double graph = time_ns(repetitions, [&] { hybrid({x})[0].wait_to_read(); });
  std::printf("(a) chain of %d tiny ops: eager %.0f ns/op, replay %.0f ns/node (target <= 100)\n",
              kNodes, eager / kNodes, graph / kNodes);
}

struct Elman : nn::Module {
  Elman() {
    in = register_module("in", std::make_shared<nn::Linear>(64, 64));
    hidden = register_module("hidden", std::make_shared<nn::Linear>(64, 64, false));
  }
  Tensor forward(const Tensor& xs) override {
    Tensor h = zeros({xs.shape()[1], 64});
    for (int64_t t = 0; t < xs.shape()[0]; ++t) {
      h = tanh(add(in->forward(xs[t]), hidden->forward(h)));
    }
    return h;
  }
  std::shared_ptr<nn::Linear> in, hidden;
};

// Eager and hybridized latency of one module on one input.
void latency(const char* label, nn::Module& model, const Tensor& x, int repetitions) {
  model.eval();
  NoGradGuard no_grad;
  double eager = time_ns(repetitions, [&] { model.forward(x).wait_to_read(); });
  model.hybridize();
  double graph = time_ns(repetitions, [&] { model(x).wait_to_read(); });
  const trace::MemoryPlan& plan = model.hybrid_forward()->last_executor()->memory_plan();
  std::printf(
      "%s: eager %.1f us, hybridized %.1f us: %.2fx; graph %zu nodes, intermediates "
      "planned %.1f KiB vs %.1f KiB unplanned (%.2fx)\n",
      label, eager / 1e3, graph / 1e3, eager / graph,
      model.hybrid_forward()->last_executor()->graph().nodes.size(), plan.planned_bytes / 1024.0,
      plan.unplanned_bytes / 1024.0,
      plan.unplanned_bytes ? double(plan.planned_bytes) / plan.unplanned_bytes : 0.0);
  model.hybridize(false);
}

// Samples/s of `steps` training steps of the tutorial CNN (Adam, batch 128),
// eager or through one hybridized step; the loss is read every 20 steps as
// the tutorial does.
double train_samples_per_s(bool hybridized, int steps, size_t* planned, size_t* unplanned) {
  manual_seed(1);
  auto model = bench::make_tutorial_cnn();
  optim::Adam opt(model->parameters(), optim::AdamOptions{.lr = 1e-3});
  HybridFunction::Fn fn = bench::training_step(*model, opt);
  HybridFunction step(fn);
  std::vector<Tensor> xs, ys;
  for (int i = 0; i < 4; ++i) {
    xs.push_back(randn({128, 1, 28, 28}));
    std::vector<int64_t> labels(128);
    for (int j = 0; j < 128; ++j) labels[j] = (i * 7 + j) % 10;
    ys.push_back(Tensor::from_vector<int64_t>(labels, {128}));
  }
  auto run = [&](int i) {
    return hybridized ? step({xs[i % 4], ys[i % 4]})[0] : fn({xs[i % 4], ys[i % 4]})[0];
  };
  for (int i = 0; i < 3; ++i) run(i).wait_to_read();  // Warm up, trace.
  auto begin = bench::Clock::now();
  for (int i = 0; i < steps; ++i) {
    Tensor loss = run(i);
    if (i % 20 == 19 || i == steps - 1) loss.wait_to_read();
  }
  engine::current().wait_all();
  double seconds = bench::ns_between(begin, bench::Clock::now()) / 1e9;
  if (hybridized) {
    *planned = step.last_executor()->memory_plan().planned_bytes;
    *unplanned = step.last_executor()->memory_plan().unplanned_bytes;
  }
  return steps * 128 / seconds;
}

void fusion(int repetitions) {
  Tensor x = randn({1000000}), s = randn({}), y = randn({1000000});
  struct Chain {
    const char* name;
    HybridFunction::Fn fn;
  };
  const Chain chains[] = {
      {"relu(exp(x)*s+y)",
       [](const std::vector<Tensor>& in) {
         return std::vector<Tensor>{relu(add(mul(exp(in[0]), in[1]), in[2]))};
       }},
      {"square(relu(x*s+y))",
       [](const std::vector<Tensor>& in) {
         return std::vector<Tensor>{square(relu(add(mul(in[0], in[1]), in[2])))};
       }},
  };
  NoGradGuard no_grad;
  for (const Chain& chain : chains) {
    HybridFunction fused(chain.fn), unfused(chain.fn, {.optimize = false});
    double plain = time_ns(repetitions, [&] { unfused({x, s, y})[0].wait_to_read(); });
    double with_fusion = time_ns(repetitions, [&] { fused({x, s, y})[0].wait_to_read(); });
    std::printf("(f) %s on 1e6 float32: unfused %.2f ms, fused %.2f ms: %.2fx\n", chain.name,
                plain / 1e6, with_fusion / 1e6, plain / with_fusion);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = bench::has_flag(argc, argv, "--quick");
  const int reps = quick ? 5 : 31;
  std::printf("bench_hybridize: eager vs hybridized, medians of %d runs\n", reps);
  replay_overhead(reps);
  {
    manual_seed(1);
    Elman cell;
    latency("(b) Elman cell, 32 steps, hidden 64, batch 1", cell, randn({32, 1, 64}), reps);
  }
  {
    manual_seed(1);
    auto mlp = bench::make_tutorial_mlp();
    latency("(c) MLP batch 1", *mlp, randn({1, 1, 28, 28}), reps);
    auto cnn = bench::make_tutorial_cnn();
    latency("(c) CNN batch 1", *cnn, randn({1, 1, 28, 28}), reps);
  }
  fusion(reps);
  const int steps = quick ? 10 : 60;
  size_t planned = 0, unplanned = 0;
  double eager = train_samples_per_s(false, steps, &planned, &unplanned);
  double graph = train_samples_per_s(true, steps, &planned, &unplanned);
  std::printf(
      "(e) CNN training, batch 128, Adam, %d steps: eager %.0f samples/s, hybridized %.0f "
      "samples/s: %.2fx\n",
      steps, eager, graph, graph / eager);
  std::printf(
      "(d) CNN training step graph: intermediates planned %.1f MiB vs %.1f MiB unplanned "
      "(%.2fx; target <= 0.6x)\n",
      planned / 1048576.0, unplanned / 1048576.0, unplanned ? double(planned) / unplanned : 0.0);
  return 0;
}
