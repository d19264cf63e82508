// What the loaders' fuzz targets share: how a finding is reported, and how an
// Error from TANDEM_INTERNAL_ASSERT is told from the Error a bad file earns.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "core/error.h"

namespace tandem::fuzz {

// Prints why, then aborts, so that libFuzzer saves the input as a crash.
[[noreturn]] inline void finding(std::string_view what, std::string_view detail) {
  std::fprintf(stderr, "\n==== fuzz finding: %.*s\n%.*s\n", static_cast<int>(what.size()),
               what.data(), static_cast<int>(detail.size()), detail.data());
  std::abort();
}

// Note [Spotting internal assertions]
// TANDEM_INTERNAL_ASSERT throws a tandem::Error too, whose text says "This is
// a Tandem bug" (core/error.cc); a loader may wrap it in its own message, so
// the whole text is searched. Loaders also quote the file's bytes in their
// messages, and libFuzzer learns the operands of every comparison the target
// makes (memcmp, strstr and instrumented compares): searching with
// string_view::find taught it the phrase within seconds, and it then wrote
// the phrase into files whose names the loader echoed. So the search is a
// plain loop in a function left without coverage instrumentation, which
// libFuzzer cannot watch.
__attribute__((no_sanitize("coverage"))) inline bool says_tandem_bug(std::string_view text) {
  static constexpr char kPhrase[] = "This is a Tandem bug";
  constexpr size_t kLength = sizeof(kPhrase) - 1;
  const char* data = text.data();
  for (size_t i = 0; i + kLength <= text.size(); ++i) {
    size_t k = 0;
    while (k < kLength && data[i + k] == kPhrase[k]) ++k;
    if (k == kLength) return true;
  }
  return false;
}

// A tandem::Error is the expected answer to a bad file, unless it comes from
// an internal assertion: a file reached a state our code thought impossible.
inline void expect_user_error(const Error& e, std::string_view kind) {
  if (says_tandem_bug(e.what())) {
    std::fprintf(stderr, "\n==== fuzz finding: internal assertion reached from a %.*s\n%s\n",
                 static_cast<int>(kind.size()), kind.data(), e.what());
    std::abort();
  }
}

}  // namespace tandem::fuzz
