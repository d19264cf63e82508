#include "core/error.h"

#include <utility>
#include <vector>

namespace tandem {
namespace {

thread_local CallSite current_site;

struct OpenScope {
  std::string name;
  std::source_location where;
};
// Names are short and nesting shallow: a vector of small strings.
thread_local std::vector<OpenScope> open_scopes;

std::string_view short_file_name(std::string_view path) {
  // Keep "dir/file.cc": enough to find the file, short enough to read.
  size_t last = path.rfind('/');
  if (last == std::string_view::npos || last == 0) return path;
  size_t before = path.rfind('/', last - 1);
  return before == std::string_view::npos ? path : path.substr(before + 1);
}

}  // namespace

Error::Error(std::string message, std::string op, std::source_location where, std::string scope)
    : message_(std::move(message)), op_(std::move(op)), where_(where), scope_(std::move(scope)) {
  what_ = op_.empty() ? message_ : str_cat(op_, ": ", message_);
  std::string context = has_location() ? str_cat("at ", format_location(where_)) : "";
  if (!scope_.empty()) context += str_cat(context.empty() ? "" : ", ", "in ", scope_);
  if (!context.empty()) what_ += str_cat(" (", context, ")");
}

std::string format_location(const std::source_location& where) {
  return str_cat(short_file_name(where.file_name()), ":", where.line());
}

CallSiteScope::CallSiteScope(const char* op, const std::source_location& where)
    : previous_(current_site) {
  current_site = CallSite{op, where};
}

CallSiteScope::~CallSiteScope() { current_site = previous_; }

const CallSite& current_call_site() { return current_site; }

NameScope::NameScope(std::string name, const std::source_location& where) {
  open_scopes.push_back({std::move(name), where});
}

NameScope::~NameScope() { open_scopes.pop_back(); }

std::string current_scope_path() {
  std::string path;
  for (const OpenScope& scope : open_scopes) {
    if (scope.name.empty()) continue;
    if (!path.empty()) path += '.';
    path += scope.name;
  }
  return path;
}

std::source_location innermost_scope_site(const std::source_location& fallback) {
  return open_scopes.empty() ? fallback : open_scopes.back().where;
}

namespace detail {

void throw_check_failure(std::string message) {
  const CallSite& site = current_site;
  const std::source_location where =
      site.where.line() != 0 ? site.where : innermost_scope_site(site.where);
  throw Error(std::move(message), site.op ? site.op : "", where, current_scope_path());
}

void throw_internal_failure(const char* condition, std::string message,
                            const std::source_location& where) {
  std::string text = str_cat("internal error: ", condition, " failed at ", format_location(where),
                             ". This is a Tandem bug; please report it.");
  if (!message.empty()) text += str_cat(" ", message);
  const CallSite& site = current_site;
  throw Error(std::move(text), site.op ? site.op : "", site.where, current_scope_path());
}

}  // namespace detail
}  // namespace tandem
