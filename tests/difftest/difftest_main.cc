// The differential-testing campaign (tests/difftest/README.md):
//
//   build/release/tests/difftest --models 10000 [--seed FIRST] [--scratch DIR]
//
// checks models FIRST, FIRST + 1, ... in every mode, prints each failure
// (shrunk, as code) as it is found and a summary at the end, and exits 1 if
// any model failed. `tools/tandem.sh difftest N` runs it.
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string>

#include "tests/difftest/campaign.h"

namespace {

int usage() {
  std::cerr << "usage: difftest [--models N] [--seed FIRST] [--scratch DIR]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace tandem::difftest;
  CampaignOptions options;
  options.first_seed = 1'000'000;  // Past the seeds CI checks.
  options.checks.scratch_dir = std::filesystem::temp_directory_path().string();
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) return usage();
    const char* value = argv[++i];
    char* end = nullptr;
    if (arg == "--models") {
      options.models = std::strtoll(value, &end, 10);
    } else if (arg == "--seed") {
      options.first_seed = std::strtoull(value, &end, 10);
    } else if (arg == "--scratch") {
      options.checks.scratch_dir = value;
      continue;
    } else {
      return usage();
    }
    if (end == value || *end != '\0') return usage();
  }
  const auto start = std::chrono::steady_clock::now();
  auto elapsed = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  options.on_model = [&](int64_t index, const std::optional<Failure>& failure) {
    if (failure) std::cout << describe(*failure) << std::endl;
    if ((index + 1) % 500 == 0) {
      std::cout << "difftest: " << index + 1 << " models in " << elapsed() << " s" << std::endl;
    }
  };
  CampaignResult result = run_campaign(options);
  std::cout << "difftest: " << result.models << " models (seeds " << options.first_seed << " to "
            << options.first_seed + static_cast<uint64_t>(result.models) - 1 << "), "
            << result.failures.size() << " failed, " << elapsed() << " s" << std::endl;
  return result.failures.empty() ? 0 : 1;
}
