// Processes started by a launcher other than mpirun become one MPI world.
// Internal to distributed/; init() (distributed.h) uses it.
//
//   TANDEM_RANK=0 TANDEM_WORLD_SIZE=2 MASTER_ADDR=10.0.0.1 ./train &   # on host 10.0.0.1
//   TANDEM_RANK=1 TANDEM_WORLD_SIZE=2 MASTER_ADDR=10.0.0.1 ./train &   # anywhere
//
// Note [Joining without mpirun]
// A shell loop, a cluster scheduler or a container orchestrator can start
// the processes of a launch but cannot start MPI's runtime; it can give each
// process its rank, the world's size and where rank 0 runs (TANDEM_RANK,
// TANDEM_WORLD_SIZE, MASTER_ADDR, MASTER_PORT; torch's env:// form). Each
// process then starts MPI alone (a singleton), and Open MPI joins singletons
// only by MPI_Comm_connect / MPI_Comm_accept, with its name server
// (ompi-server, from Debian's openmpi-bin) to introduce them. So:
//  1. Rank 0 starts ompi-server as a child process and listens on
//     MASTER_PORT (rendezvous.h).
//  2. Every other rank connects there, says its rank and the world's size,
//     and learns the name server's address, which MPI_Init reads. Rank 0
//     waits until every rank has checked in; past the timeout it fails with
//     an Error naming the ranks that did not, and tells those that did.
//  3. After MPI_Init, rank 0 opens an MPI port and sends its name to rank 1,
//     2, ... in turn; rank k connects, ranks 0 to k-1 accept together, and
//     the merged communicator grows in rank order. Each step has the
//     timeout: MPI cannot cancel an accept, so a watcher gives up on it
//     (a rank that died after checking in) with an Error naming the rank.
//  4. Rank 0 stops the name server: connected processes no longer need it.
// The rendezvous carries names and addresses only; tensors travel by MPI.
#pragma once

#include <mpi.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>

namespace tandem::distributed {

struct LaunchEnvironment {
  int rank = 0;
  int world_size = 1;
  std::string master_addr;  // Rank 0's host, for the other ranks.
  int master_port = 29500;  // Rank 0's rendezvous port (torch's default).
};

// TANDEM_RANK, TANDEM_WORLD_SIZE, MASTER_ADDR and MASTER_PORT; nullopt when
// neither TANDEM_RANK nor TANDEM_WORLD_SIZE is set. An Error names a value
// that is missing or out of range.
std::optional<LaunchEnvironment> launch_environment();

// Whether mpirun (or another launcher speaking MPI's process management)
// started this process, in which case MPI_Init finds the world by itself.
// Only before MPI_Init: a singleton start sets PMIX_RANK too.
bool started_by_mpi_launcher();

class WorldJoin {
 public:
  // Steps 1 and 2, before MPI_Init (which must come next, in this process).
  WorldJoin(const LaunchEnvironment& launch, std::chrono::milliseconds timeout);
  // Stops the name server if it still runs and closes the rendezvous.
  ~WorldJoin();
  WorldJoin(const WorldJoin&) = delete;
  WorldJoin& operator=(const WorldJoin&) = delete;

  // Steps 3 and 4: the world, this process at rank launch.rank. The caller
  // frees it (MPI_Comm_free) before MPI_Finalize.
  MPI_Comm connect();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tandem::distributed
