#include "core/engine/threaded_engine.h"

#include <pthread.h>

#include <algorithm>
#include <exception>
#include <mutex>
#include <thread>
#include <utility>

#include "core/cuda/runtime.h"
#include "core/engine/failure.h"
#include "core/engine/object_pool.h"
#include "core/engine/running_op.h"
#include "core/profiler.h"

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

// Note [Polling in wait]
// A wait often ends within microseconds, and a futex sleep and wake-up cost
// a few microseconds each on a VM, so wait() polls for up to kWaitPollNanos
// before it sleeps. It polls with yield, not with the pause instruction:
// the op it waits for may be running on every core (an OpenMP team), and a
// frontend spinning in place would hold a core that team needs: with a
// pause loop a mid-sized matmul plus its wait took four times as long
// (bench/README.md, "Engine defaults").
constexpr int64_t kWaitPollNanos = 20'000;

namespace {

// Polls `done` until it is set or kWaitPollNanos have passed.
bool poll_until_done(const std::atomic<int>& done) {
  int64_t deadline = profiler::now_ns() + kWaitPollNanos;
  for (;;) {
    if (done.load(std::memory_order_acquire) != 0) return true;
    if (profiler::now_ns() > deadline) return false;
    std::this_thread::yield();
  }
}

}  // namespace

// Note [Bounded run-ahead]
// The frontend may run ahead of the workers, but not without limit: each op
// in flight holds its outputs (and, in training, its step's activations and
// autograd graph), so a training loop that never reads a value would hold
// every step's memory at once (3.5 GB for the tutorial's CNN, ~20 steps).
// With more than EngineOptions::max_in_flight ops pending, a push blocks
// until the workers have brought the count down to half of it (the gap keeps
// the frontend from waking for every single op). The default, 256, keeps one
// or two training steps queued, enough to keep the workers busy while the
// frontend sleeps; memory then returns to the caching allocator while it is
// still in the cache. Measured with bench_train (batch 128): peak RSS of the
// MLP 330 -> 80 MiB and of the CNN 3568 -> 380 MiB, the CNN 1.4x faster.
//
// Ops are a poor measure of memory on their own: a replayed (hybridized)
// step is a few ops, each writing many megabytes, so 256 ops meant many
// steps ahead, and an eager step of big convolutions holds hundreds of
// megabytes in 256 ops. So the bound also counts bytes: the new memory
// (Storages not yet written) that pending ops are about to write, from the
// push of the first op that writes a var (Var::append_write hands it the
// var's bytes) until that op finishes. With more than max_bytes_in_flight
// of it pending, a push blocks likewise until it is down to half, and so
// does the allocation of a new Storage (Engine::wait_for_memory): a
// replayed step allocates all its buffers before it pushes its ops, and
// waiting only at the push would let it hold the next step's buffers while
// the last step still runs. The bound is
// 16 MiB, the smallest of the bounds measured (bench/README.md, "Engine
// defaults"), and the one at which a hybridized step runs no further ahead
// than an eager one, for the lowest peak memory at the same speed: a
// hybridized CNN step writes ~70 MiB in one op, so it waits for the step
// before it, which is then as much run-ahead as its workers need.
// Pushes from inside an op (deleting vars as a closure dies) are never held
// back: they must not block a worker.

// Note [One CPU worker]
// The CPU gets one worker unless asked for more (EngineOptions, or
// TANDEM_NUM_WORKERS), as MXNet does. The cores are not idle for it: the big
// kernels (oneDNN primitives, elementwise loops over large tensors) spread
// over every core through OpenMP (Note [Thread budget] in kernels/dispatch.h),
// and tiny ops run on the pushing thread (below). A second worker would buy
// overlap only for independent mid-sized ops, and costs more than that on a
// small machine: each worker that starts a parallel kernel becomes the
// master of an OpenMP team of its own, and the idle team's threads spin on
// the cores the other team needs, while each op that moves from one worker
// to its successor on another pays a cross-core hand-off. On the 2-core
// development VM one worker trains both tutorial models faster than two
// (bench/README.md, "Engine defaults"). Programs with many independent
// chains of mid-sized ops can ask for more workers.
constexpr int kDefaultCpuWorkers = 1;

