#include "distributed/mpi_communicator.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <limits>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/profiler.h"

#ifdef TANDEM_WITH_NCCL
#include "distributed/nccl_collectives.h"
#endif

namespace tandem::distributed {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kArrivalTag = 7;
constexpr int64_t kReadAnnouncementsEvery = 64;
constexpr int kPollMicros = 50;

// The MPI type of a reduction's elements; other dtypes travel as bytes.
MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return MPI_FLOAT;
    case DType::kFloat64:
      return MPI_DOUBLE;
    case DType::kInt32:
      return MPI_INT32_T;
    case DType::kInt64:
      return MPI_INT64_T;
    case DType::kUInt8:
      return MPI_UINT8_T;
    default:
      return MPI_BYTE;
  }
}

MPI_Op mpi_op(kernels::Reduction reduction) {
  switch (reduction) {
    case kernels::Reduction::kMax:
      return MPI_MAX;
    case kernels::Reduction::kMin:
      return MPI_MIN;
    default:
      return MPI_SUM;  // A mean divides afterwards.
  }
}

// A count MPI can take (an int), of elements or of bytes.
int mpi_count(const Tensor& t, bool as_bytes) {
  const int64_t count = as_bytes ? static_cast<int64_t>(t.nbytes()) : t.numel();
  TANDEM_CHECK(count <= std::numeric_limits<int>::max(), "a collective of ", count,
               as_bytes ? " bytes" : " elements", " is larger than MPI's limit of ",
               std::numeric_limits<int>::max(), "; split the tensor");
  return static_cast<int>(count);
}

template <class T>
void divide(const Tensor& t, int size) {
  T* data = static_cast<T*>(t.raw_data());
  for (int64_t i = 0, n = t.numel(); i < n; ++i) data[i] /= static_cast<T>(size);
}

}  // namespace

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return str_cat("MPI error ", code);
  return std::string(text, static_cast<size_t>(length));
}

struct MpiCommunicator::State {
  struct Pending {
    kernels::CollectiveCall call;
    engine::Completion done;
  };

  MPI_Comm data = MPI_COMM_NULL;      // The collectives.
  MPI_Comm arrivals = MPI_COMM_NULL;  // Note [A collective that does not finish].
  int group = 0;
  int rank = 0;
  int size = 1;
  std::chrono::milliseconds timeout{0};

  std::mutex mu;                  // Guards everything below up to the threads.
  std::condition_variable wake;   // The communication thread: work, or stop.
  std::condition_variable watch;  // The watchdog: stop.
  std::deque<Pending> queue;
  std::atomic<int> queued{0};  // queue.size(), for polling without the lock.
  bool stopping = false;
  bool loop_ended = false;
  std::string broken;    // The message of the collective that broke the group.
  int64_t sequence = 0;  // Collectives this rank has started.
  // The collective inside MPI now, if any: until its deadline the
  // communication thread finishes it, after it the watchdog fails it.
  bool armed = false;
  Clock::time_point deadline;
  engine::Completion current;
  kernels::CollectiveKind current_kind = kernels::CollectiveKind::kAllReduce;
  std::condition_variable ended;  // loop_ended became true.

  std::thread thread;
  std::thread watchdog;
  bool stuck = false;  // Set by stop().

#ifdef TANDEM_WITH_NCCL
  std::unique_ptr<NcclCollectives> gpu;  // Note [Collectives of GPU tensors].
#endif

  std::mutex arrivals_mu;                // Guards the announcements.
  std::vector<int64_t> peer_started;     // The latest each peer announced.
  std::vector<int64_t> announce_buffer;  // One per peer, alive while its send is.
  std::vector<MPI_Request> announce_request;

  void loop();
  void watch_deadlines();
  void execute(Pending& pending);
  // MPI's blocking call for `call`: its error code. Throws tandem::Error
  // for a call MPI cannot take.
  int exchange(const kernels::CollectiveCall& call);
  void announce(int64_t number);
  void read_announcements();
  std::string who_is_missing(int64_t number);
  void fail(engine::Completion& done, const std::string& message);
};

