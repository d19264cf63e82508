#include "core/engine/naive_engine.h"

#include "core/cuda/runtime.h"
#include "core/engine/failure.h"
#include "core/engine/running_op.h"
#include "core/engine/var.h"
#include "core/error.h"
#include "core/profiler.h"

namespace tandem::engine {

void NaiveEngine::push_op(OpFn fn, Device device, VarSpan reads, VarSpan writes, const char* name,
                          const std::source_location& where) {
  if (device.is_cuda() && device.index() >= cuda_device_count()) {
    throw Error(str_cat("no device ", device.to_string(), ": this machine has ",
                        cuda_device_count(), " CUDA device(s)"),
                name, where);
  }
  std::lock_guard lock(mu_);
  if (stopped_ != nullptr) throw Error(stopped_, name, where);
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
    RunContext context{device, RunContext::kPushingThread};
    if (device.is_cuda()) {
      // Synchronous on the device too: a kernel's failure surfaces at its push.
      cuda::set_device(device.index());
      context.stream = cuda::stream(device.index());
      fn(context);
      cuda::synchronize(context.stream);
    } else {
      fn(context);
    }
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

void NaiveEngine::shutdown(ShutdownMode) {
  std::lock_guard lock(mu_);
  if (stopped_ == nullptr) stopped_ = kRefusedAfterShutdown;
}

void NaiveEngine::shutdown_at_exit() {
  std::lock_guard lock(mu_);
  if (stopped_ == nullptr) stopped_ = kRefusedAtExit;
}

void NaiveEngine::delete_var(Var* var, OpFn on_delete) {
  std::lock_guard lock(mu_);
  if (on_delete) on_delete(RunContext{});
  Var::destroy(var);
}

}  // namespace tandem::engine
