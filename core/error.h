// tandem::Error — the one exception type users see, and the checks that throw it.
//
// Every mistake a user can make (a bad shape, a wrong dtype, a missing file, an
// op that failed on a worker thread) surfaces as a `tandem::Error` that names
// what went wrong, the op involved, and the user's own source line:
//
//   try {
//     auto z = tandem::matmul(x, y);
//   } catch (const tandem::Error& e) {
//     std::cerr << e.what();  // "matmul: shapes [2, 3] and [4, 5] ... (at model.cc:42)"
//   }
//
// Two channels, two audiences: the user who made a mistake, and us:
//   TANDEM_CHECK(cond, "expected ..., got ", value)  — the user's mistake.
//   TANDEM_INTERNAL_ASSERT(cond, ...)                — our bug; asks for a report.
//
// Note [Call sites]
// A check deep inside shape inference does not know which user line called the
// op. The public entry point opens a `CallSiteScope` with the op's name and the
// caller's `std::source_location` (taken as a defaulted argument); every
// `TANDEM_CHECK` that fails inside the scope attaches both. Scopes nest; the
// innermost wins. The cost is two thread-local stores per call.
//
// Note [Name scopes]
// A call of an nn module (eager/nn/module.h) opens a NameScope with the
// module's name in the module that called it ("fc1") and the user's line of
// that call. The dotted path of the open scopes ("features.0.conv") says
// which part of a model an op belongs to: an error raised inside names it,
// and a traced node keeps it (as torch's nn_module_stack does), for to_text,
// the DOT picture and the exported graph. A check that fails outside any op
// (a module checking its input) takes the innermost scope's line. A scope
// with an empty name (the outermost module) adds nothing to the path.
#pragma once

#include <exception>
#include <source_location>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"

namespace tandem {

class Error : public std::exception {
 public:
  // `op` may be empty; a default-constructed `where` (line 0) means "unknown";
  // `scope` is the path of the module it happened in (Note [Name scopes]).
  explicit Error(std::string message, std::string op = {}, std::source_location where = {},
                 std::string scope = {});

  // The full text: "<op>: <message> (at <file>:<line>, in <scope>)", parts
  // omitted when unknown.
  const char* what() const noexcept override { return what_.c_str(); }
  // The bare message, without op and location.
  const std::string& message() const { return message_; }
  const std::string& op() const { return op_; }
  const std::source_location& where() const { return where_; }
  bool has_location() const { return where_.line() != 0; }
  const std::string& scope() const { return scope_; }

 private:
  std::string message_;
  std::string op_;
  std::source_location where_;
  std::string scope_;
  std::string what_;
};

// "file.cc:42"; the file is shortened to its last two path components.
std::string format_location(const std::source_location& where);

// The op and user line that the current thread is executing on behalf of.
struct CallSite {
  const char* op = nullptr;
  std::source_location where{};
};

// Makes `site` the current call site of this thread until the scope ends.
// See Note [Call sites].
class CallSiteScope {
 public:
  CallSiteScope(const char* op, const std::source_location& where);
  ~CallSiteScope();
  CallSiteScope(const CallSiteScope&) = delete;
  CallSiteScope& operator=(const CallSiteScope&) = delete;

 private:
  CallSite previous_;
};

// The current thread's call site; empty fields when no scope is open.
const CallSite& current_call_site();

// Adds `name`, called from `where`, to this thread's scope path until the
// scope ends. See Note [Name scopes].
class NameScope {
 public:
  NameScope(std::string name, const std::source_location& where);
  ~NameScope();
  NameScope(const NameScope&) = delete;
  NameScope& operator=(const NameScope&) = delete;
};

// The dotted path of this thread's open name scopes; "" when none is open.
std::string current_scope_path();

// The line that opened the innermost name scope, or `fallback` when none is
// open.
std::source_location innermost_scope_site(const std::source_location& fallback);

namespace detail {
// Debian's Abseil keeps its own string_view type, which absl::StrCat takes
// but std::string_view does not convert to; bridge the two here.
inline absl::string_view piece(std::string_view text) { return {text.data(), text.size()}; }
template <class T>
const T& piece(const T& value) {
  return value;
}
}  // namespace detail

// absl::StrCat that also accepts std::string_view.
template <class... Args>
std::string str_cat(const Args&... args) {
  return absl::StrCat(detail::piece(args)...);
}

namespace detail {
[[noreturn]] void throw_check_failure(std::string message);
[[noreturn]] void throw_internal_failure(const char* condition, std::string message,
                                         const std::source_location& where);
}  // namespace detail

}  // namespace tandem

// Throws tandem::Error with the concatenated message and the current call site
// when `cond` is false. Arguments are anything absl::StrCat accepts.
#define TANDEM_CHECK(cond, ...)                                              \
  do {                                                                       \
    if (!(cond)) [[unlikely]] {                                              \
      ::tandem::detail::throw_check_failure(::tandem::str_cat(__VA_ARGS__)); \
    }                                                                        \
  } while (false)

// For invariants of our own code. A failure is a Tandem bug, reported as an
// Error (never an abort) that names the condition and our source line.
#define TANDEM_INTERNAL_ASSERT(cond, ...)                                             \
  do {                                                                                \
    if (!(cond)) [[unlikely]] {                                                       \
      ::tandem::detail::throw_internal_failure(#cond, ::tandem::str_cat(__VA_ARGS__), \
                                               std::source_location::current());      \
    }                                                                                 \
  } while (false)
