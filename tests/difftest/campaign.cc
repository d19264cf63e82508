#include "tests/difftest/campaign.h"

#include <utility>

#include "core/error.h"

namespace tandem::difftest {
namespace {

// Whether `spec` builds at all (a removal can leave a layer that no longer
// fits its input, which is not the failure being shrunk).
bool builds(const ModelSpec& spec) {
  try {
    build(spec);
    return true;
  } catch (const Error&) {
    return false;
  }
}

}  // namespace

std::optional<Failure> test_model(const ModelSpec& spec, const CheckOptions& options) {
  std::optional<Mismatch> mismatch = run_checks(spec, options);
  if (!mismatch) return std::nullopt;
  Failure failure{spec, spec, *mismatch};
  // Greedy: take the first smaller spec that still fails the same check,
  // until none does. Each round removes a layer, so this ends.
  for (bool smaller = true; smaller;) {
    smaller = false;
    for (ModelSpec& candidate : smaller_specs(failure.shrunk)) {
      if (!builds(candidate)) continue;
      std::optional<Mismatch> m = run_check(failure.mismatch.check, candidate, options);
      if (!m) continue;
      failure.shrunk = std::move(candidate);
      failure.mismatch = std::move(*m);
      smaller = true;
      break;
    }
  }
  return failure;
}

std::string describe(const Failure& failure) {
  std::string text = str_cat("difftest: model ", failure.original.seed, " fails check '",
                             failure.mismatch.check, "': ", failure.mismatch.detail, "\n");
  text += str_cat("Shrunk from ", count_layers(failure.original), " layers to ",
                  count_layers(failure.shrunk), ":\n", build(failure.shrunk).code);
  if (count_layers(failure.shrunk) != count_layers(failure.original)) {
    text += str_cat("The original model:\n", build(failure.original).code);
  }
  text += str_cat("Reproduce: build/release/tests/difftest --seed ", failure.original.seed,
                  " --models 1\n");
  return text;
}

CampaignResult run_campaign(const CampaignOptions& options) {
  CampaignResult result;
  for (int64_t i = 0; i < options.models; ++i) {
    const ModelSpec spec = random_model(options.first_seed + static_cast<uint64_t>(i));
    std::optional<Failure> failure = test_model(spec, options.checks);
    ++result.models;
    if (options.on_model) options.on_model(i, failure);
    if (failure) result.failures.push_back(std::move(*failure));
  }
  return result;
}

}  // namespace tandem::difftest
