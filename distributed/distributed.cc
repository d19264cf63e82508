#include "distributed/distributed.h"

#include <mpi.h>

#include <memory>
#include <mutex>
#include <utility>

#include "absl/container/flat_hash_map.h"

#include "core/engine/engine.h"
#include "core/environment.h"
#include "core/error.h"
#include "core/profiler.h"
#include "kernels/communicator.h"

#include "distributed/host_cpus.h"
#include "distributed/join_world.h"
#include "distributed/mpi_communicator.h"

namespace tandem::distributed {
namespace {

struct Group {
  std::shared_ptr<MpiCommunicator> communicator;  // Null where this rank is not a member.
};

struct World {
  std::mutex mu;
  bool initialized = false;
  bool finalized = false;
  int rank = 0;
  int size = 1;
  // MPI_COMM_WORLD, or the world joined without mpirun (join_world.h).
  MPI_Comm comm = MPI_COMM_WORLD;
  std::chrono::milliseconds timeout{0};
  int next_group = 1;
  absl::flat_hash_map<int, Group> groups;
};

World& world() {
  static auto* w = new World;  // Never destroyed: finalize() may run at exit.
  return *w;
}

std::chrono::milliseconds timeout_from(const InitOptions& options) {
  if (options.timeout.count() > 0) return options.timeout;
  const int64_t seconds =
      environment::integer("TANDEM_DISTRIBUTED_TIMEOUT", 1, int64_t{7} * 24 * 3600, 300,
                           "seconds a collective waits for the other ranks");
  return std::chrono::milliseconds(seconds * 1000);
}

void check_initialized(const char* what) {
  TANDEM_CHECK(world().initialized && !world().finalized, what,
               " needs tandem::distributed::init() first",
               world().finalized ? " (finalize() has run)" : "");
}

// Ends MPI at exit if the program did not (Note [Draining at exit] in
// core/engine/engine.cc runs first, so no op is pending by then).
struct FinalizeAtExit {
  ~FinalizeAtExit() {
    try {
      finalize();
    } catch (...) {
    }
  }
};

}  // namespace

void init(InitOptions options) {
  World& w = world();
  std::lock_guard lock(w.mu);
  if (w.initialized) return;
  TANDEM_CHECK(!w.finalized, "distributed::init() after finalize(): MPI cannot start twice");
  const std::chrono::milliseconds timeout = timeout_from(options);
  int already = 0;
  MPI_Initialized(&already);
  // Without mpirun's environment, TANDEM_RANK and its siblings say how to
  // find the other ranks (Note [Joining without mpirun]).
  const std::optional<LaunchEnvironment> launch = launch_environment();
  std::unique_ptr<WorldJoin> join;
  if (!already && launch && launch->world_size > 1 && !started_by_mpi_launcher()) {
    join = std::make_unique<WorldJoin>(*launch, timeout);
  }
  int provided = MPI_THREAD_SINGLE;
  if (!already) {
    TANDEM_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) == MPI_SUCCESS,
                 "MPI could not start (MPI_Init_thread failed)");
  } else {
    MPI_Query_thread(&provided);
  }
  TANDEM_CHECK(provided >= MPI_THREAD_MULTIPLE,
               "this MPI library does not support MPI_THREAD_MULTIPLE (it gave level ", provided,
               "), which Tandem's communication threads need");
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  if (join) {
    w.comm = join->connect();
    share_host_cpus(w.comm);
  }
  MPI_Comm_rank(w.comm, &w.rank);
  MPI_Comm_size(w.comm, &w.size);
  TANDEM_CHECK(!launch || (launch->rank == w.rank && launch->world_size == w.size),
               "TANDEM_RANK=", launch ? launch->rank : 0,
               " and TANDEM_WORLD_SIZE=", launch ? launch->world_size : 0,
               " contradict the MPI launcher's rank ", w.rank, " of ", w.size);
  w.timeout = timeout;
  if (w.size > 1) {
    // Each rank's timeline in a file of its own, named by its rank.
    profiler::set_process(w.rank, str_cat("rank ", w.rank), str_cat("rank", w.rank));
  }
  auto communicator = std::make_shared<MpiCommunicator>(w.comm, 0, timeout);
  w.groups[0] = Group{communicator};
  kernels::install_communicator(0, communicator);
  w.initialized = true;
  static FinalizeAtExit finalize_at_exit;
}

