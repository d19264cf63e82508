#include "kernels/attrs.h"

#include <algorithm>
#include <bit>

#include "core/error.h"

namespace tandem::kernels {
namespace {

template <class T>
constexpr std::string_view type_name_of();
template <>
constexpr std::string_view type_name_of<int64_t>() {
  return "int";
}
template <>
constexpr std::string_view type_name_of<double>() {
  return "float";
}
template <>
constexpr std::string_view type_name_of<bool>() {
  return "bool";
}
template <>
constexpr std::string_view type_name_of<std::string>() {
  return "string";
}
template <>
constexpr std::string_view type_name_of<std::vector<int64_t>>() {
  return "ints";
}
template <>
constexpr std::string_view type_name_of<DType>() {
  return "dtype";
}

}  // namespace

std::string_view attr_type_name(const AttrValue& value) {
  return std::visit([]<class T>(const T&) { return type_name_of<T>(); }, value);
}

std::string attr_to_string(const AttrValue& value) {
  return std::visit(
      []<class T>(const T& v) -> std::string {
        if constexpr (std::is_same_v<T, bool>) {
          return v ? "true" : "false";
        } else if constexpr (std::is_same_v<T, std::string>) {
          return str_cat("\"", v, "\"");
        } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
          std::string text = "[";
          for (size_t i = 0; i < v.size(); ++i) text += str_cat(i ? ", " : "", v[i]);
          return text + "]";
        } else if constexpr (std::is_same_v<T, DType>) {
          return std::string(dtype_name(v));
        } else {
          return str_cat(v);
        }
      },
      value);
}

Attrs::Attrs(std::initializer_list<std::pair<std::string, AttrValue>> items) {
  items_.reserve(items.size());
  for (const auto& [name, value] : items) set(name, value);
}

Attrs& Attrs::set(std::string name, AttrValue value) {
  auto it = std::lower_bound(items_.begin(), items_.end(), name,
                             [](const auto& item, const std::string& n) { return item.first < n; });
  if (it != items_.end() && it->first == name) {
    it->second = std::move(value);
  } else {
    items_.insert(it, {std::move(name), std::move(value)});
  }
  return *this;
}

const AttrValue* Attrs::find(std::string_view name) const {
  auto it = std::lower_bound(items_.begin(), items_.end(), name,
                             [](const auto& item, std::string_view n) { return item.first < n; });
  return it != items_.end() && it->first == name ? &it->second : nullptr;
}

template <class T>
const T& Attrs::get(std::string_view name) const {
  const AttrValue* value = find(name);
  TANDEM_CHECK(value != nullptr, "missing attribute '", name, "'");
  const T* typed = std::get_if<T>(value);
  TANDEM_CHECK(typed != nullptr, "attribute '", name, "' is a ", attr_type_name(*value),
               ", expected a ", type_name_of<T>());
  return *typed;
}

int64_t Attrs::get_int(std::string_view name) const { return get<int64_t>(name); }
double Attrs::get_float(std::string_view name) const { return get<double>(name); }
bool Attrs::get_bool(std::string_view name) const { return get<bool>(name); }
const std::string& Attrs::get_string(std::string_view name) const { return get<std::string>(name); }
const std::vector<int64_t>& Attrs::get_ints(std::string_view name) const {
  return get<std::vector<int64_t>>(name);
}
DType Attrs::get_dtype(std::string_view name) const { return get<DType>(name); }

std::string Attrs::to_string() const {
  std::string text = "{";
  for (size_t i = 0; i < items_.size(); ++i) {
    text += str_cat(i ? ", " : "", items_[i].first, "=", attr_to_string(items_[i].second));
  }
  return text + "}";
}

bool operator==(const Attrs& a, const Attrs& b) {
  auto same = [](const AttrValue& x, const AttrValue& y) {
    if (x.index() != y.index()) return false;
    if (const auto* dx = std::get_if<double>(&x)) {
      return std::bit_cast<uint64_t>(*dx) == std::bit_cast<uint64_t>(std::get<double>(y));
    }
    return x == y;
  };
  return std::equal(
      a.items_.begin(), a.items_.end(), b.items_.begin(), b.items_.end(),
      [&](const auto& p, const auto& q) { return p.first == q.first && same(p.second, q.second); });
}

}  // namespace tandem::kernels
