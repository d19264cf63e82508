#include "core/engine/running_op.h"

#include "core/error.h"

namespace tandem::engine {
namespace {

thread_local const char* running_op = nullptr;

}  // namespace

RunningOpScope::RunningOpScope(const char* op) : previous_(running_op) { running_op = op; }

RunningOpScope::~RunningOpScope() { running_op = previous_; }

bool inside_op() { return running_op != nullptr; }

void refuse_wait_inside_op(const char* what) {
  TANDEM_CHECK(running_op == nullptr, what, " called from inside op '", running_op,
               "': an op must not wait for other ops (on the threaded engine it would hold its "
               "worker while waiting, which can deadlock)");
}

}  // namespace tandem::engine
