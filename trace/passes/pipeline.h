// The optimization pipeline: the passes, in order, each verified.
//
//   trace::optimize(graph);                       // training or inference graphs
//   trace::optimize(graph, {.inference = true});  // also folds what only inference may
//
// Every pass is one file in this folder with its own tests; this file only
// orders them. After each pass the graph is verified (graph.h), so a pass
// that breaks an invariant is named at once. With TANDEM_DUMP_GRAPHS=dir set,
// the graph is written before the first pass and after each one as
// dir/<graph name>.<step>.<pass>.{txt,dot}, the name with any '/' (or other
// character a file name cannot hold) written as '_'; a dump that cannot be
// written is a tandem::Error.
#pragma once

#include <string>

#include "trace/graph.h"

namespace tandem::trace {

struct OptimizeOptions {
  // The graph computes inference only: passes may assume parameters do not
  // change between calls of this graph (e.g. fold batch norm into a conv).
  bool inference = false;
  // Names the dumps of TANDEM_DUMP_GRAPHS.
  std::string name = "graph";
};

void optimize(Graph& graph, const OptimizeOptions& options = {});

}  // namespace tandem::trace
