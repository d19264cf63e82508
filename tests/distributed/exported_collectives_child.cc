// One model, three modes, with collectives: a function holding every
// collective, run eagerly and hybridized on each rank, exported, then run by
// tools/tandem-run in other processes (under mpirun and without it) must give
// each rank the same outputs. ctest drives it through
// run_exported_collectives.sh:
//
//   mpirun -np 3 exported_collectives_child export DIR   # eager vs hybridized; writes
//                                                        # DIR/step.json, inputs, expectations
//   mpirun -np 3 tandem-run DIR/step.json --input DIR/x_rank{rank}.npy --output DIR/out
//   exported_collectives_child check DIR/out 3           # tandem-run's outputs vs eager
//
// Prints "exported collectives: ... passed" or "... failed: ..." for ctest.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.h"
#include "eager/hybridize.h"
#include "eager/ops.h"
#include "serialization/npy.h"

#include "distributed/collectives.h"
#include "distributed/distributed.h"

using namespace tandem;

namespace {

const std::vector<std::string> kOutputs = {"mean", "gathered", "broadcast", "scattered", "largest"};

// Every collective of the world, on values that differ per rank, the last
// rank broadcasting; `w` is the model's state, the same on every rank.
// reduce_scatter takes x^T x, whose first dimension (6) every world size
// here divides, whatever the batch.
std::vector<Tensor> step(const Tensor& x, const Tensor& w) {
  Tensor h = tanh(matmul(x, w));
  const int last = distributed::world_size() - 1;
  return {distributed::all_reduce(h, distributed::ReduceOp::kMean), distributed::all_gather(x),
          distributed::broadcast(h, last),
          distributed::reduce_scatter(matmul(transpose(x, {1, 0}), x)),
          distributed::all_reduce(h, distributed::ReduceOp::kMax)};
}

double largest_difference(const Tensor& a, const Tensor& b) {
  TANDEM_CHECK(a.shape() == b.shape(), "shapes ", a.shape().to_string(), " and ",
               b.shape().to_string());
  const std::vector<float> u = a.to_vector<float>(), v = b.to_vector<float>();
  double largest = 0;
  for (size_t i = 0; i < u.size(); ++i) largest = std::max(largest, std::abs(double{u[i]} - v[i]));
  return largest;
}

std::string check_close(const std::vector<Tensor>& got, const std::vector<Tensor>& expected,
                        const std::string& what) {
  for (size_t o = 0; o < expected.size(); ++o) {
    const double difference = largest_difference(got[o], expected[o]);
    if (!(difference <= 1e-5)) {
      return str_cat(what, ": output ", kOutputs[o], " differs by ", difference);
    }
  }
  return "";
}

int export_step(const std::filesystem::path& dir) {
  distributed::init();
  const int me = distributed::rank(), size = distributed::world_size();
  manual_seed(11);
  const Tensor w = randn({6, 5});  // The same on every rank: the same seed.
  manual_seed(100 + static_cast<uint64_t>(me));
  const Tensor x = randn({2 * size, 6});
  const std::vector<Tensor> eager = step(x, w);
  HybridFunction hybrid([&](const std::vector<Tensor>& in) { return step(in[0], w); });
  hybrid({x});                                       // Traces.
  const std::vector<Tensor> replayed = hybrid({x});  // Replays the graph.
  std::string problem = check_close(replayed, eager, "hybridized against eager");
  // Every rank exports: export_model runs the loaded graph against the
  // traced one, which takes every rank's collectives. Rank 0's is the model.
  hybrid.export_model((dir / (me == 0 ? "step" : str_cat("step_rank", me))).string(), {{"w", w}});
  serialization::write_npy((dir / str_cat("x_rank", me, ".npy")).string(), x);
  for (size_t o = 0; o < eager.size(); ++o) {
    serialization::write_npy(
        (dir / str_cat("expected_rank", me, "_", kOutputs[o], ".npy")).string(), eager[o]);
  }
  distributed::barrier();
  std::printf("rank %d: exported collectives: %s\n", me,
              problem.empty() ? "export passed" : ("export failed: " + problem).c_str());
  return problem.empty() ? 0 : 1;
}

int check_outputs(const std::filesystem::path& out, const std::filesystem::path& dir, int size) {
  std::string problem;
  for (int r = 0; r < size && problem.empty(); ++r) {
    std::vector<Tensor> got, expected;
    for (size_t o = 0; o < kOutputs.size(); ++o) {
      const std::string& name = kOutputs[o];
      // The exported graph names its outputs by position.
      got.push_back(serialization::read_npy(
          (out / str_cat("rank", r) / str_cat("output", o, ".npy")).string()));
      expected.push_back(
          serialization::read_npy((dir / str_cat("expected_rank", r, "_", name, ".npy")).string()));
    }
    problem = check_close(got, expected, str_cat("rank ", r, " of tandem-run against eager"));
  }
  std::printf("exported collectives: %s\n",
              problem.empty() ? "check passed" : ("check failed: " + problem).c_str());
  return problem.empty() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) try {
  const std::string mode = argc > 2 ? argv[1] : "";
  if (mode == "export") return export_step(argv[2]);
  if (mode == "check" && argc == 5) return check_outputs(argv[2], argv[3], std::atoi(argv[4]));
  std::fprintf(stderr, "usage: exported_collectives_child export DIR | check OUT DIR RANKS\n");
  return 2;
} catch (const std::exception& e) {
  std::printf("exported collectives: failed: %s\n", e.what());
  return 1;
}
