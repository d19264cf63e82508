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

void dump(const Graph& graph, const OptimizeOptions& options, int step, const char* pass) {
  const char* dir = std::getenv("TANDEM_DUMP_GRAPHS");
  if (dir == nullptr || *dir == '\0') return;
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  TANDEM_CHECK(!error, "TANDEM_DUMP_GRAPHS: cannot create the folder '", dir,
               "': ", error.message());
  const std::string base = str_cat(dir, "/", file_name_part(options.name), ".", step, ".", pass);
  write_dump(base + ".txt", to_text(graph));
  write_dump(base + ".dot", to_dot(graph));
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