// Note [Tiny ops run inline]
// Handing an op to a worker costs the pusher ~1-3 us on a VM (the queue, a
// wake-up, cache lines that cross cores), more than an add of a few thousand
// floats takes. A tiny CPU op whose vars are all free (nothing pending on
// them) therefore runs at once on the pushing thread, through run_if_free:
// it claims its vars (all or none, so it cannot hold one while waiting for
// another), runs, stores a failure on its writes for a later wait, and
// releases them, so the program cannot tell where it ran. It needs no op
// record, no queue entry and no closure of its own: kernels::call runs a
// tiny kernel on the caller's tensors without copying anything, which makes
// such an op about a third cheaper than a pushed one that happens to run
// inline. Where anything it touches is pending, it is pushed like any op:
// the frontend never waits for a worker in order to run a tiny op, and in a
// training loop that runs ahead the small ops still go to the workers.
// Whether an op is tiny is for the pusher to say (kernels::call decides by
// element count). The pushing thread does not continue with the ops it
// unblocks; they go to the workers.

// Note [GPU ops complete at launch]
// Each CUDA device has one worker thread and one stream. The worker runs an
// op's function, which only enqueues kernels on the stream, and the op then
// counts as complete at once: every later op on the same device is enqueued
// on the same stream after it, so the device runs them in engine order
// without the host waiting for anything, and a chain of GPU ops costs one
// launch each, not a launch and a round trip. Memory follows the same order
// (Note [Device memory in stream order] in core/allocator.cc). Only an op
// that touches a var the stream does not order (CPU memory, for a copy
// between host and device, or another device's memory) completes when the
// device has run it: the worker records an event after it and an event
// watcher thread finishes the op when the event fires, while the worker
// goes on launching. Waiting on a var of a CUDA device (wait, wait_all, so
// reading values) then also waits for the device's stream, and reports a
// kernel that failed asynchronously; that and a copy between two GPUs,
// whose worker first waits for the other GPU's stream, are the only places
// a host thread waits for a device. MXNet's GPU engine and PyTorch's caching allocator make the
// same bet on stream order.

namespace {

// A GPU op that touches another GPU's memory (a copy between devices) may
// start only once that device has run what it launched on the memory
// before: the other stream does not order it. Rare, so it simply waits.
void wait_for_other_gpus(const OpRecord& op) {
  auto wait_for = [&](Var* var) {
    if (var->device().is_cuda() && var->device() != op.device) {
      cuda::synchronize(cuda::stream(var->device().index()));
    }
  };
  for (Var* var : op.reads) wait_for(var);
  for (Var* var : op.writes) wait_for(var);
}

// Whether every var of a GPU op lives on its device, so that the stream
// orders all of its accesses.
bool stream_orders_every_var(const OpRecord& op) {
  for (Var* var : op.reads) {
    if (var->device() != op.device) return false;
  }
  for (Var* var : op.writes) {
    if (var->device() != op.device) return false;
  }
  return true;
}

}  // namespace

// A thread blocked in wait(var), woken by its wait op.
struct WaitState {
  std::atomic<int> done{0};
  std::shared_ptr<const Error> failure;
};

