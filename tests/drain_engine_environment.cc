// Linked into every test executable: after each test, wait for every op it
// left pending (tests often push work they never read), so that no test's
// work runs into the next one's or into the process's exit. A failure of
// such an op that no wait reported fails the test that pushed it: an op that
// failed without anyone noticing is a test that cannot fail. A test that
// expects a failure waits for it (Note [Failures] in core/engine/engine.h:
// each failure is reported once, by the first wait that throws it).
#include "gtest/gtest.h"

#include "core/engine/engine.h"
#include "core/error.h"

namespace {

class DrainEngineAfterEachTest : public ::testing::EmptyTestEventListener {
 public:
  // Before the result printer's OnTestEnd (see the registration below), so
  // that the failure is part of the test's printed result.
  void OnTestEnd(const ::testing::TestInfo& /*test*/) override {
    try {
      tandem::engine::current().wait_all();
    } catch (const tandem::Error& e) {
      ADD_FAILURE() << "an op pushed by this test failed and no wait reported it: " << e.what();
    }
  }
};

// The listener goes before the default result printer, which prints a
// test's result in its own OnTestEnd.
[[maybe_unused]] const bool drain_engine_registered = [] {
  ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
  ::testing::TestEventListener* printer = listeners.Release(listeners.default_result_printer());
  listeners.Append(new DrainEngineAfterEachTest);
  if (printer != nullptr) listeners.Append(printer);
  return true;
}();

}  // namespace
