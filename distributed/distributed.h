// Many processes, one program: the process group of an MPI launch.
//
//   mpirun -np 2 ./train          (each process runs the same program)
//
//   tandem::distributed::init();  // reads mpirun's environment
//   int me = tandem::distributed::rank();        // 0 or 1
//   int n = tandem::distributed::world_size();   // 2
//   Tensor total = tandem::distributed::all_reduce(x);  // collectives.h
//   tandem::distributed::barrier();
//
// A program started without a launcher is a world of one process, where
// every collective returns its input: the same program runs on one machine
// and on many. distributed/README.md tells how the pieces fit (collectives
// as engine ops, the communication thread, DistributedDataParallel).
#pragma once

#include <chrono>
#include <source_location>
#include <vector>

namespace tandem::distributed {

struct InitOptions {
  // How long a collective may wait for the other ranks before it fails with
  // an Error naming the ranks that did not arrive (Note [A collective that
  // does not finish] in mpi_communicator.h). Zero: TANDEM_DISTRIBUTED_TIMEOUT
  // (seconds) if set, else 300 s.
  std::chrono::milliseconds timeout{0};
};

// Starts MPI (thread level MPI_THREAD_MULTIPLE) and the world's process
// group. Idempotent; throws tandem::Error if MPI cannot start or has no
// thread support. finalize() runs at exit if the program did not call it.
void init(InitOptions options = {});
bool is_initialized();
// Whether a launcher started this process as one rank of a world: mpirun's
// environment, or TANDEM_RANK and TANDEM_WORLD_SIZE (Note [Joining without
// mpirun] in join_world.h). Meaningful before init(); a program that serves
// both ways (tools/tandem-run) calls init() when it is true.
bool launched_as_rank();
// Waits for every pending op, stops the groups' threads and ends MPI; no
// collective may run afterwards. Idempotent.
void finalize();

// This process's rank in the world, 0 to world_size() - 1; throws
// tandem::Error before init().
int rank();
int world_size();

// A set of ranks that run collectives together. The world is group 0.
class ProcessGroup {
 public:
  // The world.
  ProcessGroup() = default;
  int id() const { return id_; }
  // This process's rank within the group, and the group's size; a process
  // outside the group (new_group) has rank -1.
  int rank() const;
  int size() const;
  bool contains_me() const { return rank() >= 0; }

 private:
  friend ProcessGroup new_group(const std::vector<int>& ranks, std::chrono::milliseconds timeout);
  explicit ProcessGroup(int id) : id_(id) {}
  int id_ = 0;
};

// The group of the given world ranks, in that order; every rank of the world
// must call it, in the same order as its other new_group calls (as torch's
// new_group). A rank outside `ranks` gets a group it cannot use. `timeout`:
// the group's own (InitOptions::timeout), zero for the world's.
ProcessGroup new_group(const std::vector<int>& ranks,
                       std::chrono::milliseconds timeout = std::chrono::milliseconds(0));

// Returns once every rank of `group` has called barrier() and every op this
// process pushed before it has finished.
void barrier(const ProcessGroup& group = ProcessGroup(),
             std::source_location where = std::source_location::current());

}  // namespace tandem::distributed
