#include "core/error.h"

#include <source_location>
#include <string>
#include <string_view>
#include <thread>

#include <gtest/gtest.h>

namespace tandem {
namespace {

bool contains(std::string_view text, std::string_view part) {
  return text.find(part) != std::string_view::npos;
}

// "core/error_test.cc:<line>": format_location keeps the last two path components.
std::string here(int line) { return str_cat("core/error_test.cc:", line); }

// Runs `fn`, which must throw tandem::Error, and returns the error.
template <class Fn>
Error thrown_by(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no tandem::Error was thrown";
  return Error("nothing thrown");
}

// Verifies what() for each combination of op and location.
TEST(ErrorTest, WhatFormatsOpMessageAndLocation) {
  const std::source_location where = std::source_location::current();
  const int line = __LINE__ - 1;
  struct Row {
    Error error;
    std::string what;
  };
  const Row rows[] = {
      {Error("bad shape", "matmul", where), str_cat("matmul: bad shape (at ", here(line), ")")},
      {Error("bad shape", "matmul"), "matmul: bad shape"},
      {Error("bad shape", "", where), str_cat("bad shape (at ", here(line), ")")},
      {Error("bad shape"), "bad shape"},
  };
  for (const Row& row : rows) {
    EXPECT_EQ(row.error.what(), row.what);
    EXPECT_EQ(row.error.message(), "bad shape");
  }
  EXPECT_TRUE(rows[0].error.has_location());
  EXPECT_FALSE(rows[1].error.has_location());
  EXPECT_EQ(rows[0].error.op(), "matmul");
  EXPECT_EQ(rows[0].error.where().line(), static_cast<unsigned>(line));
}

// Verifies that format_location shortens the path to its last two components.
TEST(ErrorTest, FormatLocationKeepsLastTwoComponents) {
  const std::source_location where = std::source_location::current();
  EXPECT_EQ(format_location(where), here(__LINE__ - 1));
}

// Verifies that a TANDEM_CHECK inside a CallSiteScope carries the scope's op and line.
TEST(ErrorTest, CheckInsideScopeAttachesOpAndLocation) {
  const int line = __LINE__ + 1;
  CallSiteScope scope("my_op", std::source_location::current());
  Error e = thrown_by([] { TANDEM_CHECK(1 + 1 == 3, "expected ", 3, ", got ", 2); });
  EXPECT_EQ(e.op(), "my_op");
  EXPECT_EQ(e.where().line(), static_cast<unsigned>(line));
  EXPECT_EQ(e.message(), "expected 3, got 2");
  EXPECT_EQ(std::string(e.what()), str_cat("my_op: expected 3, got 2 (at ", here(line), ")"));
}

// Verifies that a passing TANDEM_CHECK throws nothing and does not evaluate its message.
TEST(ErrorTest, PassingCheckDoesNotThrowOrFormat) {
  int evaluated = 0;
  auto message = [&] {
    ++evaluated;
    return "unused";
  };
  EXPECT_NO_THROW(TANDEM_CHECK(2 > 1, message()));
  EXPECT_EQ(evaluated, 0);
}

// Verifies that the innermost scope wins and the outer one is restored when it closes.
TEST(ErrorTest, NestedScopesInnermostWinsThenRestored) {
  const int outer_line = __LINE__ + 1;
  CallSiteScope outer("outer", std::source_location::current());
  {
    const int inner_line = __LINE__ + 1;
    CallSiteScope inner("inner", std::source_location::current());
    Error e = thrown_by([] { TANDEM_CHECK(false, "x"); });
    EXPECT_EQ(e.op(), "inner");
    EXPECT_EQ(e.where().line(), static_cast<unsigned>(inner_line));
    EXPECT_STREQ(current_call_site().op, "inner");
  }
  Error e = thrown_by([] { TANDEM_CHECK(false, "x"); });
  EXPECT_EQ(e.op(), "outer");
  EXPECT_EQ(e.where().line(), static_cast<unsigned>(outer_line));
  EXPECT_STREQ(current_call_site().op, "outer");
}

// Verifies that a check with no open scope has no op and no location, and what() is the message.
TEST(ErrorTest, CheckOutsideScopeHasNoOpOrLocation) {
  { CallSiteScope closed("closed", std::source_location::current()); }
  EXPECT_EQ(current_call_site().op, nullptr);
  Error e = thrown_by([] { TANDEM_CHECK(false, "plain ", "message"); });
  EXPECT_EQ(e.op(), "");
  EXPECT_FALSE(e.has_location());
  EXPECT_STREQ(e.what(), "plain message");
}

// Verifies that call sites are per thread: a scope on one thread is invisible to another.
TEST(ErrorTest, CallSiteIsThreadLocal) {
  CallSiteScope scope("main_thread_op", std::source_location::current());
  std::string other_op = "unset";
  std::thread([&] {
    const char* op = current_call_site().op;
    other_op = op ? op : "";
  }).join();
  EXPECT_EQ(other_op, "");
}

// Verifies that an internal assert names the condition, our line, and says it is a Tandem bug.
TEST(ErrorTest, InternalAssertSaysBugAndNamesCondition) {
  const int line = __LINE__ + 1;
  Error e = thrown_by([] { TANDEM_INTERNAL_ASSERT(1 + 1 == 3, "extra ", 42); });
  std::string what = e.what();
  EXPECT_TRUE(contains(what, "1 + 1 == 3")) << what;
  EXPECT_TRUE(contains(what, "Tandem bug")) << what;
  EXPECT_TRUE(contains(what, here(line))) << what;
  EXPECT_TRUE(contains(what, "extra 42")) << what;
}

// Verifies that an internal assert inside a scope also carries the user's op and line.
TEST(ErrorTest, InternalAssertInsideScopeCarriesCallSite) {
  const int line = __LINE__ + 1;
  CallSiteScope scope("user_op", std::source_location::current());
  Error e = thrown_by([] { TANDEM_INTERNAL_ASSERT(false); });
  EXPECT_EQ(e.op(), "user_op");
  EXPECT_EQ(e.where().line(), static_cast<unsigned>(line));
  EXPECT_TRUE(contains(e.message(), "false failed")) << e.message();
}

// Verifies that str_cat accepts std::string_view alongside the types absl::StrCat takes.
TEST(ErrorTest, StrCatAcceptsStdStringView) {
  std::string_view view = "view";
  std::string owned = "string";
  EXPECT_EQ(str_cat(view, "-", owned, "-", 7, "-", 2.5, "-", view.substr(1, 2)),
            "view-string-7-2.5-ie");
  EXPECT_EQ(str_cat(), "");
  EXPECT_EQ(str_cat(std::string_view()), "");
}

}  // namespace
}  // namespace tandem
