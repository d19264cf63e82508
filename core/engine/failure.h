// How an exception thrown by an op becomes the failure stored on its vars,
// and the errors of a stopped engine. Internal to the engines (see Note [Failures] in engine.h).
#pragma once

#include <memory>
#include <source_location>

#include "core/error.h"

namespace tandem::engine {

// Call inside a catch block: returns the in-flight exception as an Error
// carrying its message, the op's name and the op's push location (a
// tandem::Error that already names an op and a line keeps its own: one engine
// op may run several graph nodes). Any exception type is accepted, so
// nothing an op throws can escape a worker.
std::shared_ptr<const Error> capture_failure(const char* op, const std::source_location& where);

// Why a stopped engine refuses a push: the message of the tandem::Error the
// push throws.
inline constexpr const char* kRefusedAfterShutdown =
    "the engine has shut down; no more ops can be pushed";
inline constexpr const char* kRefusedAtExit =
    "the process is exiting (main returned or exit() was called), so the engine has stopped: no "
    "more ops can be pushed";
inline constexpr const char* kRefusedAfterForkInsideOp =
    "this process was forked from inside an op, where the engine could not stop its workers "
    "first: it cannot run ops";

}  // namespace tandem::engine
