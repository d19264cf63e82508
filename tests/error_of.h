// What a tandem::Error thrown by a piece of test code says.
#pragma once

#include <exception>
#include <string>

#include <gtest/gtest.h>

#include "core/error.h"

namespace tandem::testing {

// Runs `fn`, which must throw tandem::Error, and returns its what() (with the
// op and source line). Nothing thrown, or another exception, fails the test
// and returns "".
template <class Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected tandem::Error, got another exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "no tandem::Error was thrown";
  return "";
}

// Runs `fn` and returns the message of the tandem::Error it throws (without
// the op and source line), or "" if it throws none.
template <class Fn>
std::string error_message_of(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.message();
  }
  return "";
}

}  // namespace tandem::testing