MpiCommunicator::MpiCommunicator(MPI_Comm comm, int group, std::chrono::milliseconds timeout)
    : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.group = group;
  s.timeout = timeout;
  auto check = [&](int code, const char* what) {
    TANDEM_CHECK(code == MPI_SUCCESS, what, " failed for process group ", group, ": ",
                 mpi_error_text(code));
  };
  check(MPI_Comm_dup(comm, &s.data), "MPI_Comm_dup");
  check(MPI_Comm_dup(comm, &s.arrivals), "MPI_Comm_dup");
  // Errors come back as codes, which become tandem::Errors, instead of
  // aborting every process.
  MPI_Comm_set_errhandler(s.data, MPI_ERRORS_RETURN);
  MPI_Comm_set_errhandler(s.arrivals, MPI_ERRORS_RETURN);
  MPI_Comm_rank(s.data, &s.rank);
  MPI_Comm_size(s.data, &s.size);
  s.peer_started.assign(static_cast<size_t>(s.size), 0);
  s.announce_buffer.assign(static_cast<size_t>(s.size), 0);
  s.announce_request.assign(static_cast<size_t>(s.size), MPI_REQUEST_NULL);
#ifdef TANDEM_WITH_NCCL
  s.gpu = std::make_unique<NcclCollectives>(comm, group);
#endif
  s.thread = std::thread([&s] { s.loop(); });
  s.watchdog = std::thread([&s] { s.watch_deadlines(); });
}

MpiCommunicator::~MpiCommunicator() {
  stop();
  // A thread still inside MPI keeps using the state: it outlives us.
  if (state_->stuck) static_cast<void>(state_.release());
}

int MpiCommunicator::rank() const { return state_->rank; }
int MpiCommunicator::size() const { return state_->size; }

std::string MpiCommunicator::broken() const {
  std::lock_guard lock(state_->mu);
  return state_->broken;
}

bool MpiCommunicator::stuck() const { return state_->stuck; }

void MpiCommunicator::start(kernels::CollectiveCall call, engine::Completion done) {
  State& s = *state_;
  {
    std::lock_guard lock(s.mu);
    if (!s.stopping) {
      s.queue.push_back({std::move(call), std::move(done)});
      s.queued.fetch_add(1, std::memory_order_release);
      s.wake.notify_one();
      return;
    }
  }
  done(std::make_exception_ptr(
      Error(str_cat("process group ", s.group, " has been shut down (distributed::finalize)"))));
}

void MpiCommunicator::stop() {
  State& s = *state_;
  {
    std::unique_lock lock(s.mu);
    if (s.stopping) return;
    s.stopping = true;
    s.wake.notify_one();
    s.watch.notify_one();
    // A collective whose late ranks arrived after its timeout still returns;
    // one whose ranks never come keeps its thread inside MPI for good.
    s.stuck = !s.ended.wait_for(lock, std::chrono::seconds(2), [&] { return s.loop_ended; });
  }
  if (s.stuck) {
    s.thread.detach();
  } else {
    s.thread.join();
  }
  s.watchdog.join();
  for (MPI_Request& request : s.announce_request) {
    if (request != MPI_REQUEST_NULL) MPI_Request_free(&request);
  }
  if (!s.stuck) {
    MPI_Comm_free(&s.data);
    MPI_Comm_free(&s.arrivals);
#ifdef TANDEM_WITH_NCCL
    s.gpu->stop();
#endif
  }
}

void MpiCommunicator::launch(const kernels::CollectiveCall& call, int device, void* stream) {
#ifdef TANDEM_WITH_NCCL
  state_->gpu->launch(call, device, stream);
#else
  kernels::Communicator::launch(call, device, stream);
#endif
}

