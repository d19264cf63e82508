#include "core/environment.h"

#include <cctype>
#include <cstdlib>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"

#include "core/allocator.h"
#include "core/error.h"

namespace tandem::environment {
namespace {

template <class T>
bool parse_whole_number(std::string_view text, T* value) {
  return absl::SimpleAtoi(absl::string_view(text.data(), text.size()), value);
}

}  // namespace

std::optional<std::string_view> get(const char* name) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return std::nullopt;
  return std::string_view(text);
}

int64_t integer(const char* name, int64_t min, int64_t max, int64_t fallback,
                std::string_view meaning) {
  std::optional<std::string_view> text = get(name);
  if (!text) return fallback;
  int64_t value = 0;
  TANDEM_CHECK(parse_whole_number(*text, &value) && min <= value && value <= max, name, "='", *text,
               "' is not accepted: expected a whole number of ", meaning, ", from ", min, " to ",
               max);
  return value;
}

size_t bytes(const char* name, size_t min, size_t max, size_t fallback, std::string_view meaning) {
  std::optional<std::string_view> text = get(name);
  if (!text) return fallback;
  // A suffix multiplies by a power of 1024: the shift it stands for.
  constexpr std::pair<char, int> kSuffixes[] = {{'K', 10}, {'M', 20}, {'G', 30}, {'T', 40}};
  std::string_view digits = *text;
  int shift = 0;
  for (auto [suffix, bits] : kSuffixes) {
    if (!digits.empty() && std::toupper(static_cast<unsigned char>(digits.back())) == suffix) {
      shift = bits;
      digits.remove_suffix(1);
      break;
    }
  }
  uint64_t value = 0;
  bool parsed = parse_whole_number(digits, &value) && value <= (uint64_t{max} >> shift);
  value <<= shift;
  TANDEM_CHECK(parsed && min <= value && value <= max, name, "='", *text,
               "' is not accepted: expected ", meaning,
               " in bytes: a whole number with an "
               "optional suffix K, M, G or T (powers of 1024), from ",
               format_bytes(min), " to ", format_bytes(max));
  return static_cast<size_t>(value);
}

std::string_view choice(const char* name, std::initializer_list<std::string_view> choices,
                        std::string_view fallback) {
  std::optional<std::string_view> text = get(name);
  if (!text) return fallback;
  std::string expected;
  for (std::string_view c : choices) {
    if (*text == c) return c;
    expected += expected.empty() ? "'" : ", '";
    expected += c;
    expected += "'";
  }
  TANDEM_CHECK(false, name, "='", *text, "' is not accepted: expected one of ", expected);
  return fallback;
}

}  // namespace tandem::environment
