// Per-op eager overhead on tiny tensors, Tandem vs libtorch: what a user pays
// for one op call when the arithmetic itself is nearly free. Target: Tandem's
// time per op <= 0.5x libtorch's.
//
//   build/release/bench/bench_ops     # ~10 s
//
// Each figure: kTinyOpsPerLoop (10000) calls of `y = op(x)` on the same x,
// then one wait for y and for everything pushed; the time per op is the
// median over kTinyOpRuns loops (bench/harness.h). Tandem goes through its
// public API (tandem::add etc.: registry lookup, shape inference on the
// caller, output allocation, push to the threaded engine, kernel on a
// worker). The "naive" column runs the same calls on the naive engine (each
// kernel inline, at push time): the dispatch cost without any threads, which
// separates what the frontend costs from what the engine's hand-off costs.
// libtorch runs the same loop with torch::NoGradGuard, 2 intra-op threads and
// 1 inter-op thread (bench/torch/torch_peer.cc, Note [libtorch
// configurations] in harness.h).
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "bench/harness.h"
#include "tandem/tandem.h"

namespace {

using tandem::Tensor;

Tensor apply(bench::TinyOp op, const Tensor& x) {
  switch (op) {
    case bench::TinyOp::kAddScalar:
      return tandem::add(x, 1.0);
    case bench::TinyOp::kMul:
      return tandem::mul(x, x);
    case bench::TinyOp::kRelu:
      return tandem::relu(x);
    case bench::TinyOp::kSum:
      return tandem::sum(x);
    case bench::TinyOp::kMatmul:
      return tandem::matmul(x, x);
  }
  return Tensor();
}

double tandem_ns_per_op(const bench::TinyOpCase& c) {
  Tensor x = tandem::full(c.shape, 0.5);
  tandem::engine::current().wait_all();
  return bench::tiny_op_ns([&] {
    Tensor y;
    for (int i = 0; i < bench::kTinyOpsPerLoop; ++i) y = apply(c.op, x);
    y.wait_to_read();
    // Independent ops may finish out of order: the loop ends when all have.
    tandem::engine::current().wait_all();
  });
}

}  // namespace

int main() {
  using tandem::engine::EngineKind;
  const std::vector<bench::TinyOpCase>& cases = bench::tiny_op_cases();
  std::vector<double> threaded, naive;
  for (const bench::TinyOpCase& c : cases) threaded.push_back(tandem_ns_per_op(c));
  tandem::engine::configure(EngineKind::kNaive);
  for (const bench::TinyOpCase& c : cases) naive.push_back(tandem_ns_per_op(c));
  tandem::engine::configure(EngineKind::kThreaded);

  std::vector<bench::TorchConfig> configs = bench::torch_configs();
  std::optional<bench::Results> torch;
  if (!configs.empty()) torch = bench::run_torch_peer(configs.front(), "ops");

  std::printf(
      "Per-op eager overhead: %d x `y = op(x)` then one wait, ns per op (median of %d loops)\n",
      bench::kTinyOpsPerLoop, bench::kTinyOpRuns);
  std::printf("  %-24s %10s %10s", "op", "Tandem", "naive eng.");
  if (torch) std::printf(" %10s %16s", "libtorch", "Tandem/libtorch");
  std::printf("\n");
  for (size_t i = 0; i < cases.size(); ++i) {
    std::printf("  %-24s %10.0f %10.0f", cases[i].label, threaded[i], naive[i]);
    if (torch) {
      double theirs = bench::get(*torch, cases[i].key);
      std::printf(" %10.0f %15.2fx", theirs, threaded[i] / theirs);
    }
    std::printf("\n");
  }
  if (torch) {
    std::printf("  target: Tandem / libtorch <= 0.50x (libtorch: %s, NoGradGuard)\n",
                configs.front().label.c_str());
  }
  if (configs.empty()) bench::print_no_peer_note();
  return 0;
}