void MpiCommunicator::State::loop() {
  // Its own track in a TANDEM_PROFILE timeline: the exchanges, beside the
  // worker's kernels they overlap.
  profiler::set_thread_name(str_cat("communication (process group ", group, ")"));
  for (;;) {
    Pending pending;
    // Collectives come in bursts (a step's buckets, a barrier and what
    // follows it): a short poll before sleeping saves the next one a
    // wake-up, tens of microseconds on a VM.
    const Clock::time_point poll_until = Clock::now() + std::chrono::microseconds(kPollMicros);
    while (queued.load(std::memory_order_acquire) == 0 && Clock::now() < poll_until) {
      std::this_thread::yield();
    }
    {
      std::unique_lock lock(mu);
      wake.wait(lock, [&] { return stopping || !queue.empty(); });
      if (queue.empty()) {  // Stopping, and nothing left to do.
        loop_ended = true;
        ended.notify_all();
        return;
      }
      pending = std::move(queue.front());
      queue.pop_front();
      queued.fetch_sub(1, std::memory_order_relaxed);
    }
    execute(pending);
  }
}

void MpiCommunicator::State::fail(engine::Completion& done, const std::string& message) {
  done(std::make_exception_ptr(Error(message)));
}

void MpiCommunicator::State::execute(Pending& pending) {
  const kernels::CollectiveCall& call = pending.call;
  const std::string_view name = kernels::collective_name(call.kind);
  int64_t number = 0;
  std::string broken_by;
  {
    std::lock_guard lock(mu);
    broken_by = broken;
    if (broken_by.empty()) number = ++sequence;
  }
  if (!broken_by.empty()) {  // The Completion is called with no lock held.
    fail(pending.done, str_cat("process group ", group, " is broken, so ", name,
                               " cannot run: an earlier collective failed: ", broken_by));
    return;
  }
  const int64_t started_ns = profiler::enabled() ? profiler::now_ns() : 0;
  announce(number);
  {
    std::lock_guard lock(mu);
    armed = true;
    deadline = Clock::now() + timeout;
    current = std::move(pending.done);
    current_kind = call.kind;
  }
  int code = MPI_SUCCESS;
  std::exception_ptr refused;
  try {
    code = exchange(call);
  } catch (...) {
    refused = std::current_exception();
  }
  engine::Completion done;
  {
    std::lock_guard lock(mu);
    armed = false;
    done = std::move(current);  // Empty if the watchdog has failed it.
  }
  // The peers' announcements wait in MPI's queue of unexpected messages;
  // reading them now and then keeps it short (and the watchdog reads them
  // all when it needs them).
  if (number % kReadAnnouncementsEvery == 0) read_announcements();
  if (!done) return;
  if (started_ns != 0) {
    profiler::record(profiler::EventKind::kExecute, name.data(), started_ns, profiler::now_ns(), 0);
  }
  if (refused) {
    done(refused);
    return;
  }
  if (code != MPI_SUCCESS) {
    const std::string message =
        str_cat(name, " #", number, " of process group ", group, " (rank ", rank, " of ", size,
                ") failed in MPI: ", mpi_error_text(code));
    {
      std::lock_guard lock(mu);
      broken = message;
    }
    fail(done, message);
    return;
  }
  if ((call.kind == kernels::CollectiveKind::kAllReduce ||
       call.kind == kernels::CollectiveKind::kReduceScatter) &&
      call.reduction == kernels::Reduction::kMean) {
    if (call.output.dtype() == DType::kFloat64) {
      divide<double>(call.output, size);
    } else {
      divide<float>(call.output, size);
    }
  }
  done();
}

void MpiCommunicator::State::watch_deadlines() {
  std::unique_lock lock(mu);
  // It looks now and then (Note [A collective that does not finish]).
  const auto every = std::clamp<std::chrono::milliseconds>(
      timeout / 20, std::chrono::milliseconds(10), std::chrono::milliseconds(1000));
  for (;;) {
    if (watch.wait_for(lock, every, [&] { return stopping; })) return;
    // Not armed: no collective inside MPI; no Completion: this one has
    // already failed, its thread still inside MPI.
    if (!armed || !current || Clock::now() < deadline) continue;
    const int64_t number = sequence;
    const std::string_view name = kernels::collective_name(current_kind);
    // The collective is past its deadline: fail it, and the group with it.
    engine::Completion done = std::move(current);
    lock.unlock();
    read_announcements();
    const std::string message = str_cat(name, " #", number, " of process group ", group, " (rank ",
                                        rank, " of ", size, ") did not finish within ",
                                        timeout.count() / 1000.0, " s: ", who_is_missing(number));
    lock.lock();
    broken = message;
    lock.unlock();
    fail(done, message);
    lock.lock();
  }
}

