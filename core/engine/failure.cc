#include "core/engine/failure.h"

#include <exception>
#include <string>

namespace tandem::engine {

std::shared_ptr<const Error> capture_failure(const char* op, const std::source_location& where) {
  std::string message;
  try {
    throw;
  } catch (const Error& e) {
    // An error that knows its own op and line (a node of a replayed graph
    // segment, trace/executor.h) keeps them; others get the op's push site.
    if (e.has_location() && !e.op().empty()) return std::make_shared<const Error>(e);
    message = e.message();
  } catch (const std::exception& e) {
    message = e.what();
  } catch (...) {
    message = "unknown exception (not derived from std::exception)";
  }
  return std::make_shared<const Error>(std::move(message), op, where);
}

}  // namespace tandem::engine
