// Collectives of CUDA tensors through NCCL, for one process group. Internal
// to distributed/; built only with CUDA where the toolkit has NCCL's header
// (TANDEM_WITH_NCCL).
//
// Note [Collectives of GPU tensors]
// A collective of CUDA tensors is a GPU op like any other: the device's
// worker runs its kernel, which enqueues NCCL's call on the op's stream and
// returns (Note [GPU ops complete at launch] in
// core/engine/threaded_engine.cc), so the exchange runs on the GPU in stream
// order behind the ops that wrote its input, and no thread waits for it.
// Each also writes its device's order var (Note [Collectives run in program
// order] in kernels/communicator.h), so they are enqueued in push order,
// which is program order, the same on every rank, as NCCL requires. Each rank uses one device for a
// group's collectives, and no two ranks the same one (NCCL refuses that);
// the group's NCCL communicator starts at its first GPU collective: group
// rank 0 makes NCCL's unique id, MPI broadcasts it over a duplicate of the
// group's communicator, and every rank joins. Reductions take float32,
// float64, int32, int64 and uint8, as on the CPU (a mean is NCCL's average).
//
// Not yet: a timeout. A rank that dies leaves the others' NCCL kernels
// waiting on the GPU, and a wait on their results hangs; the CPU's watchdog
// (Note [A collective that does not finish]) has no GPU counterpart, which
// would abort the NCCL communicator (ncclCommAbort) past the timeout.
//
// This code has been compiled and linked, never run: the development
// machine has no GPU. tools/gpu_check.sh runs its tests where one is lent.
#pragma once

#include <mpi.h>

#include <memory>

#include "kernels/communicator.h"

namespace tandem::distributed {

class NcclCollectives {
 public:
  // Duplicates `group` (a collective call over it), for the unique id.
  NcclCollectives(MPI_Comm group, int group_id);
  ~NcclCollectives();
  NcclCollectives(const NcclCollectives&) = delete;
  NcclCollectives& operator=(const NcclCollectives&) = delete;

  // Enqueues `call` on `stream` of CUDA device `device`; throws
  // tandem::Error for a call NCCL cannot take or an NCCL failure.
  void launch(const kernels::CollectiveCall& call, int device, void* stream);
  // Ends the NCCL communicator (after the GPU work is done) and frees the
  // MPI one; before MPI_Finalize. Idempotent.
  void stop();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace tandem::distributed
