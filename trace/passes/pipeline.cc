#include "trace/passes/pipeline.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "trace/passes/activation_fusion.h"
#include "trace/passes/batch_norm_folding.h"
#include "trace/passes/common_subexpression.h"
#include "trace/passes/constant_folding.h"
#include "trace/passes/dead_code.h"
#include "trace/passes/elementwise_fusion.h"

namespace tandem::trace {
namespace {

// A graph's name as one file-name component: a name like "net/encoder"
// would otherwise point into a folder that does not exist (and "../x" out of
// the dump folder).
std::string file_name_part(const std::string& name) {
  std::string part = name;
  for (char& c : part) {
    if (c == '/' || c == '\\' || c == '\0' || static_cast<unsigned char>(c) < 0x20) c = '_';
  }
  if (part.empty() || part == "." || part == "..") part = "graph";
  // A loaded model's name is its file's path, which may be longer than a
  // file name may be (255 bytes, with the step and pass still to come).
  constexpr size_t kLongest = 192;
  if (part.size() > kLongest) part = part.substr(part.size() - kLongest);
  return part;
}

void write_dump(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  out.close();
  TANDEM_CHECK(out.good(), "TANDEM_DUMP_GRAPHS: cannot write '", path, "'");
}

// The folder TANDEM_DUMP_GRAPHS names, created; empty when it is not set.
std::string dump_folder() {
  const char* dir = std::getenv("TANDEM_DUMP_GRAPHS");
  if (dir == nullptr || *dir == '\0') return {};
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  TANDEM_CHECK(!error, "TANDEM_DUMP_GRAPHS: cannot create the folder '", dir,
               "': ", error.message());
  return dir;
}

void dump_graph(const Graph& graph, const std::string& base, size_t step, std::string_view pass) {
  const std::string path = str_cat(base, ".", step, ".", pass);
  write_dump(path + ".txt", to_text(graph));
  write_dump(path + ".dot", to_dot(graph));
}

void dump_pass_runs(const std::vector<PassRun>& runs, const std::string& base) {
  std::ostringstream text;
  text << "# step pass changes nodes-after: each pass run of one optimize(), in order\n";
  for (size_t step = 0; step < runs.size(); ++step) {
    text << step + 1 << " " << runs[step].pass << " " << runs[step].changes << " "
         << runs[step].nodes << "\n";
  }
  write_dump(base + ".passes.txt", text.str());
}

}  // namespace

std::vector<std::unique_ptr<Pass>> optimization_passes(const OptimizeOptions& options) {
  // Dead code goes first (less to look at). Batch-norm folding (inference
  // only) comes before the rest, which clean up after it. Cse comes before
  // activation fusion, since merging two equal activations of one layer
  // leaves the layer the single reader that fusion needs, and before
  // constant folding, so that equal creation nodes (e.g. the eps each folded
  // batch norm makes) fold into one constant rather than several that cse
  // could no longer merge. Activation fusion comes before elementwise fusion,
  // which would otherwise take the activation into a group. Elementwise
  // fusion is the last rewrite: after cse, which could no longer merge equal
  // ops once they sit inside different fused programs, and after constant
  // folding, so that a chain over constants becomes one constant.
  std::vector<std::unique_ptr<Pass>> passes;
  passes.push_back(std::make_unique<DeadCodeElimination>());
  if (options.inference) {
    passes.push_back(std::make_unique<FixedPoint>(std::make_unique<BatchNormFolding>()));
  }
  passes.push_back(std::make_unique<CommonSubexpressionElimination>());
  passes.push_back(std::make_unique<ActivationFusion>());
  passes.push_back(std::make_unique<ConstantFolding>());
  passes.push_back(std::make_unique<ElementwiseFusion>());
  return passes;
}

std::vector<PassRun> optimize(Graph& graph, const OptimizeOptions& options) {
  verify(graph, "before optimizing");
  const std::string folder = dump_folder();
  const std::string base = folder.empty() ? "" : str_cat(folder, "/", file_name_part(options.name));
  if (!folder.empty()) dump_graph(graph, base, 0, "traced");

  std::vector<std::unique_ptr<Pass>> passes = optimization_passes(options);
  std::vector<PassRun> runs;
  // Cycles until every pass has run once, in a row, without changing the
  // graph. Every change shrinks something no pass grows back (the nodes, the
  // batch norms), so the cycle ends; the bound turns a pass that undoes
  // another's work into an error instead of a hang.
  const size_t max_runs = passes.size() * FixedPoint::kMaxRounds;
  for (size_t unchanged = 0, next = 0; unchanged < passes.size();
       next = (next + 1) % passes.size()) {
    Pass& pass = *passes[next];
    const int changes = pass.run(graph);
    verify(graph, str_cat("after ", pass.name()));
    runs.push_back({std::string(pass.name()), changes, graph.nodes.size()});
    if (!folder.empty()) dump_graph(graph, base, runs.size(), pass.name());
    unchanged = changes == 0 ? unchanged + 1 : 0;
    TANDEM_INTERNAL_ASSERT(runs.size() < max_runs, "the passes did not settle after ", runs.size(),
                           " runs");
  }
  if (!folder.empty()) dump_pass_runs(runs, base);
  return runs;
}

}  // namespace tandem::trace
