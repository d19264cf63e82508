// Size3: a (depth, height, width) triple for the kernel, stride, padding and
// dilation options of 3-d layers, as Size2 is for 2-d ones: an integer means
// the same value for all three, a braced triple gives each.
//
//   nn::Conv3d conv(3, 16, /*kernel=*/3);              // 3 x 3 x 3
//   nn::Conv3d thin(3, 16, /*kernel=*/{1, 3, 3});      // 1 x 3 x 3
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::nn {

struct Size3 {
  int64_t d = 0;
  int64_t h = 0;
  int64_t w = 0;

  Size3() = default;
  // Implicit on purpose: `3` means 3 x 3 x 3.
  Size3(int64_t all) : d(all), h(all), w(all) {}  // NOLINT(google-explicit-constructor)
  Size3(int64_t depth, int64_t height, int64_t width) : d(depth), h(height), w(width) {}

  // {d, h, w}, as conv3d takes its arguments.
  std::vector<int64_t> dims() const { return {d, h, w}; }
  // "3" when all three are equal, else "(1, 3, 3)"; for to_string().
  std::string to_string() const;
  friend bool operator==(const Size3&, const Size3&) = default;
};

}  // namespace tandem::nn
