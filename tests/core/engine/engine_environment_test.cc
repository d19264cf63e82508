// The process-wide engine's settings from the environment: a value it does
// not accept is a tandem::Error at the first use, naming the variable, the
// value and the accepted range, which the program can catch (and which every
// later use throws again); never std::terminate. Each case runs in a child
// process (a death test), since the engine starts once per process.
#include <cstdlib>
#include <string>

#include "core/tensor.h"
#include "tests/core/engine/engine_test_util.h"
#include "tests/error_of.h"
#include "tests/scoped_env.h"

namespace tandem::engine::testing {
namespace {

using tandem::testing::error_message_of;
using tandem::testing::ScopedEnv;
using ::testing::ExitedWithCode;

struct BadSetting {
  const char* variable;
  const char* value;
  const char* expected;  // A part of the message: the accepted range.
};

class EngineEnvironmentTest : public ::testing::TestWithParam<BadSetting> {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

// Verifies that the first tensor made, and then current() itself, throw a
// catchable error naming the variable, its value and the accepted range.
TEST_P(EngineEnvironmentTest, FirstUseThrowsAnErrorNamingTheSetting) {
  const BadSetting& bad = GetParam();
  ScopedEnv env(bad.variable, bad.value);
  EXPECT_EXIT(
      {
        std::string first = error_message_of([] { Tensor::from_vector<float>({1, 2}, {2}); });
        std::string again = error_message_of([] { current(); });
        bool named =
            first.find(std::string(bad.variable) + "='" + bad.value + "'") != std::string::npos &&
            first.find(bad.expected) != std::string::npos;
        std::exit(named && again == first ? 0 : 1);
      },
      ExitedWithCode(0), "");
}

INSTANTIATE_TEST_SUITE_P(
    Settings, EngineEnvironmentTest,
    ::testing::Values(BadSetting{"TANDEM_MAX_IN_FLIGHT", "abc", "from 0 to 1073741824"},
                      BadSetting{"TANDEM_MAX_IN_FLIGHT", "-1", "from 0 to 1073741824"},
                      BadSetting{"TANDEM_NUM_WORKERS", "100000", "from 1 to 256"},
                      BadSetting{"TANDEM_NUM_WORKERS", "0", "from 1 to 256"},
                      BadSetting{"TANDEM_NUM_WORKERS", "two", "from 1 to 256"},
                      BadSetting{"TANDEM_ENGINE", "fast", "one of 'threaded', 'naive'"},
                      BadSetting{"TANDEM_MAX_BYTES_IN_FLIGHT", "64X", "suffix K, M, G or T"},
                      BadSetting{"TANDEM_MAX_BYTES_IN_FLIGHT", "99999999999T",
                                 "suffix K, M, G or T"},
                      BadSetting{"TANDEM_PROFILE", "/nonexistent-directory/trace.json",
                                 "cannot write '/nonexistent-directory/trace.json'"}),
    [](const ::testing::TestParamInfo<BadSetting>& info) {
      std::string name =
          std::string(info.param.variable).substr(7) + "_" + std::to_string(info.index);
      return name;
    });

// Verifies that options given in code are checked the same way.
TEST(EngineOptionsTest, OutOfRangeOptionsThrow) {
  EXPECT_THROW(make_engine(EngineKind::kThreaded, {.cpu_workers = 100000}), Error);
  EXPECT_THROW(make_engine(EngineKind::kThreaded, {.cpu_workers = -1}), Error);
  EXPECT_THROW(make_engine(EngineKind::kThreaded, {.max_in_flight = -5}), Error);
  EXPECT_THROW(make_engine(EngineKind::kNaive, {.max_bytes_in_flight = -1}), Error);
  try {
    make_engine(EngineKind::kThreaded, {.cpu_workers = 100000});
  } catch (const Error& e) {
    EXPECT_THAT(e.message(), ::testing::HasSubstr("cpu_workers = 100000"));
    EXPECT_THAT(e.message(), ::testing::HasSubstr("0 (the default, one) to 256"));
  }
}

}  // namespace
}  // namespace tandem::engine::testing
