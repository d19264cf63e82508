#include "core/engine/threaded_engine.h"

#include <algorithm>
#include <thread>

#include "core/engine/failure.h"
#include "core/engine/object_pool.h"
#include "core/engine/running_op.h"
#include "core/profiler.h"
#include "core/spinlock.h"

namespace tandem::engine {
namespace {

using OpPool = ObjectPool<OpRecord>;

// Each var once; a var both read and written is queued as a write only, and
// remembered in `written_inputs` so that its failure still skips the op.
void normalize_vars(OpRecord* op) {
  auto& reads = op->reads;
  auto& writes = op->writes;
  auto position = [](const auto& list, size_t end, Var* var) {
    return static_cast<size_t>(std::find(list.begin(), list.begin() + end, var) - list.begin());
  };
  size_t kept = 0;
  for (size_t i = 0; i < writes.size(); ++i) {
    if (position(writes, kept, writes[i]) == kept) writes[kept++] = writes[i];
  }
  writes.resize(kept);
  op->written_inputs = 0;
  kept = 0;
  for (size_t i = 0; i < reads.size(); ++i) {
    size_t w = position(writes, writes.size(), reads[i]);
    if (w < writes.size()) {
      op->written_inputs |= w < 64 ? uint64_t{1} << w : 0;
    } else if (position(reads, kept, reads[i]) == kept) {
      reads[kept++] = reads[i];
    }
  }
  reads.resize(kept);
}

// The failure of the first input that holds one: the op is then skipped and
// passes that failure on.
std::shared_ptr<const Error> failed_input(const OpRecord& op) {
  for (Var* var : op.reads) {
    if (auto failure = var->failure()) return failure;
  }
  for (size_t i = 0; i < op.writes.size() && i < 64; ++i) {
    if (op.written_inputs >> i & 1) {
      if (auto failure = op.writes[i]->failure()) return failure;
    }
  }
  return nullptr;
}

}  // namespace

// About 20 microseconds of polling in wait() before it sleeps.
constexpr int kWaitPolls = 20'000;

// A thread blocked in wait(var), woken by its wait op.
struct WaitState {
  std::atomic<int> done{0};
  std::shared_ptr<const Error> failure;
};

ThreadedEngine::ThreadedEngine(EngineOptions options) {
  int workers = options.cpu_workers > 0 ? options.cpu_workers
                                        : std::max(1u, std::thread::hardware_concurrency());
  cpu_pool_ = std::make_unique<WorkerPool>(
      Device::cpu(), workers,
      [this](OpRecord* op, const RunContext& context) { return run(op, context); });
}

ThreadedEngine::~ThreadedEngine() { shutdown(ShutdownMode::kFinish); }

int ThreadedEngine::num_workers(Device device) const {
  return device.is_cpu() && cpu_pool_ ? cpu_pool_->size() : 0;
}

WorkerPool& ThreadedEngine::pool_for(Device device, const std::source_location& where) {
  if (!device.is_cpu()) {
    throw Error(
        str_cat("no workers for device ", device.to_string(), ": this engine runs CPU ops only"),
        "", where);
  }
  return *cpu_pool_;
}

void ThreadedEngine::push_op(OpFn fn, Device device, VarSpan reads, VarSpan writes,
                             const char* name, const std::source_location& where) {
  if (stopped_.load(std::memory_order_relaxed)) {
    throw Error("the engine has shut down; no more ops can be pushed", name, where);
  }
  enqueue(std::move(fn), device, reads, writes, name, where);
}

void ThreadedEngine::enqueue(OpFn fn, Device device, VarSpan reads, VarSpan writes,
                             const char* name, const std::source_location& where) {
  int64_t push_begin = profiler::enabled() ? profiler::now_ns() : 0;
  pool_for(device, where);  // Fail here, on the caller's thread, for a bad device.
  OpRecord* op = OpPool::create();
  op->fn = std::move(fn);
  op->reads.assign(reads.begin(), reads.end());
  op->writes.assign(writes.begin(), writes.end());
  normalize_vars(op);
  op->device = device;
  op->name = name;
  op->where = where;
  op->engine = this;
  // Read the id before scheduling: the op may run and be recycled at once.
  uint64_t id = push_begin != 0 ? next_op_id_.fetch_add(1, std::memory_order_relaxed) : 0;
  op->id = id;
  schedule(op);
  if (push_begin != 0) {
    profiler::record(profiler::EventKind::kPush, name, push_begin, profiler::now_ns(), id);
  }
}

void ThreadedEngine::schedule(OpRecord* op) {
  pending_ops_.fetch_add(1, std::memory_order_relaxed);
  op->blockers.store(static_cast<int>(op->reads.size() + op->writes.size()) + 1,
                     std::memory_order_relaxed);
  int ready_now = 0;
  auto append_all = [&] {
    for (Var* var : op->reads) ready_now += var->append_read(op);
    for (Var* var : op->writes) ready_now += var->append_write(op);
  };
  if (op->reads.size() + op->writes.size() < 2) {
    append_all();
  } else {
    // See Note [Pushing from several threads].
    std::lock_guard lock(multi_var_append_mu_);
    append_all();
  }
  // Release the vars already granted plus push's own blocker in one step.
  if (op->blockers.fetch_sub(ready_now + 1, std::memory_order_acq_rel) == ready_now + 1) {
    dispatch(op);
  }
}

void ThreadedEngine::dispatch(OpRecord* op) {
  if (op->waiter != nullptr) {
    finish_wait(op);
  } else {
    cpu_pool_->submit(op);
  }
}

OpRecord* ThreadedEngine::run(OpRecord* op, const RunContext& context) {
  std::shared_ptr<const Error> failure = failed_input(*op);
  if (!failure && cancelling_.load(std::memory_order_relaxed)) {
    failure = std::make_shared<const Error>("cancelled: the engine shut down before this op ran",
                                            op->name, op->where);
    note_failure(failure);
  }
  if (!failure) {
    int64_t begin = profiler::enabled() ? profiler::now_ns() : 0;
    try {
      RunningOpScope running(op->name);
      op->fn(context);
    } catch (...) {
      failure = capture_failure(op->name, op->where);
      note_failure(failure);
    }
    if (begin != 0) {
      profiler::record(profiler::EventKind::kExecute, op->name, begin, profiler::now_ns(), op->id);
    }
  }
  // A successful write makes the var healthy again.
  for (Var* var : op->writes) var->set_failure(failure);
  return complete(op, &context.device);
}

OpRecord* ThreadedEngine::complete(OpRecord* op, const Device* continue_on) {
  ReadyOps ready;
  for (Var* var : op->reads) var->complete_read(ready);
  for (Var* var : op->writes) var->complete_write(ready);
  // Destroying the closure may release tensors, which may delete vars and so
  // push deletion ops: do it while this op still counts as pending, so that
  // wait_all cannot return in between.
  op->fn.reset();
  OpPool::destroy(op);

  OpRecord* next = nullptr;
  for (OpRecord* unblocked : ready) {
    if (next == nullptr && continue_on != nullptr && unblocked->waiter == nullptr &&
        unblocked->device == *continue_on) {
      next = unblocked;  // Run it on this worker, skipping the queue.
    } else {
      dispatch(unblocked);
    }
  }
  if (pending_ops_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_ops_.notify_all();
  return next;
}

void ThreadedEngine::finish_wait(OpRecord* op) {
  WaitState* state = op->waiter;
  state->failure = op->reads.front()->failure();
  complete(op, nullptr);
  // The waiting thread may return (destroying `state`) as soon as it sees done.
  state->done.store(1, std::memory_order_release);
  state->done.notify_one();
}

void ThreadedEngine::wait(Var* var) {
  refuse_wait_inside_op("wait()");
  int64_t begin = profiler::enabled() ? profiler::now_ns() : 0;
  std::shared_ptr<const Error> failure;
  if (var->readable_now()) {
    failure = var->failure();
  } else {
    WaitState state;
    OpRecord* op = OpPool::create();
    op->reads.push_back(var);
    op->device = Device::cpu();
    op->name = "wait";
    op->engine = this;
    op->waiter = &state;
    schedule(op);
    // The op usually finishes within microseconds: poll briefly before
    // sleeping, for the reason in Note [One spinning worker] (worker_pool.h).
    for (int i = 0; i < kWaitPolls && state.done.load(std::memory_order_acquire) == 0; ++i) {
      cpu_relax();
    }
    if (state.done.load(std::memory_order_acquire) == 0) cpu_pool_->share_work();
    while (state.done.load(std::memory_order_acquire) == 0) state.done.wait(0);
    failure = std::move(state.failure);
  }
  if (begin != 0)
    profiler::record(profiler::EventKind::kWait, "wait", begin, profiler::now_ns(), 0);
  if (failure) throw_failure(failure);
}

void ThreadedEngine::wait_all() {
  refuse_wait_inside_op("wait_all()");
  int64_t begin = profiler::enabled() ? profiler::now_ns() : 0;
  if (pending_ops_.load(std::memory_order_acquire) != 0) cpu_pool_->share_work();
  for (int64_t pending; (pending = pending_ops_.load(std::memory_order_acquire)) != 0;) {
    pending_ops_.wait(pending, std::memory_order_acquire);
  }
  if (begin != 0) {
    profiler::record(profiler::EventKind::kWait, "wait_all", begin, profiler::now_ns(), 0);
  }
  std::shared_ptr<const Error> first;
  {
    std::lock_guard lock(failures_mu_);
    if (unreported_.empty()) return;
    first = unreported_.front();
    unreported_.clear();
  }
  throw Error(*first);
}

void ThreadedEngine::note_failure(const std::shared_ptr<const Error>& failure) {
  std::lock_guard lock(failures_mu_);
  unreported_.push_back(failure);
}

void ThreadedEngine::throw_failure(const std::shared_ptr<const Error>& failure) {
  {
    std::lock_guard lock(failures_mu_);
    std::erase(unreported_, failure);
  }
  throw Error(*failure);
}

void ThreadedEngine::delete_var(Var* var, OpFn on_delete) {
  if (var->idle()) {
    // Nothing queued, and the caller guarantees nothing will be: free now.
    if (on_delete) on_delete(RunContext{});
    Var::destroy(var);
    return;
  }
  // Not push(): vars are deleted while shutdown drains the last ops too.
  enqueue(
      [var, on_delete = std::move(on_delete)](const RunContext& context) mutable {
        if (on_delete) on_delete(context);
        var->mark_for_delete();
      },
      Device::cpu(), {}, {var}, "delete_var", std::source_location::current());
}

void ThreadedEngine::shutdown(ShutdownMode mode) {
  if (stopped_.exchange(true)) return;
  if (mode == ShutdownMode::kCancel) cancelling_.store(true);
  // Cancelled ops still run their bookkeeping, so the queue drains either way.
  for (int64_t pending; (pending = pending_ops_.load(std::memory_order_acquire)) != 0;) {
    pending_ops_.wait(pending, std::memory_order_acquire);
  }
  cpu_pool_.reset();
}

}  // namespace tandem::engine
