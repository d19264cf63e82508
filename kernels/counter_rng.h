// The random numbers of the random ops (rand, randn, dropout): one
// definition for the CPU kernels (kernels/ops/creation.cc) and the CUDA
// kernels (kernels/cuda/creation.cu), so that a seed gives the same values on
// both devices (randn up to the last bits of each device's log and cos).
//
//   CounterRng rng(seed);
//   double u = rng.uniform(i);                // draw i, uniform in [0, 1)
//   double f = rng.uniform_bits<24>(i);       // the same, exact in float
//   double z = rng.normal(i);                 // element i of a standard normal
//
// Every function is a pure function of (seed, counter), callable from host
// and device code alike (TANDEM_HOST_DEVICE).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <type_traits>

#include "core/dtype.h"
#include "kernels/host_device.h"

namespace tandem::kernels {

// Note [Counter-based random numbers]
// Element i of a random op with seed s is made from
//   bits(s, i) = mix(mix(s) + (i + 1) * kGamma),
// where mix is the splitmix64 finalizer (Steele, Lea and Flood, "Fast
// splittable pseudorandom number generators", 2014) and kGamma the golden
// ratio constant: for a fixed s this is exactly the splitmix64 stream started
// at mix(s), but any element can be computed on its own, so a kernel may
// split its range over threads (or GPU threads) and still give the same
// values. Hashing the seed first keeps nearby seeds (1, 2, 3...) from
// producing shifted copies of one stream. splitmix64 passes BigCrush; it is
// not cryptographic.
inline constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ULL;

TANDEM_HOST_DEVICE constexpr uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Significand bits of each floating element type: a uniform draw with that
// many bits is exact in the type, so it never rounds up to 1.
template <class T>
constexpr int significand_bits() {
  if constexpr (std::is_same_v<T, Half>) {
    return 11;
  } else if constexpr (std::is_same_v<T, BFloat16>) {
    return 8;
  } else {
    return std::numeric_limits<T>::digits;
  }
}

// The stream of one seed; `counter` picks the draw. Trivially copyable, so a
// CUDA kernel takes it by value.
class CounterRng {
 public:
  TANDEM_HOST_DEVICE constexpr explicit CounterRng(int64_t seed)
      : key_(mix(static_cast<uint64_t>(seed))) {}

  // The 64 random bits of draw `counter`.
  TANDEM_HOST_DEVICE constexpr uint64_t bits(uint64_t counter) const {
    return mix(key_ + (counter + 1) * kGamma);
  }

  // Uniform in [0, 1) with 53 random bits.
  TANDEM_HOST_DEVICE constexpr double uniform(uint64_t counter) const {
    return static_cast<double>(bits(counter) >> 11) * 0x1.0p-53;
  }

  // Uniform in [0, 1) from the top kBits bits of draw `counter`, times
  // 2^-kBits: with kBits = significand_bits<T>(), exact in T and never 1.
  template <int kBits>
  TANDEM_HOST_DEVICE constexpr double uniform_bits(uint64_t counter) const {
    constexpr double kScale = 1.0 / static_cast<double>(uint64_t{1} << kBits);
    return static_cast<double>(bits(counter) >> (64 - kBits)) * kScale;
  }

  // Element i of a standard normal: Box-Muller over draws 2i and 2i + 1 (u1
  // in (0, 1], so the log is finite).
  TANDEM_HOST_DEVICE double normal(uint64_t i) const {
    uint64_t counter = 2 * i;
    double u1 = 1.0 - uniform(counter);
    double u2 = uniform(counter + 1);
    return ::sqrt(-2 * ::log(u1)) * ::cos(2 * std::numbers::pi * u2);
  }

 private:
  uint64_t key_;  // mix(seed).
};

}  // namespace tandem::kernels
