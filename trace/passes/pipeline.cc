#include "trace/passes/pipeline.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "trace/passes/activation_fusion.h"
#include "trace/passes/batch_norm_folding.h"
#include "trace/passes/common_subexpression.h"
#include "trace/passes/constant_folding.h"
#include "trace/passes/dead_code.h"
#include "trace/passes/elementwise_fusion.h"

namespace tandem::trace {
namespace {

struct Pass {
  const char* name;
  void (*run)(Graph& graph, const OptimizeOptions& options);
};

// In order. Dead code goes first (less to look at) and again after passes
// that leave nodes without readers. Batch-norm folding (inference only) comes
// before the rest, which clean up after it; cse comes before constant folding
// so that equal creation nodes (e.g. the eps each folded batch norm makes)
// fold into one constant rather than several that cse could no longer merge.
constexpr Pass kPasses[] = {
    {"dead_code", [](Graph& g, const OptimizeOptions&) { eliminate_dead_code(g); }},
    {"batch_norm_folding", [](Graph& g, const OptimizeOptions& o) { fold_batch_norms(g, o); }},
    // After batch-norm folding, which leaves conv -> relu pairs, and before
    // elementwise fusion, which would otherwise take the relu into a group.
    {"activation_fusion", [](Graph& g, const OptimizeOptions&) { fuse_activations(g); }},
    {"cse", [](Graph& g, const OptimizeOptions&) { eliminate_common_subexpressions(g); }},
    {"constant_folding", [](Graph& g, const OptimizeOptions&) { fold_constants(g); }},
    // Last of the rewrites: after cse, which could no longer merge equal ops
    // once they sit inside different fused programs, and after constant
    // folding, so that a chain over constants becomes one constant.
    {"elementwise_fusion", [](Graph& g, const OptimizeOptions&) { fuse_elementwise(g); }},
    {"dead_code", [](Graph& g, const OptimizeOptions&) { eliminate_dead_code(g); }},
};

void dump(const Graph& graph, const OptimizeOptions& options, int step, const char* pass) {
  const char* dir = std::getenv("TANDEM_DUMP_GRAPHS");
  if (dir == nullptr || *dir == '\0') return;
  std::filesystem::create_directories(dir);
  const std::string base = str_cat(dir, "/", options.name, ".", step, ".", pass);
  std::ofstream(base + ".txt") << to_text(graph);
  std::ofstream(base + ".dot") << to_dot(graph);
}

}  // namespace

void optimize(Graph& graph, const OptimizeOptions& options) {
  verify(graph, "before optimizing");
  dump(graph, options, 0, "traced");
  int step = 1;
  for (const Pass& pass : kPasses) {
    pass.run(graph, options);
    verify(graph, str_cat("after ", pass.name));
    dump(graph, options, step++, pass.name);
  }
}

}  // namespace tandem::trace