// Note [Engines across fork]
// After fork() the child has only the thread that forked: an engine whose
// workers were running would queue the child's first op for threads that do
// not exist, and its first wait would hang. So, as MXNet does, a
// pthread_atfork handler drains every threaded engine before the fork
// (waiting for its pending ops, as wait_all does, without throwing their
// failures), joins its worker threads, and starts new ones afterwards, in
// the parent and in the child. Each new worker is a new OpenMP master, with
// a team of its own (kernels/cpu/onednn.cc releases the forking thread's
// team before the fork, for kernels run on the caller's thread). Limits:
// * no other thread of the program may be inside Tandem while it forks (the
//   child would inherit the locks such a thread holds; POSIX allows a child
//   of a threaded process little more), and an op must not fork: its engine
//   cannot stop the worker running it, and in the child it refuses every op
//   with a tandem::Error;
// * CUDA cannot be used in a child forked after CUDA was initialized (a CUDA
//   rule): there an op on a GPU throws tandem::Error at its push; CPU ops
//   work.
namespace {

struct ForkRegistry {
  std::mutex mu;
  std::vector<ThreadedEngine*> engines;
};

ForkRegistry& fork_registry() {
  static ForkRegistry* instance = new ForkRegistry;  // Never destroyed: fork may come late.
  return *instance;
}

}  // namespace

void ThreadedEngine::prepare_fork_all() {
  ForkRegistry& registry = fork_registry();
  registry.mu.lock();  // Released after the fork, in the parent and in the child.
  for (ThreadedEngine* engine : registry.engines) engine->prepare_fork();
}

void ThreadedEngine::after_fork_all_in_parent() {
  ForkRegistry& registry = fork_registry();
  for (ThreadedEngine* engine : registry.engines) engine->after_fork(false);
  registry.mu.unlock();
}

void ThreadedEngine::after_fork_all_in_child() {
  ForkRegistry& registry = fork_registry();
  for (ThreadedEngine* engine : registry.engines) engine->after_fork(true);
  registry.mu.unlock();
}

ThreadedEngine::ThreadedEngine(EngineOptions options)
    : max_in_flight_(options.max_in_flight),
      resume_in_flight_(options.max_in_flight / 2),
      max_bytes_in_flight_(options.max_bytes_in_flight),
      resume_bytes_in_flight_(options.max_bytes_in_flight / 2) {
  int workers = options.cpu_workers > 0 ? options.cpu_workers : kDefaultCpuWorkers;
  auto runner = [this](OpRecord* op, const RunContext& context) { return run(op, context); };
  cpu_pool_ = std::make_unique<WorkerPool>(Device::cpu(), workers, runner);
  for (int i = 0; i < cuda_device_count(); ++i) {
    cuda_pools_.push_back(std::make_unique<WorkerPool>(Device::cuda(i), 1, runner));
    cuda_watchers_.push_back(std::make_unique<EventWatcher>(
        Device::cuda(i), [this](OpRecord* op, std::shared_ptr<const Error> failure) {
          complete_after_event(op, std::move(failure));
        }));
  }
  static std::once_flag at_fork;
  std::call_once(at_fork, [] {
    pthread_atfork(prepare_fork_all, after_fork_all_in_parent, after_fork_all_in_child);
  });
  ForkRegistry& registry = fork_registry();
  std::lock_guard lock(registry.mu);
  registry.engines.push_back(this);
}

ThreadedEngine::~ThreadedEngine() {
  {
    ForkRegistry& registry = fork_registry();
    std::lock_guard lock(registry.mu);
    std::erase(registry.engines, this);
  }
  shutdown(ShutdownMode::kFinish);
}

void ThreadedEngine::prepare_fork() {
  if (!cpu_pool_) return;  // Shut down: no threads to stop.
  if (inside_op()) {
    forked_inside_op_ = true;
    return;
  }
  for (int64_t pending; (pending = pending_ops_.load(std::memory_order_acquire)) != 0;) {
    pending_ops_.wait(pending, std::memory_order_acquire);
  }
  cpu_pool_->stop_threads();
  for (auto& pool : cuda_pools_) pool->stop_threads();
  for (auto& watcher : cuda_watchers_) watcher->stop_thread();
  threads_stopped_for_fork_ = true;
}

