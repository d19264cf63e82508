// Size2: a (height, width) pair for the kernel, stride, padding and dilation
// options of 2-d layers. An integer means the same value for both, a braced
// pair gives each:
//
//   nn::Conv2d conv(3, 16, /*kernel=*/3);             // 3 x 3
//   nn::Conv2d wide(3, 16, /*kernel=*/{1, 5});        // 1 x 5
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::nn {

struct Size2 {
  int64_t h = 0;
  int64_t w = 0;

  Size2() = default;
  // Implicit on purpose: `3` means 3 x 3.
  Size2(int64_t both) : h(both), w(both) {}  // NOLINT(google-explicit-constructor)
  Size2(int64_t height, int64_t width) : h(height), w(width) {}

  // {h, w}, as the 2-d ops take their attributes.
  std::vector<int64_t> dims() const { return {h, w}; }
  // "3" when h == w, else "(1, 5)"; for to_string().
  std::string to_string() const;
  friend bool operator==(const Size2&, const Size2&) = default;
};

}  // namespace tandem::nn
