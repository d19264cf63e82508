// Linked into every test executable: after the last test, wait for every op
// still pending (tests often push work they never read), so that nothing is
// left running while the process exits and destroys its static state.
// (Pending oneDNN kernels at exit are a known hazard; see the exit notes in
// kernels/cpu/onednn.cc.)
#include "gtest/gtest.h"

#include "core/engine/engine.h"
#include "core/error.h"

namespace {

class DrainEngine : public ::testing::Environment {
 public:
  void TearDown() override {
    try {
      tandem::engine::current().wait_all();
    } catch (const tandem::Error&) {
      // A failure no test waited for: the tests that care assert on it.
    }
  }
};

[[maybe_unused]] ::testing::Environment* const drain_engine =
    ::testing::AddGlobalTestEnvironment(new DrainEngine);

}  // namespace
