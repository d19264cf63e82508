// The optimization pipeline: the passes (pass.h), in order, each verified.
//
//   trace::optimize(graph);                       // training or inference graphs
//   trace::optimize(graph, {.inference = true});  // also folds what only inference may
//
// Every pass is one file in this folder with its own tests; this file only
// orders them. One pass can open work for another that ran before it
// (constant folding leaves the constants it read unread, for dead code), so
// the passes run in a cycle until a full lap of them changes nothing: the
// graph optimize() returns is one that optimizing again leaves as it is.
// After each pass the graph is verified (graph.h), so a pass that breaks an
// invariant is named at once.
//
// With TANDEM_DUMP_GRAPHS=dir set, the graph is written before the first
// pass and after each one as dir/<graph name>.<step>.<pass>.{txt,dot}, and
// what each pass changed as dir/<graph name>.passes.txt; the name with any
// '/' (or other character a file name cannot hold) written as '_'. A dump
// that cannot be written is a tandem::Error.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "trace/graph.h"
#include "trace/passes/pass.h"

namespace tandem::trace {

struct OptimizeOptions {
  // The graph computes inference only: passes may assume parameters do not
  // change between calls of this graph (e.g. fold batch norm into a conv).
  bool inference = false;
  // Names the dumps of TANDEM_DUMP_GRAPHS.
  std::string name = "graph";
};

// One run of one pass, as optimize() reports it.
struct PassRun {
  std::string pass;  // Pass::name().
  int changes = 0;   // What Pass::run returned.
  size_t nodes = 0;  // The graph's nodes after the run.
};

// The passes optimize() cycles through for `options`, in order.
std::vector<std::unique_ptr<Pass>> optimization_passes(const OptimizeOptions& options);

// Optimizes `graph` in place; returns every pass run, in order.
std::vector<PassRun> optimize(Graph& graph, const OptimizeOptions& options = {});

}  // namespace tandem::trace
