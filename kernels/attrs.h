// Attrs: the typed, named attribute values of one op call.
//
//   Attrs attrs{{"axes", std::vector<int64_t>{0, 2}}, {"keepdims", true}};
//   attrs.get_ints("axes");     // {0, 2}
//   attrs.get_bool("keepdims"); // true
//
// Values are int64, double, bool, string, a list of int64, or a DType. The
// registry's schema (registry.h) fills in defaults and rejects unknown names
// and wrong types before a kernel sees them, so a kernel's getters only
// throw on a Tandem bug. Attrs print in name order, which the graph dump and
// the JSON format rely on for determinism.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "core/dtype.h"

namespace tandem::kernels {

using AttrValue = std::variant<int64_t, double, bool, std::string, std::vector<int64_t>, DType>;

// "int", "float", "bool", "string", "ints", "dtype": names used in messages.
std::string_view attr_type_name(const AttrValue& value);
std::string attr_to_string(const AttrValue& value);

class Attrs {
 public:
  Attrs() = default;
  Attrs(std::initializer_list<std::pair<std::string, AttrValue>> items);

  // Sets (or replaces) one attribute. An int given for a float attribute is
  // accepted by the schema check, which converts it.
  Attrs& set(std::string name, AttrValue value);
  bool has(std::string_view name) const { return find(name) != nullptr; }
  const AttrValue* find(std::string_view name) const;

  int64_t get_int(std::string_view name) const;
  double get_float(std::string_view name) const;
  bool get_bool(std::string_view name) const;
  const std::string& get_string(std::string_view name) const;
  const std::vector<int64_t>& get_ints(std::string_view name) const;
  DType get_dtype(std::string_view name) const;

  // Sorted by name.
  const std::vector<std::pair<std::string, AttrValue>>& items() const { return items_; }
  // "{axes=[0, 2], keepdims=true}"
  std::string to_string() const;

  // Exact equality: floats compare by their bits, so a NaN attribute equals
  // itself (a graph holding one still verifies) and -0.0 differs from 0.0.
  friend bool operator==(const Attrs& a, const Attrs& b);

 private:
  template <class T>
  const T& get(std::string_view name) const;

  std::vector<std::pair<std::string, AttrValue>> items_;
};

}  // namespace tandem::kernels
