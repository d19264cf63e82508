// A graph pass: one named rewrite of a Graph, run by the pipeline
// (pipeline.h), which verifies the graph after each pass and reports what
// each one changed.
//
//   DeadCodeElimination dce;
//   int removed = dce.run(graph);  // 0: the graph is exactly as it was
//
// The contract every pass keeps, and tests/trace/pass_contract_test.cc
// checks for each: it leaves a verified graph that computes the same values,
// and it is idempotent (a second run reports 0 changes and changes nothing).
// A rewrite that can enable itself again (batch-norm folding of a chain) is
// wrapped in FixedPoint, so that the pass the pipeline runs still is.
#pragma once

#include <memory>
#include <string_view>

#include "trace/graph.h"

namespace tandem::trace {

class Pass {
 public:
  virtual ~Pass() = default;

  // Short and stable: names the pass in TANDEM_DUMP_GRAPHS files and in
  // verification errors.
  virtual std::string_view name() const = 0;

  // Rewrites `graph` in place and returns how many changes it made (each
  // pass says what it counts: nodes removed, folded or fused); 0 exactly
  // when the graph is unchanged.
  virtual int run(Graph& graph) = 0;
};

// Runs a pass until a run changes nothing; reports the changes of all runs.
// A pass that still changes the graph after kMaxRounds runs never settles,
// which is a bug in it: a tandem::Error naming it.
class FixedPoint final : public Pass {
 public:
  static constexpr int kMaxRounds = 64;

  explicit FixedPoint(std::unique_ptr<Pass> pass) : pass_(std::move(pass)) {}

  std::string_view name() const override { return pass_->name(); }
  int run(Graph& graph) override;

 private:
  std::unique_ptr<Pass> pass_;
};

}  // namespace tandem::trace
