// Calling a kernel template with the C++ type of a runtime dtype.
//
//   visit_numeric(t.dtype(), [&]<class T>() { fill(t.data<T>(), ...); });
//
// Each visitor names the dtypes it supports; any other dtype is a
// tandem::Error naming it, never garbage. float16 and bfloat16 are storage
// types here: kernels compute in float32 and ops cast at their boundaries.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "core/dtype.h"
#include "core/error.h"
#include "kernels/elementwise_formula.h"

namespace tandem::kernels {

// float32, float64.
template <class F>
decltype(auto) visit_floating(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32:
      return f.template operator()<float>();
    case DType::kFloat64:
      return f.template operator()<double>();
    default:
      break;
  }
  TANDEM_CHECK(false, "dtype ", dtype_name(dtype),
               " is not supported here; expected float32 or "
               "float64");
  return f.template operator()<float>();  // Unreachable.
}

// float32, float64, int32, int64, uint8: the types arithmetic is defined on.
template <class F>
decltype(auto) visit_numeric(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32:
      return f.template operator()<float>();
    case DType::kFloat64:
      return f.template operator()<double>();
    case DType::kInt32:
      return f.template operator()<int32_t>();
    case DType::kInt64:
      return f.template operator()<int64_t>();
    case DType::kUInt8:
      return f.template operator()<uint8_t>();
    default:
      break;
  }
  TANDEM_CHECK(false, "dtype ", dtype_name(dtype),
               " is not supported here; expected float32, "
               "float64, int32, int64 or uint8");
  return f.template operator()<float>();  // Unreachable.
}

// Every dtype with a C++ element type of its own, bool included.
template <class F>
decltype(auto) visit_all(DType dtype, F&& f) {
  if (dtype == DType::kBool) return f.template operator()<bool>();
  if (dtype == DType::kFloat16) return f.template operator()<Half>();
  if (dtype == DType::kBFloat16) return f.template operator()<BFloat16>();
  return visit_numeric(dtype, std::forward<F>(f));
}

// float32, float64, float16, bfloat16: every floating dtype (the random ops
// make them all).
template <class F>
decltype(auto) visit_all_floating(DType dtype, F&& f) {
  if (dtype == DType::kFloat16) return f.template operator()<Half>();
  if (dtype == DType::kBFloat16) return f.template operator()<BFloat16>();
  return visit_floating(dtype, std::forward<F>(f));
}

// An unsigned integer as wide as `bytes` (an element's size, dtype_size):
// kernels that only move elements copy these, one instantiation per element
// size instead of per dtype.
template <class F>
decltype(auto) visit_element_bits(size_t bytes, F&& f) {
  switch (bytes) {
    case 1:
      return f.template operator()<uint8_t>();
    case 2:
      return f.template operator()<uint16_t>();
    case 4:
      return f.template operator()<uint32_t>();
    default:
      return f.template operator()<uint64_t>();
  }
}

// The dtypes of an elementwise op's ElementTypes (kernels/elementwise_formula.h);
// the op's inference has refused every other dtype.
template <ElementTypes kTypes, class F>
void visit_element_types(DType dtype, F&& f) {
  if constexpr (kTypes == ElementTypes::kFloating) {
    visit_floating(dtype, f);
  } else if constexpr (kTypes == ElementTypes::kSignedNumeric) {
    visit_numeric(dtype, [&]<class T>() {
      if constexpr (std::is_signed_v<T>) f.template operator()<T>();
    });
  } else if constexpr (kTypes == ElementTypes::kIntegerOrBool) {
    visit_all(dtype, [&]<class T>() {
      if constexpr (std::is_integral_v<T>) f.template operator()<T>();
    });
  } else {
    visit_all(dtype, f);
  }
}

}  // namespace tandem::kernels
