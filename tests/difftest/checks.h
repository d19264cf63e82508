// The differential checks: one model, every mode, one answer
// (tests/difftest/README.md).
//
//   std::optional<Mismatch> m = run_checks(random_model(7), {.scratch_dir = "/tmp/x"});
//   if (m) std::cerr << m->check << ": " << m->detail;
//
// Each check builds the model of the spec afresh (the same weights each
// time) and compares one mode with plain eager execution:
//   inference          eval, Module::hybridize, traced and replayed, at the
//                      traced batch size and another
//   training_forward   train mode without gradients: outputs, dropout masks
//                      and batch-norm running statistics, call after call
//   gradients          a hybridized (differentiable) forward: the gradients of
//                      every parameter and of the input
//   train_sgd          a hybridized whole training step, SGD with momentum:
//   train_adam         the loss of each step and the final weights and buffers
//                      (Adam's likewise); the batch is free and odd steps take
//                      one more sample, served by the first trace
//   export             export_model then tandem::load, at both batch sizes
//   reoptimize         the exported graph optimized again, as a loader that
//                      optimizes a second time would, against the exported one
//   other_process      tools/tandem-run on the exported files, at the other
//                      batch size (one model in eight: a process start costs
//                      more than all the other checks)
// A check that throws (an export refused, a replay that fails) fails too,
// with the error as its detail.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "tests/difftest/model_spec.h"

namespace tandem::difftest {

struct CheckOptions {
  // Where the export check writes its files (removed afterwards).
  std::string scratch_dir = "/tmp";
  // Steps of the training checks.
  int training_steps = 3;
};

struct Mismatch {
  std::string check;   // Its name, as in the list above.
  std::string detail;  // What differed: the tensor, element, both values; or the error.
};

// The checks' names, in the order run_checks runs them.
const std::vector<std::string>& check_names();

// Runs `check` on the model of `spec`.
std::optional<Mismatch> run_check(const std::string& check, const ModelSpec& spec,
                                  const CheckOptions& options);

// Runs every check; returns the first mismatch.
std::optional<Mismatch> run_checks(const ModelSpec& spec, const CheckOptions& options);

}  // namespace tandem::difftest
