// The communicator of one process group over MPI (kernels/communicator.h).
// Internal to distributed/; distributed.h is the interface.
//
// Note [A communication thread per group]
// Each communicator has a thread that carries out its collectives one at a
// time, in the order the engine started them (Note [Collectives run in
// program order] in kernels/communicator.h), with MPI's blocking calls,
// whose algorithms Open MPI tunes (its non-blocking ones ran 5-15% slower
// here, bench/README.md), and then calls the op's Completion: no engine
// worker waits for the network. Horovod's background thread and MXNet's
// kvstore make the same choice.
//
// Note [A collective that does not finish]
// MPI cannot cancel a collective, and a peer that has died or stopped
// calling leaves the others waiting forever. A watchdog thread therefore
// gives each collective the group's timeout. It looks every twentieth of
// the timeout (10 ms to 1 s), so a collective fails up to that much after
// its deadline: told of each collective instead, it cost two wake-ups of
// another thread per collective, and an all-reduce of 4 KB took 25 us
// instead of 11.5 on this 2-core VM. Past the deadline, the watchdog fails the
// collective with an Error naming it (op, sequence number, group) and the
// ranks that did not arrive, and the communicator is broken: every later
// collective of the group fails at once with the same message. The
// communication thread stays inside MPI; if the late ranks come after all,
// it returns and the process can end MPI cleanly, otherwise finalize leaves
// MPI to the process's exit. To know who arrived, each rank announces on a
// duplicate communicator the sequence number of each collective it starts
// (one 8-byte message per peer, skipped while the previous one to that peer
// is still in flight), and reads the others' announcements after each
// collective and at a timeout.
#pragma once

#include <mpi.h>

#include <chrono>
#include <memory>
#include <string>

#include "kernels/communicator.h"

namespace tandem::distributed {

// MPI's text for an error code it returned.
std::string mpi_error_text(int code);

class MpiCommunicator final : public kernels::Communicator {
 public:
  // Duplicates `comm` (a collective call over it); `group`: the group's
  // number, for messages.
  MpiCommunicator(MPI_Comm comm, int group, std::chrono::milliseconds timeout);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override;
  int size() const override;
  void start(kernels::CollectiveCall call, engine::Completion done) override;
  // CUDA tensors through NCCL (nccl_collectives.h) in a build with CUDA.
  void launch(const kernels::CollectiveCall& call, int device, void* stream) override;

  // Finishes the collectives already started, stops the thread and frees
  // the MPI communicators (before MPI_Finalize). Idempotent.
  void stop();
  // After stop(): a collective that timed out is still inside MPI (its late
  // ranks never came), so MPI_Finalize would wait for it forever.
  bool stuck() const;
  // The message of the collective that broke the group, empty if none.
  std::string broken() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tandem::distributed
