// Element types of tensors.
//
//   tandem::DType t = tandem::parse_dtype("bfloat16");
//   tandem::dtype_size(t);             // 2
//   tandem::dtype_of<float>();         // DType::kFloat32
//
// float16 and bfloat16 values are stored as their 16-bit patterns; `Half` and
// `BFloat16` convert to and from float with round-to-nearest-even, which is
// what kernels use to read and write them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace tandem {

enum class DType : uint8_t {
  kFloat32,
  kFloat64,
  kFloat16,
  kBFloat16,
  kInt32,
  kInt64,
  kUInt8,
  kBool,
};

inline constexpr int kNumDTypes = 8;

// IEEE 754 binary16.
struct Half {
  uint16_t bits = 0;
  Half() = default;
  explicit Half(float value);
  explicit operator float() const;
};

// The upper half of an IEEE 754 binary32 ("brain float").
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  explicit BFloat16(float value);
  explicit operator float() const;
};

constexpr size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kFloat64:
    case DType::kInt64:
      return 8;
    case DType::kFloat32:
    case DType::kInt32:
      return 4;
    case DType::kFloat16:
    case DType::kBFloat16:
      return 2;
    case DType::kUInt8:
    case DType::kBool:
      return 1;
  }
  return 0;
}

constexpr bool is_floating_point(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kFloat64 || dtype == DType::kFloat16 ||
         dtype == DType::kBFloat16;
}

// "float32", "int64", ...: the names used in messages and in files.
std::string_view dtype_name(DType dtype);

// The inverse of dtype_name; throws tandem::Error naming the unknown text.
DType parse_dtype(std::string_view name);

// The DType whose elements have C++ type T.
template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::kFloat32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::kFloat64;
}
template <>
constexpr DType dtype_of<Half>() {
  return DType::kFloat16;
}
template <>
constexpr DType dtype_of<BFloat16>() {
  return DType::kBFloat16;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::kInt32;
}
template <>
constexpr DType dtype_of<int64_t>() {
  return DType::kInt64;
}
template <>
constexpr DType dtype_of<uint8_t>() {
  return DType::kUInt8;
}
template <>
constexpr DType dtype_of<bool>() {
  return DType::kBool;
}

}  // namespace tandem
