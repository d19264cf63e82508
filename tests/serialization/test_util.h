// Helpers shared by the serialization tests.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/error.h"
#include "serialization/file_io.h"
#include "serialization/graph_file.h"

namespace tandem::testing {

// Runs `f`, expecting a tandem::Error whose text contains every one of `parts`.
template <class F>
void expect_error(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "expected a tandem::Error containing '" << parts.at(0) << "'";
  } catch (const Error& e) {
    for (const auto& part : parts) EXPECT_THAT(e.what(), ::testing::HasSubstr(part));
  }
}

// The path of the params file that the graph file at `json_path` names
// (beside it; exports name it after its contents: serialization/model.cc).
inline std::string params_path_of(const std::string& json_path) {
  const auto name = serialization::params_file_named_by(
      serialization::read_file(json_path, serialization::kMaxGraphFileBytes));
  EXPECT_TRUE(name.has_value()) << json_path << " names no params file";
  return (std::filesystem::path(json_path).parent_path() / name.value_or("")).string();
}

// `text` with its first `from` replaced by `to` (each must occur).
inline std::string replace_first(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << "no '" << from << "' in the text";
  return at == std::string::npos ? text : text.replace(at, from.size(), to);
}

// A fresh folder for one test's files, removed with everything in it.
class ScratchDir {
 public:
  ScratchDir() {
    const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::temp_directory_path() /
            (std::string("tandem-") + test->test_suite_name() + "-" + test->name() + "-" +
             std::to_string(::testing::UnitTest::GetInstance()->random_seed()));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  // The path of `name` inside the folder.
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace tandem::testing
