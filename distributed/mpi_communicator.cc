#include "distributed/mpi_communicator.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <limits>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "core/error.h"

namespace tandem::distributed {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kArrivalTag = 7;

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return str_cat("MPI error ", code);
  return std::string(text, static_cast<size_t>(length));
}

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

  std::mutex mu;
  std::condition_variable wake;
  std::deque<Pending> queue;
  bool stopping = false;
  std::string broken;  // Set once, by the thread; read under mu.
  // The collectives that did not finish in time: MPI may still write their
  // outputs (a late rank may yet arrive), so their memory lives as long as
  // the communicator.
  struct Abandoned {
    kernels::CollectiveCall call;
    MPI_Request request;
  };
  std::vector<Abandoned> abandoned;
  std::thread thread;
  bool stuck = false;  // Set by stop().

  // Used by the thread only.
  int64_t sequence = 0;                  // Collectives started by this rank.
  std::vector<int64_t> peer_started;     // The latest each peer announced.
  std::vector<int64_t> announce_buffer;  // One per peer, alive while its send is.
  std::vector<MPI_Request> announce_request;

  void loop();
  void execute(Pending& pending);
  // Starts MPI's call for `call`; throws tandem::Error if MPI refuses.
  MPI_Request begin(const kernels::CollectiveCall& call);
  void announce();
  void read_announcements();
  std::string who_is_missing() const;
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
  s.thread = std::thread([&s] { s.loop(); });
}

MpiCommunicator::~MpiCommunicator() { stop(); }

int MpiCommunicator::rank() const { return state_->rank; }
int MpiCommunicator::size() const { return state_->size; }

std::string MpiCommunicator::broken() const {
  std::lock_guard lock(state_->mu);
  return state_->broken;
}

