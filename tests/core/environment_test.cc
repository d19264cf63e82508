// Settings from environment variables (core/environment.h): accepted values
// parse, and anything else is a tandem::Error naming the variable, the
// value and what is accepted. TANDEM_BIND_THREADS, read by the kernels,
// fails the same way at the first op (on the caller's thread, catchable).
#include "core/environment.h"

#include <cstdlib>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/error.h"
#include "tandem/tandem.h"
#include "tests/error_of.h"
#include "tests/scoped_env.h"

namespace tandem {
namespace {

using tandem::testing::error_message_of;
using tandem::testing::ScopedEnv;
using ::testing::HasSubstr;

constexpr const char* kName = "TANDEM_TEST_SETTING";

// Verifies that unset and empty mean the fallback, and that whole numbers
// in range parse.
TEST(EnvironmentTest, IntegerInRangeOrFallback) {
  {
    ScopedEnv env(kName, nullptr);
    EXPECT_EQ(environment::integer(kName, 1, 8, 3, "things"), 3);
  }
  {
    ScopedEnv env(kName, "");
    EXPECT_EQ(environment::integer(kName, 1, 8, 3, "things"), 3);
  }
  ScopedEnv env(kName, "8");
  EXPECT_EQ(environment::integer(kName, 1, 8, 3, "things"), 8);
}

// Verifies the message for a value out of range and for one that is not a
// number.
TEST(EnvironmentTest, IntegerErrorsNameVariableValueAndRange) {
  for (const char* bad : {"9", "0", "x", "1.5", "12abc"}) {
    ScopedEnv env(kName, bad);
    std::string message = error_message_of([] { environment::integer(kName, 1, 8, 3, "things"); });
    EXPECT_THAT(message, HasSubstr(std::string(kName) + "='" + bad + "'"));
    EXPECT_THAT(message, HasSubstr("a whole number of things, from 1 to 8"));
  }
}

// Verifies byte counts with and without suffixes, and their errors.
TEST(EnvironmentTest, BytesWithSuffixes) {
  struct Case {
    const char* text;
    size_t bytes;
  };
  for (Case c : {Case{"4096", 4096}, Case{"512K", 512u << 10}, Case{"3M", 3u << 20},
                 Case{"2g", size_t{2} << 30}, Case{"1T", size_t{1} << 40}}) {
    ScopedEnv env(kName, c.text);
    EXPECT_EQ(environment::bytes(kName, 0, size_t{1} << 50, 7, "memory"), c.bytes) << c.text;
  }
  for (const char* bad : {"1X", "M", "-1", "2P", "2000000T"}) {
    ScopedEnv env(kName, bad);
    std::string message =
        error_message_of([] { environment::bytes(kName, 0, size_t{1} << 50, 7, "memory"); });
    EXPECT_THAT(message, HasSubstr(std::string(kName) + "='" + bad + "'"));
    EXPECT_THAT(message, HasSubstr("suffix K, M, G or T"));
    EXPECT_THAT(message, HasSubstr("from 0 B to 1024 TiB"));
  }
}

// Verifies choices and their error.
TEST(EnvironmentTest, Choice) {
  {
    ScopedEnv env(kName, "b");
    EXPECT_EQ(environment::choice(kName, {"a", "b"}, "a"), "b");
  }
  ScopedEnv env(kName, "c");
  EXPECT_THAT(error_message_of([] {
                environment::choice(kName, {"a", "b"}, "a");
              }),
              HasSubstr("TANDEM_TEST_SETTING='c' is not accepted: expected one of 'a', 'b'"));
}

// Verifies that a TANDEM_BIND_THREADS the workers would refuse fails the
// first op, and every one after it, with a catchable error naming it (in a
// child process: the kernels read it once per process).
TEST(EnvironmentTest, BadBindThreadsFailsEveryOpAtItsCall) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  ScopedEnv env("TANDEM_BIND_THREADS", "yes");
  EXPECT_EXIT(
      {
        Tensor x = Tensor::from_vector<float>({1, 2}, {2});
        std::string first = error_message_of([&] { add(x, x); });
        std::string again = error_message_of([&] { add(x, x); });
        std::exit(
            first.find("TANDEM_BIND_THREADS='yes'") != std::string::npos && first == again ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
}  // namespace tandem
