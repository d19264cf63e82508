// The one rule for a name that a file supplies and that becomes a file name:
// the params file a graph file names, each output tools/tandem-run writes,
// the files an export derives from its path.
//
//   std::string name = checked_file_name(output.name, ".npy", "output name");
//   write_npy((folder / name).string(), tensor);   // Cannot leave `folder`.
//
// A file name is a plain name in a folder, never a path: not empty, not "."
// or ".." (with or without the extension), without a slash, a backslash or
// a colon (a folder separator or drive letter on other systems), NUL or
// another control character (U+0000..U+001F, U+007F), and at most
// kMaxFileNameBytes bytes once the extension is added. Checked this way, a
// hostile file cannot make Tandem read or write outside the folder it was
// given.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace tandem::serialization {

// NAME_MAX of Linux's file systems: the longest name a folder entry holds.
inline constexpr size_t kMaxFileNameBytes = 255;

// Why `name` followed by `extension` cannot be a file name, or nothing when
// it can ("contains '/'", "is 300 bytes long with its extension ...").
std::optional<std::string> file_name_problem(std::string_view name,
                                             std::string_view extension = "");

// `name` + `extension`, checked. Throws tandem::Error naming `what` and the
// name, escaped ("output name \"../x\" cannot be a file name: it contains
// '/'").
std::string checked_file_name(std::string_view name, std::string_view extension,
                              std::string_view what);

}  // namespace tandem::serialization