void ThreadedEngine::after_fork(bool in_child) {
  if (std::exchange(forked_inside_op_, false) && in_child) stop(kRefusedAfterForkInsideOp);
  if (!std::exchange(threads_stopped_for_fork_, false)) return;
  try {
    cpu_pool_->start_threads();
    if (in_child) {
      cuda_lost_in_fork_ = !cuda_pools_.empty();
    } else {
      for (auto& pool : cuda_pools_) pool->start_threads();
      for (auto& watcher : cuda_watchers_) watcher->start_thread();
    }
  } catch (const std::exception& e) {
    // stopped_ may point at stop_message_: set it only while nothing does.
    if (stopped_.load() == nullptr) {
      stop_message_ = str_cat("the engine could not restart its workers after fork(): ", e.what());
      stop(stop_message_.c_str());
    }
  }
}

int ThreadedEngine::num_workers(Device device) const {
  if (device.is_cpu()) return cpu_pool_ ? cpu_pool_->size() : 0;
  bool known = !cuda_lost_in_fork_ && device.index() >= 0 &&
               device.index() < static_cast<int>(cuda_pools_.size());
  return known && cuda_pools_[device.index()] ? cuda_pools_[device.index()]->size() : 0;
}

WorkerPool& ThreadedEngine::pool_for(Device device, const std::source_location& where) {
  if (device.is_cpu()) return *cpu_pool_;
  if (cuda_lost_in_fork_) {
    throw Error(str_cat("cannot run on ", device.to_string(),
                        ": this process was forked after its parent initialized CUDA, which "
                        "CUDA does not allow (Note [Engines across fork]); start it with exec, "
                        "or fork before using a GPU"),
                "", where);
  }
  if (device.index() < 0 || device.index() >= static_cast<int>(cuda_pools_.size())) {
    throw Error(str_cat("no workers for device ", device.to_string(), ": this machine has ",
                        cuda_pools_.size(), " CUDA device(s)"),
                "", where);
  }
  return *cuda_pools_[device.index()];
}

void ThreadedEngine::synchronize_device(Device device) {
  if (device.is_cuda() && !cuda_lost_in_fork_) cuda::synchronize(cuda::stream(device.index()));
}

// Note [Refusing pushes once stopped]
// Once stopped (shutdown, exit, a fork from inside an op), the engine
// refuses every push with a tandem::Error and runs nothing inline, and
// stopping returns only when nothing pushed before is left. A push
// therefore counts itself in pending_ops_ before it reads `stopped_`, and a
// tiny op counts itself in inline_runs_ before it does, while stop() sets
// `stopped_` before it reads the counts (all sequentially consistent): a
// push either sees the stop and backs out, or is seen and waited for. On
// x86 the read after a read-modify-write costs nothing extra; the counter of
// inline runs is written by pushing threads only, on a cache line of its
// own, so it costs two uncontended atomic additions per tiny op.

void ThreadedEngine::push_op(OpFn fn, Device device, VarSpan reads, VarSpan writes,
                             const char* name, const std::source_location& where) {
  // Fail here, on the caller's thread, for a device this machine lacks.
  if (device.is_cuda()) pool_for(device, where);
  if (over_bound() && !inside_op()) throttle();
  pending_ops_.fetch_add(1);
  if (const char* reason = stopped_.load()) {
    release_pending(0);
    throw Error(reason, name, where);
  }
  try {
    enqueue(std::move(fn), device, reads, writes, name, where);
  } catch (...) {
    release_pending(0);  // Nothing was scheduled (out of memory for the op's record).
    throw;
  }
}

void ThreadedEngine::enqueue(OpFn fn, Device device, VarSpan reads, VarSpan writes,
                             const char* name, const std::source_location& where) {
  int64_t push_begin = profiler::enabled() ? profiler::now_ns() : 0;
  OpRecord* op = OpPool::create();
  try {
    op->reads.assign(reads.begin(), reads.end());
    op->writes.assign(writes.begin(), writes.end());
  } catch (...) {
    OpPool::destroy(op);
    throw;
  }
  op->fn = std::move(fn);
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
  // In flight from now until the op completes, which it cannot do before
  // push's own blocker is released.
  if (op->bytes != 0) pending_bytes_.fetch_add(op->bytes, std::memory_order_relaxed);
  // Release the vars already granted plus push's own blocker in one step.
  if (op->blockers.fetch_sub(ready_now + 1, std::memory_order_acq_rel) == ready_now + 1) {
    dispatch(op);
  }
}

