// The one rule for names from files that become file names
// (serialization/file_name.h).
#include "serialization/file_name.h"

#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "tests/serialization/test_util.h"

namespace tandem::serialization {
namespace {

using ::tandem::testing::expect_error;

// Verifies that plain names pass, with any bytes the rule allows (UTF-8,
// dots, spaces), up to NAME_MAX with the extension.
TEST(FileNameTest, PlainNamesPass) {
  for (const std::string& name :
       std::vector<std::string>{"output0", "a.b.c", "...", ".hidden", "weights 2", "z\xc3\xbcrich",
                                std::string(251, 'n')}) {
    EXPECT_EQ(file_name_problem(name, ".npy"), std::nullopt) << name;
    EXPECT_EQ(checked_file_name(name, ".npy", "output name"), name + ".npy");
  }
  EXPECT_EQ(file_name_problem(std::string(255, 'n')), std::nullopt);
}

// Verifies that every name that is a path, names a folder, holds a byte a
// file name may not, or is too long once the extension is added, is refused
// with the name (escaped) and the reason.
TEST(FileNameTest, PathsAndBadNamesAreRefused) {
  const std::pair<std::string, std::string> cases[] = {
      {"", "it is empty"},
      {".", "\".\" names a folder"},
      {"..", "\"..\" names a folder"},
      {"../x", "contains '/' (at byte 2)"},
      {"/etc/passwd", "contains '/' (at byte 0)"},
      {"a\\b", "contains '\\'"},
      {"C:x", "contains ':'"},
      {std::string("a\0b", 3), "control character 0x00 (at byte 1)"},
      {"a\nb", "control character 0x0a"},
      {std::string(252, 'n'), "256 bytes long with its extension, more than the 255"},
  };
  for (const auto& [name, why] : cases) {
    const auto problem = file_name_problem(name, ".npy");
    ASSERT_TRUE(problem.has_value()) << name;
    EXPECT_THAT(*problem, ::testing::HasSubstr(why)) << name;
  }
  expect_error([] { checked_file_name(std::string("../\0x", 5), ".npy", "output name"); },
               {"output name \"../\\x00x\" cannot be a file name: it contains '/'"});
}

}  // namespace
}  // namespace tandem::serialization
