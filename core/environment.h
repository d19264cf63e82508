// Settings read from environment variables (the README's table lists them).
//
//   int64_t workers = tandem::environment::integer(
//       "TANDEM_NUM_WORKERS", 1, 256, /*fallback=*/1, "CPU worker threads");
//
// A value that is set but not accepted is a tandem::Error naming the
// variable, the value and what is accepted, never a silent default. An unset
// or empty variable gives the fallback.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string_view>

namespace tandem::environment {

// The variable's value; nullopt when it is unset or empty.
std::optional<std::string_view> get(const char* name);

// A whole number in [min, max]. `meaning` says what it counts, for the
// message ("CPU worker threads").
int64_t integer(const char* name, int64_t min, int64_t max, int64_t fallback,
                std::string_view meaning);

// A byte count in [min, max]: a whole number with an optional suffix K, M, G
// or T (powers of 1024; "512M", "2G").
size_t bytes(const char* name, size_t min, size_t max, size_t fallback, std::string_view meaning);

// One of `choices`.
std::string_view choice(const char* name, std::initializer_list<std::string_view> choices,
                        std::string_view fallback);

}  // namespace tandem::environment