bool ThreadedEngine::run_if_free(absl::FunctionRef<void(const RunContext&)> fn, VarSpan reads,
                                 VarSpan writes, const char* name,
                                 const std::source_location& where) {
  inline_runs_.fetch_add(1);  // See Note [Refusing pushes once stopped].
  if (stopped_.load() != nullptr) {
    end_inline_run();
    return false;  // push() refuses it.
  }
  const int64_t begin = profiler::enabled() ? profiler::now_ns() : 0;
  // Claim every var or none (Note [Tiny ops run inline]); several vars under
  // the lock that orders multi-var appends (Note [Pushing from several
  // threads]).
  size_t reads_claimed = 0, writes_claimed = 0;
  {
    std::unique_lock lock(multi_var_append_mu_, std::defer_lock);
    if (reads.size() + writes.size() >= 2) lock.lock();
    while (reads_claimed < reads.size() && reads[reads_claimed]->try_claim_read()) {
      ++reads_claimed;
    }
    if (reads_claimed == reads.size()) {
      while (writes_claimed < writes.size() && writes[writes_claimed]->try_claim_write()) {
        ++writes_claimed;
      }
    }
  }
  const bool claimed_all = reads_claimed == reads.size() && writes_claimed == writes.size();
  std::shared_ptr<const Error> failure;
  if (claimed_all) {
    for (Var* var : reads) {
      if ((failure = var->failure())) break;  // Skipped; the failure passes on.
    }
    if (!failure) {
      try {
        RunningOpScope running(name);
        fn(RunContext{Device::cpu(), RunContext::kPushingThread});
      } catch (...) {
        failure = capture_failure(name, where);
        note_failure(failure);
      }
    }
    for (Var* var : writes) var->set_failure(failure);
  }
  // Release what was claimed; ops queued behind it meanwhile may start.
  ReadyOps ready;
  for (size_t i = 0; i < reads_claimed; ++i) reads[i]->complete_read(ready);
  for (size_t i = 0; i < writes_claimed; ++i) writes[i]->complete_write(ready);
  for (OpRecord* op : ready) dispatch(op);
  if (begin != 0 && claimed_all) {
    // Its push and its run, as for a pushed op; no flow between them, as
    // both are on this thread.
    int64_t end = profiler::now_ns();
    profiler::record(profiler::EventKind::kPush, name, begin, end, 0);
    profiler::record(profiler::EventKind::kExecute, name, begin, end, 0);
  }
  end_inline_run();
  return claimed_all;
}

void ThreadedEngine::end_inline_run() {
  if (inline_runs_.fetch_sub(1) == 1 && stopped_.load() != nullptr) inline_runs_.notify_all();
}

void ThreadedEngine::dispatch(OpRecord* op) {
  if (op->waiter != nullptr) {
    finish_wait(op);
  } else if (op->device.is_cpu()) {
    cpu_pool_->submit(op);
  } else {
    cuda_pools_[op->device.index()]->submit(op);
  }
}

// Note [Ops that finish later] (engine.h): the op completes when both its
// function has returned and its Completion has been called, whichever comes
// last, with the first failure of either.
class ThreadedEngine::OpDeferral final : public Deferral {
 public:
  OpDeferral(ThreadedEngine* engine, OpRecord* op) : engine_(engine), op_(op) {}

  Completion defer() override {
    TANDEM_CHECK(state_ == nullptr, "an op deferred its completion twice");
    state_ = std::make_shared<State>(engine_, op_);
    return Completion([state = state_](std::exception_ptr failure) {
      std::shared_ptr<const Error> error;
      if (failure) {
        try {
          std::rethrow_exception(failure);
        } catch (...) {
          error = capture_failure(state->op->name, state->op->where);
        }
      }
      state->arrive(std::move(error));
    });
  }

