#include "serialization/file_name.h"

#include "absl/strings/escaping.h"

#include "core/error.h"

namespace tandem::serialization {

std::optional<std::string> file_name_problem(std::string_view name, std::string_view extension) {
  if (name.empty()) return "it is empty";
  const std::string whole = str_cat(name, extension);
  for (std::string_view part : {name, std::string_view(whole)}) {
    if (part == "." || part == "..") return str_cat("\"", part, "\" names a folder");
  }
  for (size_t i = 0; i < whole.size(); ++i) {
    const auto c = static_cast<unsigned char>(whole[i]);
    if (c == '/' || c == '\\' || c == ':') {
      return str_cat("it contains '", std::string(1, static_cast<char>(c)), "' (at byte ", i,
                     "), so it is a path, not a plain name");
    }
    if (c < 0x20 || c == 0x7f) {
      return str_cat("it contains the control character 0x", absl::Hex(c, absl::kZeroPad2),
                     " (at byte ", i, ")");
    }
  }
  if (whole.size() > kMaxFileNameBytes) {
    return str_cat("it is ", whole.size(), " bytes long",
                   extension.empty() ? "" : " with its extension", ", more than the ",
                   kMaxFileNameBytes, " a file name may have");
  }
  return std::nullopt;
}

std::string checked_file_name(std::string_view name, std::string_view extension,
                              std::string_view what) {
  if (auto problem = file_name_problem(name, extension)) {
    throw Error(str_cat(what, " \"", absl::CHexEscape(detail::piece(name)),
                        "\" cannot be a file name: ", *problem));
  }
  return str_cat(name, extension);
}

}  // namespace tandem::serialization