void MpiCommunicator::start(kernels::CollectiveCall call, engine::Completion done) {
  State& s = *state_;
  {
    std::lock_guard lock(s.mu);
    if (!s.stopping) {
      s.queue.push_back({std::move(call), std::move(done)});
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
    std::lock_guard lock(s.mu);
    if (s.stopping && !s.thread.joinable()) return;
    s.stopping = true;
    s.wake.notify_one();
  }
  if (s.thread.joinable()) s.thread.join();
  for (MPI_Request& request : s.announce_request) {
    if (request != MPI_REQUEST_NULL) MPI_Request_free(&request);
  }
  // A collective that timed out may still finish, if its late ranks arrived
  // after all; one that has not after a grace period never will.
  const Clock::time_point give_up = Clock::now() + std::chrono::seconds(2);
  bool stuck = false;
  for (State::Abandoned& a : s.abandoned) {
    int finished = 0;
    while (MPI_Test(&a.request, &finished, MPI_STATUS_IGNORE) == MPI_SUCCESS && !finished &&
           Clock::now() < give_up) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    stuck = stuck || !finished;
  }
  s.stuck = stuck;
  // Freeing a communicator with a collective still inside MPI could wait
  // for it forever.
  if (!stuck) {
    MPI_Comm_free(&s.data);
    MPI_Comm_free(&s.arrivals);
  }
}

bool MpiCommunicator::stuck() const { return state_->stuck; }

void MpiCommunicator::State::loop() {
  for (;;) {
    Pending pending;
    {
      std::unique_lock lock(mu);
      wake.wait(lock, [&] { return stopping || !queue.empty(); });
      if (queue.empty()) return;  // Stopping, and nothing left to do.
      pending = std::move(queue.front());
      queue.pop_front();
    }
    execute(pending);
  }
}

void MpiCommunicator::State::execute(Pending& pending) {
  const kernels::CollectiveCall& call = pending.call;
  const std::string_view name = kernels::collective_name(call.kind);
  std::string broken_by;
  {
    std::lock_guard lock(mu);
    broken_by = broken;
  }
  if (!broken_by.empty()) {
    pending.done(std::make_exception_ptr(
        Error(str_cat("process group ", group, " is broken, so ", name,
                      " cannot run: an earlier collective failed: ", broken_by))));
    return;
  }
  ++sequence;
  announce();
  MPI_Request request = MPI_REQUEST_NULL;
  try {
    request = begin(call);
  } catch (...) {
    pending.done(std::current_exception());
    return;
  }
  // Test, yielding the core at first, then sleeping a little longer each
  // time: a short collective is seen at once, and a long wait (a peer still
  // computing its backward) costs the cores almost nothing.
  const Clock::time_point deadline = Clock::now() + timeout;
  std::chrono::microseconds nap{0};
  for (int polls = 0;; ++polls) {
    int finished = 0;
    MPI_Status status;
    const int code = MPI_Test(&request, &finished, &status);
    if (code != MPI_SUCCESS) {
      std::string message = str_cat(name, " #", sequence, " of process group ", group, " (rank ",
                                    rank, " of ", size, ") failed in MPI: ", mpi_error_text(code));
      {
        std::lock_guard lock(mu);
        broken = message;
      }
      pending.done(std::make_exception_ptr(Error(message)));
      return;
    }
    if (finished) break;
    read_announcements();
    if (Clock::now() > deadline) {
      std::string message =
          str_cat(name, " #", sequence, " of process group ", group, " (rank ", rank, " of ", size,
                  ") did not finish within ", timeout.count() / 1000.0, " s: ", who_is_missing());
      {
        std::lock_guard lock(mu);
        broken = message;
      }
      abandoned.push_back({std::move(pending.call), request});
      pending.done(std::make_exception_ptr(Error(message)));
      return;
    }
    if (polls < 200) {
      std::this_thread::yield();
    } else {
      nap = std::min(std::chrono::microseconds(200), nap + std::chrono::microseconds(10));
      std::this_thread::sleep_for(nap);
    }
  }
  if (call.kind == kernels::CollectiveKind::kAllReduce ||
      call.kind == kernels::CollectiveKind::kReduceScatter) {
    if (call.reduction == kernels::Reduction::kMean) {
      if (call.output.dtype() == DType::kFloat64) {
        divide<double>(call.output, size);
      } else {
        divide<float>(call.output, size);
      }
    }
  }
  pending.done(nullptr);
}

MPI_Request MpiCommunicator::State::begin(const kernels::CollectiveCall& call) {
  MPI_Request request = MPI_REQUEST_NULL;
  if (call.kind == kernels::CollectiveKind::kBarrier) {
    const int code = MPI_Ibarrier(data, &request);
    TANDEM_CHECK(code == MPI_SUCCESS, "MPI could not start a barrier: ", mpi_error_text(code));
    return request;
  }
  int code = MPI_SUCCESS;
  const Tensor& in = call.input;
  const Tensor& out = call.output;
  const MPI_Datatype type = mpi_type(in.dtype());
  const bool as_bytes = type == MPI_BYTE;
  switch (call.kind) {
    case kernels::CollectiveKind::kAllReduce:
      code = MPI_Iallreduce(in.raw_data(), out.raw_data(), mpi_count(in, false), type,
                            mpi_op(call.reduction), data, &request);
      break;
    case kernels::CollectiveKind::kBroadcast:
      if (rank == call.root && in.nbytes() != 0) {
        std::memcpy(out.raw_data(), in.raw_data(), in.nbytes());
      }
      code = MPI_Ibcast(out.raw_data(), mpi_count(out, as_bytes), type, call.root, data, &request);
      break;
    case kernels::CollectiveKind::kAllGather:
      code = MPI_Iallgather(in.raw_data(), mpi_count(in, as_bytes), type, out.raw_data(),
                            mpi_count(in, as_bytes), type, data, &request);
      break;
    case kernels::CollectiveKind::kReduceScatter:
      code = MPI_Ireduce_scatter_block(in.raw_data(), out.raw_data(), mpi_count(out, false), type,
                                       mpi_op(call.reduction), data, &request);
      break;
    case kernels::CollectiveKind::kBarrier:
      break;  // Above.
  }
  TANDEM_CHECK(code == MPI_SUCCESS, "MPI could not start ", kernels::collective_name(call.kind),
               ": ", mpi_error_text(code));
  return request;
}

void MpiCommunicator::State::announce() {
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank) continue;
    MPI_Request& request = announce_request[static_cast<size_t>(peer)];
    if (request != MPI_REQUEST_NULL) {
      int sent = 0;
      MPI_Test(&request, &sent, MPI_STATUS_IGNORE);
      if (!sent) continue;  // The peer learns a later number instead.
    }
    announce_buffer[static_cast<size_t>(peer)] = sequence;
    if (MPI_Isend(&announce_buffer[static_cast<size_t>(peer)], 1, MPI_INT64_T, peer, kArrivalTag,
                  arrivals, &request) != MPI_SUCCESS) {
      request = MPI_REQUEST_NULL;  // A peer that is gone: the timeout will name it.
    }
  }
}

void MpiCommunicator::State::read_announcements() {
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

std::string MpiCommunicator::State::who_is_missing() const {
  std::string missing;
  int count = 0;
  for (int peer = 0; peer < size; ++peer) {
    if (peer == rank || peer_started[static_cast<size_t>(peer)] >= sequence) continue;
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
