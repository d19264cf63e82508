#include "core/device.h"

#include <charconv>

#include "core/error.h"

namespace tandem {

Device Device::parse(std::string_view text) {
  if (text == "cpu") return cpu();
  if (text == "cuda") return cuda(0);
  constexpr std::string_view kCudaPrefix = "cuda:";
  if (text.starts_with(kCudaPrefix)) {
    std::string_view number = text.substr(kCudaPrefix.size());
    int index = -1;
    auto [end, error] = std::from_chars(number.data(), number.data() + number.size(), index);
    if (error == std::errc() && end == number.data() + number.size() && index >= 0) {
      return cuda(index);
    }
  }
  TANDEM_CHECK(false, "cannot parse device '", text, "'; expected 'cpu', 'cuda' or 'cuda:N'");
  return cpu();  // Unreachable.
}

std::string Device::to_string() const {
  return is_cpu() ? std::string("cpu") : str_cat("cuda:", index_);
}

}  // namespace tandem
