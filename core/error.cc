#include "core/error.h"

#include <utility>

namespace tandem {
namespace {

thread_local CallSite current_site;

std::string_view short_file_name(std::string_view path) {
  // Keep "dir/file.cc": enough to find the file, short enough to read.
  size_t last = path.rfind('/');
  if (last == std::string_view::npos || last == 0) return path;
  size_t before = path.rfind('/', last - 1);
  return before == std::string_view::npos ? path : path.substr(before + 1);
}

}  // namespace

Error::Error(std::string message, std::string op, std::source_location where)
    : message_(std::move(message)), op_(std::move(op)), where_(where) {
  what_ = op_.empty() ? message_ : str_cat(op_, ": ", message_);
  if (has_location()) what_ += str_cat(" (at ", format_location(where_), ")");
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

namespace detail {

void throw_check_failure(std::string message) {
  const CallSite& site = current_site;
  throw Error(std::move(message), site.op ? site.op : "", site.where);
}

void throw_internal_failure(const char* condition, std::string message,
                            const std::source_location& where) {
  std::string text = str_cat("internal error: ", condition, " failed at ", format_location(where),
                             ". This is a Tandem bug; please report it.");
  if (!message.empty()) text += str_cat(" ", message);
  const CallSite& site = current_site;
  throw Error(std::move(text), site.op ? site.op : "", site.where);
}

}  // namespace detail
}  // namespace tandem