int MpiCommunicator::State::exchange(const kernels::CollectiveCall& call) {
  if (call.kind == kernels::CollectiveKind::kBarrier) return MPI_Barrier(data);
  const Tensor& in = call.input;
  const Tensor& out = call.output;
  const MPI_Datatype type = mpi_type(in.dtype());
  const bool as_bytes = type == MPI_BYTE;
  switch (call.kind) {
    case kernels::CollectiveKind::kAllReduce:
      return MPI_Allreduce(in.raw_data(), out.raw_data(), mpi_count(in, false), type,
                           mpi_op(call.reduction), data);
    case kernels::CollectiveKind::kBroadcast:
      if (rank == call.root && in.nbytes() != 0) {
        std::memcpy(out.raw_data(), in.raw_data(), in.nbytes());
      }
      return MPI_Bcast(out.raw_data(), mpi_count(out, as_bytes), type, call.root, data);
    case kernels::CollectiveKind::kAllGather:
      return MPI_Allgather(in.raw_data(), mpi_count(in, as_bytes), type, out.raw_data(),
                           mpi_count(in, as_bytes), type, data);
    case kernels::CollectiveKind::kReduceScatter:
      return MPI_Reduce_scatter_block(in.raw_data(), out.raw_data(), mpi_count(out, false), type,
                                      mpi_op(call.reduction), data);
    case kernels::CollectiveKind::kBarrier:
      break;
  }
  return MPI_SUCCESS;
}

void MpiCommunicator::State::announce(int64_t number) {
  std::lock_guard lock(arrivals_mu);
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    MPI_Request& request = announce_request[static_cast<size_t>(peer)];
    if (request != MPI_REQUEST_NULL) {
      int sent = 0;
      MPI_Test(&request, &sent, MPI_STATUS_IGNORE);
      if (!sent) continue;  // The peer learns a later number instead.
    }
    announce_buffer[static_cast<size_t>(peer)] = number;
    if (MPI_Isend(&announce_buffer[static_cast<size_t>(peer)], 1, MPI_INT64_T, peer, kArrivalTag,
                  arrivals, &request) != MPI_SUCCESS) {
      request = MPI_REQUEST_NULL;  // A peer that is gone: the timeout will name it.
    }
  }
}

void MpiCommunicator::State::read_announcements() {
  std::lock_guard lock(arrivals_mu);
  for (;;) {
    int waiting = 0;
    MPI_Status status;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kArrivalTag, arrivals, &waiting, &status) != MPI_SUCCESS ||
        !waiting) {
      return;
    }
    int64_t started = 0;
    if (MPI_Recv(&started, 1, MPI_INT64_T, status.MPI_SOURCE, kArrivalTag, arrivals,
                 MPI_STATUS_IGNORE) != MPI_SUCCESS) {
      return;
    }
    int64_t& latest = peer_started[static_cast<size_t>(status.MPI_SOURCE)];
    latest = std::max(latest, started);
  }
}

std::string MpiCommunicator::State::who_is_missing(int64_t number) {
  std::lock_guard lock(arrivals_mu);
  std::string missing;
  int count = 0;
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank || peer_started[static_cast<size_t>(peer)] >= number) continue;
    missing += str_cat(count++ == 0 ? "" : ", ", peer, " (last started #",
                       peer_started[static_cast<size_t>(peer)], ")");
  }
  if (count == 0) {
    return "every rank arrived, but the exchange did not finish (a network fault, or a rank that "
           "died meanwhile)";
  }
  return str_cat(count == 1 ? "rank " : "ranks ", missing, " did not arrive");
}

}  // namespace tandem::distributed
