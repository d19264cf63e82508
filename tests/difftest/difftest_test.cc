// The differential suite in CI: a few hundred random models, each checked in
// every mode against eager (tests/difftest/README.md). Fixed seeds, so a
// failure here is a failure everywhere; `tools/tandem.sh difftest N` runs a
// longer campaign from other seeds.
#include <filesystem>
#include <functional>
#include <set>
#include <string>

#include "gtest/gtest.h"

#include "tests/difftest/campaign.h"

namespace tandem::difftest {
namespace {

// Shards run as separate ctest cases, in parallel.
constexpr int kShards = 8;
constexpr int64_t kReleaseModelsPerShard = 40;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr int64_t kModelsPerShard = 5;  // Sanitized builds run ~10x slower.
#else
constexpr int64_t kModelsPerShard = kReleaseModelsPerShard;
#endif

class DifferentialTest : public ::testing::TestWithParam<int> {};

// Verifies that every model of the shard gives the eager answer in every
// mode; a failure prints the model, shrunk, as code.
TEST_P(DifferentialTest, EveryModeGivesTheEagerAnswer) {
  CampaignOptions options;
  options.first_seed = static_cast<uint64_t>(GetParam()) * 1000;
  options.models = kModelsPerShard;
  options.checks.scratch_dir = std::filesystem::temp_directory_path().string();
  CampaignResult result = run_campaign(options);
  EXPECT_EQ(result.models, kModelsPerShard);
  for (const Failure& failure : result.failures) ADD_FAILURE() << describe(failure);
}

INSTANTIATE_TEST_SUITE_P(Shards, DifferentialTest, ::testing::Range(0, kShards));

// Verifies that the generator makes varied models: every layer kind appears
// within the release build's CI seeds (drawing a spec is cheap, so the
// sanitized builds, which check fewer models, walk them all too), and the
// same seed gives the same model.
TEST(ModelGeneratorTest, CoversEveryLayerKindAndIsDeterministic) {
  std::set<LayerKind> seen;
  std::function<void(const std::vector<LayerSpec>&)> walk = [&](const auto& layers) {
    for (const LayerSpec& layer : layers) {
      seen.insert(layer.kind);
      walk(layer.children);
    }
  };
  for (int shard = 0; shard < kShards; ++shard) {
    for (int64_t i = 0; i < kReleaseModelsPerShard; ++i) {
      walk(random_model(static_cast<uint64_t>(shard) * 1000 + static_cast<uint64_t>(i)).layers);
    }
  }
  EXPECT_EQ(seen.size(), static_cast<size_t>(LayerKind::kConv3d) + 1);
  EXPECT_EQ(build(random_model(7)).code, build(random_model(7)).code);
  EXPECT_NE(build(random_model(7)).code, build(random_model(8)).code);
}

}  // namespace
}  // namespace tandem::difftest