bool launched_as_rank() { return started_by_mpi_launcher() || launch_environment().has_value(); }

bool is_initialized() {
  std::lock_guard lock(world().mu);
  return world().initialized && !world().finalized;
}

void finalize() {
  World& w = world();
  {
    std::lock_guard lock(w.mu);
    if (!w.initialized || w.finalized) return;
  }
  std::exception_ptr pending_failure;
  try {
    engine::current().wait_all();
  } catch (...) {
    pending_failure = std::current_exception();
  }
  std::lock_guard lock(w.mu);
  bool stuck = false;
  for (auto& [id, group] : w.groups) {
    kernels::remove_communicator(id);
    if (group.communicator == nullptr) continue;
    group.communicator->stop();
    stuck = stuck || group.communicator->stuck();
  }
  w.finalized = true;
  // MPI_Finalize would wait forever for a collective whose ranks never
  // came: leave MPI to the process's exit then.
  if (!stuck) {
    if (w.comm != MPI_COMM_WORLD) MPI_Comm_free(&w.comm);
    MPI_Finalize();
  }
  if (pending_failure) std::rethrow_exception(pending_failure);
}

int rank() {
  check_initialized("distributed::rank()");
  return world().rank;
}

int world_size() {
  check_initialized("distributed::world_size()");
  return world().size;
}

int ProcessGroup::rank() const {
  check_initialized("ProcessGroup::rank()");
  std::lock_guard lock(world().mu);
  const Group& group = world().groups.at(id_);
  return group.communicator ? group.communicator->rank() : -1;
}

int ProcessGroup::size() const {
  check_initialized("ProcessGroup::size()");
  std::lock_guard lock(world().mu);
  const Group& group = world().groups.at(id_);
  return group.communicator ? group.communicator->size() : 0;
}

ProcessGroup new_group(const std::vector<int>& ranks, std::chrono::milliseconds timeout) {
  check_initialized("distributed::new_group()");
  World& w = world();
  std::lock_guard lock(w.mu);
  std::vector<bool> seen(static_cast<size_t>(w.size), false);
  int my_position = -1;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const int r = ranks[i];
    TANDEM_CHECK(r >= 0 && r < w.size, "new_group: rank ", r, " is not in the world (ranks 0 to ",
                 w.size - 1, ")");
    TANDEM_CHECK(!seen[static_cast<size_t>(r)], "new_group: rank ", r, " is listed twice");
    seen[static_cast<size_t>(r)] = true;
    if (r == w.rank) my_position = static_cast<int>(i);
  }
  TANDEM_CHECK(!ranks.empty(), "new_group: no ranks given");
  // MPI_Comm_split is a collective of the world's communicator, which no
  // communication thread uses (each has its duplicate).
  MPI_Comm split = MPI_COMM_NULL;
  const int code =
      MPI_Comm_split(w.comm, my_position >= 0 ? 0 : MPI_UNDEFINED, my_position, &split);
  TANDEM_CHECK(code == MPI_SUCCESS, "new_group: MPI_Comm_split failed");
  const int id = w.next_group++;
  Group group;
  if (split != MPI_COMM_NULL) {
    group.communicator =
        std::make_shared<MpiCommunicator>(split, id, timeout.count() > 0 ? timeout : w.timeout);
    MPI_Comm_free(&split);
    kernels::install_communicator(id, group.communicator);
  }
  w.groups[id] = std::move(group);
  return ProcessGroup(id);
}

void barrier(const ProcessGroup& group, std::source_location where) {
  check_initialized("distributed::barrier()");
  TANDEM_CHECK(group.contains_me(), "barrier: this rank is not a member of process group ",
               group.id());
  std::shared_ptr<kernels::Communicator> communicator = kernels::communicator(group.id());
  engine::Engine& engine = engine::current();
  engine::Var* order = kernels::collective_order_var();
  engine.push(
      [communicator](const engine::RunContext& run) {
        kernels::CollectiveCall call;
        call.kind = kernels::CollectiveKind::kBarrier;
        kernels::run_collective(*communicator, std::move(call), run);
      },
      Device::cpu(), {}, {&order, 1}, "barrier", where);
  engine.wait_all();
}

}  // namespace tandem::distributed
