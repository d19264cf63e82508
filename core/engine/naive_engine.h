// NaiveEngine: runs every op inside push(), on the caller's thread.
//
// Same contract as the threaded engine, but synchronous: an op that fails
// throws from push(), at the user's line, and a debugger's backtrace shows
// the user's code calling the kernel. Ops from several threads are
// serialized, so results are deterministic per thread interleaving.
#pragma once

#include <mutex>

#include "core/engine/engine.h"

namespace tandem::engine {

class NaiveEngine final : public Engine {
 public:
  void wait(Var* var) override;
  void wait_all() override;
  void delete_var(Var* var, OpFn on_delete) override;
  // Nothing is ever pending: both only refuse later pushes, once an op
  // running on another thread has returned.
  void shutdown(ShutdownMode mode) override;
  void shutdown_at_exit() override;
  EngineKind kind() const override { return EngineKind::kNaive; }
  int num_workers(Device device) const override { return device.is_cpu() ? 1 : 0; }

 protected:
  void push_op(OpFn fn, Device device, VarSpan reads, VarSpan writes, const char* name,
               const std::source_location& where) override;

 private:
  // Recursive: an op's function may release tensors, which deletes vars.
  std::recursive_mutex mu_;
  // Why pushes are refused; null while the engine runs. Guarded by mu_.
  const char* stopped_ = nullptr;
};

}  // namespace tandem::engine