  bool deferred() const { return state_ != nullptr; }
  // The function has returned (`failure`: it threw).
  void function_returned(std::shared_ptr<const Error> failure) { state_->arrive(failure); }

 private:
  struct State {
    State(ThreadedEngine* engine, OpRecord* op) : engine(engine), op(op) {}
    void arrive(std::shared_ptr<const Error> failure) {
      if (failure) {
        std::lock_guard lock(mu);
        if (!first_failure) first_failure = std::move(failure);
      }
      if (pending.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
      engine->complete_after_event(op, first_failure);
    }
    ThreadedEngine* const engine;
    OpRecord* const op;
    std::atomic<int> pending{2};
    std::mutex mu;
    std::shared_ptr<const Error> first_failure;
  };

  ThreadedEngine* const engine_;
  OpRecord* const op_;
  std::shared_ptr<State> state_;
};

OpRecord* ThreadedEngine::run(OpRecord* op, const RunContext& context) {
  std::shared_ptr<const Error> failure = failed_input(*op);
  if (!failure && cancelling_.load(std::memory_order_relaxed)) {
    failure = std::make_shared<const Error>("cancelled: the engine shut down before this op ran",
                                            op->name, op->where);
    note_failure(failure);
  }
  if (!failure) {
    int64_t begin = profiler::enabled() ? profiler::now_ns() : 0;
    OpDeferral deferral(this, op);
    try {
      RunningOpScope running(op->name);
      if (op->device.is_cuda()) wait_for_other_gpus(*op);
      RunContext with_deferral = context;
      if (op->device.is_cpu()) with_deferral.deferral = &deferral;
      op->fn(with_deferral);
    } catch (...) {
      failure = capture_failure(op->name, op->where);
      if (!deferral.deferred()) note_failure(failure);
    }
    if (begin != 0) {
      profiler::record(profiler::EventKind::kExecute, op->name, begin, profiler::now_ns(), op->id);
    }
    if (deferral.deferred()) {
      // The op, maybe completed by now, is the Completion's from here on.
      deferral.function_returned(std::move(failure));
      return nullptr;
    }
  }
  if (!failure && op->device.is_cuda() && !stream_orders_every_var(*op)) {
    // Note [GPU ops complete at launch]: the watcher completes it.
    void* event = nullptr;
    try {
      event = cuda::record_event(context.stream);
    } catch (...) {
      failure = capture_failure(op->name, op->where);
      note_failure(failure);
    }
    if (event != nullptr) {
      cuda_watchers_[op->device.index()]->watch(op, event);
      return nullptr;
    }
  }
  // A successful write makes the var healthy again.
  for (Var* var : op->writes) var->set_failure(failure);
  return complete(op, &context.device);
}

void ThreadedEngine::complete_after_event(OpRecord* op, std::shared_ptr<const Error> failure) {
  if (failure) note_failure(failure);
  for (Var* var : op->writes) var->set_failure(failure);
  complete(op, nullptr);
}

OpRecord* ThreadedEngine::complete(OpRecord* op, const Device* continue_on) {
  ReadyOps ready;
  for (Var* var : op->reads) var->complete_read(ready);
  for (Var* var : op->writes) var->complete_write(ready);
  // Destroying the closure may release tensors, which may delete vars and so
  // push deletion ops: do it while this op still counts as pending, so that
  // wait_all cannot return in between.
  op->fn.reset();
  const int64_t bytes = op->bytes;
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
  release_pending(bytes);
  return next;
}

void ThreadedEngine::release_pending(int64_t bytes) {
  bool bytes_resumed = false;
  if (bytes != 0) {
    int64_t before = pending_bytes_.fetch_sub(bytes);
    bytes_resumed = before > resume_bytes_in_flight_ && before - bytes <= resume_bytes_in_flight_;
  }
  int64_t left = pending_ops_.fetch_sub(1) - 1;
  if (left == 0 || ((left == resume_in_flight_ || bytes_resumed) && throttled_.load() != 0)) {
    pending_ops_.notify_all();
  }
}

bool ThreadedEngine::over_bound() const {
  return (max_in_flight_ > 0 && pending_ops_.load(std::memory_order_relaxed) > max_in_flight_) ||
         (max_bytes_in_flight_ > 0 &&
          pending_bytes_.load(std::memory_order_relaxed) > max_bytes_in_flight_);
}

bool ThreadedEngine::at_resume_level() const {
  return (max_in_flight_ == 0 || pending_ops_.load() <= resume_in_flight_) &&
         (max_bytes_in_flight_ == 0 || pending_bytes_.load() <= resume_bytes_in_flight_);
}

void ThreadedEngine::wait_for_memory() {
  if (max_bytes_in_flight_ > 0 &&
      pending_bytes_.load(std::memory_order_relaxed) > max_bytes_in_flight_ && !inside_op()) {
    throttle();
  }
}

void ThreadedEngine::throttle() {
  int64_t begin = profiler::enabled() ? profiler::now_ns() : 0;
  // Sequentially consistent with release_pending(): either the worker that
  // brings a count to its resume level sees `throttled_` and notifies, or
  // this thread sees the count already there and does not sleep. A
  // completion lowers the bytes before the ops, and this thread reads the
  // ops (the value it sleeps on) before the bytes: a completion it has not
  // seen changes the ops, so the sleep returns at once.
  throttled_.fetch_add(1);
  cpu_pool_->share_work();
  for (;;) {
    int64_t pending = pending_ops_.load();
    if (at_resume_level()) break;
    pending_ops_.wait(pending);
  }
  throttled_.fetch_sub(1);
  if (begin != 0) {
    profiler::record(profiler::EventKind::kWait, "throttle", begin, profiler::now_ns(), 0);
  }
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
    pending_ops_.fetch_add(1, std::memory_order_relaxed);
    schedule(op);
    if (!poll_until_done(state.done)) cpu_pool_->share_work();  // Note [Polling in wait]
    while (state.done.load(std::memory_order_acquire) == 0) state.done.wait(0);
    failure = std::move(state.failure);
  }
  if (!failure) synchronize_device(var->device());  // Note [GPU ops complete at launch]
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
  for (size_t i = 0; i < cuda_pools_.size(); ++i) {
    synchronize_device(Device::cuda(static_cast<int>(i)));  // Note [GPU ops complete at launch]
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
  pending_ops_.fetch_add(1, std::memory_order_relaxed);
  enqueue(
      [var, on_delete = std::move(on_delete)](const RunContext& context) mutable {
        if (on_delete) on_delete(context);
        var->mark_for_delete();
      },
      Device::cpu(), {}, {var}, "delete_var", std::source_location::current());
}

bool ThreadedEngine::stop(const char* reason) {
  const char* running = nullptr;
  return stopped_.compare_exchange_strong(running, reason);
}

void ThreadedEngine::finish_pending() {
  for (int runs; (runs = inline_runs_.load()) != 0;) inline_runs_.wait(runs);
  for (int64_t pending; (pending = pending_ops_.load()) != 0;) pending_ops_.wait(pending);
}

void ThreadedEngine::shutdown(ShutdownMode mode) {
  if (stop(kRefusedAfterShutdown)) {
    if (mode == ShutdownMode::kCancel) cancelling_.store(true);
    // Cancelled ops still run their bookkeeping, so the queue drains either way.
    finish_pending();
  }
  cpu_pool_.reset();
  cuda_pools_.clear();
  cuda_watchers_.clear();
}

void ThreadedEngine::shutdown_at_exit() {
  // From inside an op (an op that calls exit()), draining would wait for
  // that very op: stop only.
  if (stop(kRefusedAtExit) && !inside_op()) finish_pending();
}

}  // namespace tandem::engine
