// Raw bytes to and from files, for tests that hand-make files and feed them
// to a loader.
#pragma once

#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/types/span.h"

#include "tests/serialization/test_util.h"

namespace tandem::testing {

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline absl::Span<const uint8_t> as_span(const std::string& bytes) {
  return {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()};
}

// Expects a loader to refuse `bytes` alike from a file and from memory:
// `read(path)`, after `bytes` are written to `path`, and `parse(bytes, path)`
// both throw a tandem::Error holding every one of `parts`.
template <class Read, class Parse>
void expect_refused(const std::string& path, const std::string& bytes,
                    const std::vector<std::string>& parts, Read read, Parse parse) {
  write_bytes(path, bytes);
  expect_error([&] { read(path); }, parts);
  expect_error([&] { parse(as_span(bytes), path); }, parts);
}

}  // namespace tandem::testing
