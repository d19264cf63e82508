#include "core/engine/naive_engine.h"

#include "core/engine/failure.h"
#include "core/engine/running_op.h"
#include "core/engine/var.h"
#include "core/error.h"
#include "core/profiler.h"

namespace tandem::engine {

void NaiveEngine::push_op(OpFn fn, Device device, VarSpan reads, VarSpan writes, const char* name,
                          const std::source_location& where, OpCost /*every op runs inline*/) {
  if (!device.is_cpu()) {
    throw Error(
        str_cat("no workers for device ", device.to_string(), ": this engine runs CPU ops only"),
        name, where);
  }
  std::lock_guard lock(mu_);
  // Every input, including one that is also written (an in-place update).
  for (Var* var : reads) {
    if (std::shared_ptr<const Error> failure = var->failure()) {
      // An input is the output of a failed op: fail the same way, at once.
      for (Var* written : writes) written->set_failure(failure);
      throw Error(*failure);
    }
  }
  int64_t begin = profiler::enabled() ? profiler::now_ns() : 0;
  std::shared_ptr<const Error> failure;
  try {
    RunningOpScope running(name);
    fn(RunContext{device, 0});
  } catch (...) {
    failure = capture_failure(name, where);
  }
  if (begin != 0)
    profiler::record(profiler::EventKind::kExecute, name, begin, profiler::now_ns(), 0);
  for (Var* var : writes) var->set_failure(failure);
  if (failure) throw Error(*failure);
}

void NaiveEngine::wait(Var* var) {
  refuse_wait_inside_op("wait()");
  std::lock_guard lock(mu_);
  if (std::shared_ptr<const Error> failure = var->failure()) throw Error(*failure);
}

void NaiveEngine::wait_all() { refuse_wait_inside_op("wait_all()"); }

void NaiveEngine::delete_var(Var* var, OpFn on_delete) {
  std::lock_guard lock(mu_);
  if (on_delete) on_delete(RunContext{});
  Var::destroy(var);
}

}  // namespace tandem::engine
