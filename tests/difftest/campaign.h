// A differential-testing campaign: many random models through every check,
// each failure shrunk to its smallest form (tests/difftest/README.md).
//
//   CampaignResult r = run_campaign({.first_seed = 0, .models = 300});
//   for (const Failure& f : r.failures) std::cerr << describe(f);
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "tests/difftest/checks.h"
#include "tests/difftest/model_spec.h"

namespace tandem::difftest {

struct Failure {
  ModelSpec original;
  ModelSpec shrunk;   // The smallest spec found that still fails the same check.
  Mismatch mismatch;  // Of the shrunk spec.
};

// The failing check on `spec` (one of run_checks'), shrunk: layers are
// removed while the same check still fails. A spec whose check passes gives
// nullopt.
std::optional<Failure> test_model(const ModelSpec& spec, const CheckOptions& options);

// The failure as a report: the model as C++ code (shrunk, then the original
// for reference), the seed, the check and what differed.
std::string describe(const Failure& failure);

struct CampaignOptions {
  uint64_t first_seed = 0;
  int64_t models = 100;
  CheckOptions checks;
  // Called after each model, with its index and the failure if any (progress
  // and reports of a long run).
  std::function<void(int64_t index, const std::optional<Failure>& failure)> on_model;
};

struct CampaignResult {
  int64_t models = 0;
  std::vector<Failure> failures;
};

// Models first_seed, first_seed + 1, ...
CampaignResult run_campaign(const CampaignOptions& options);

}  // namespace tandem::difftest
