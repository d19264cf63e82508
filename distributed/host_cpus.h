// Ranks started without mpirun on one host share its CPUs. Internal to
// distributed/; init() uses it.
//
// Note [Ranks sharing a host]
// mpirun binds the processes it starts to cores of their own, and OpenMP
// sizes each one's team from that. Ranks started by a shell loop have no
// such placement: each would run a team as large as the machine, and
// Tandem's team binding (kernels/cpu/team_binding.h) would pin every rank's
// team to the same cores. Tutorial 02 on two such ranks ran at 250 samples/s
// here, against 1501 under mpirun (1483 with the split). So, after the join, the ranks on one host
// (same MPI_Get_processor_name) that all have the same CPU mask split it:
// local rank r of L takes the r-th of L equal, contiguous shares (one CPU,
// round robin, when there are more ranks than CPUs), for every thread the
// process has now and, by inheritance, every thread it starts later; the
// workers' OpenMP teams then shrink to the share (Note [A team no larger
// than its CPUs]). Ranks whose launcher placed them (different masks) keep
// their placement. A program should call init() before its first op, so
// that no team is bound before the share is known.
#pragma once

#include <mpi.h>

#include <vector>

namespace tandem::distributed {

// The CPUs this rank gets, given the CPUs the host's ranks may all use
// (`cpus`, in increasing order), its rank among them and their number.
std::vector<int> cpu_share(const std::vector<int>& cpus, int local_rank, int local_size);

// Splits this host's CPUs among the ranks of `world` that run on it, as the
// Note says. A collective over `world`.
void share_host_cpus(MPI_Comm world);

}  // namespace tandem::distributed
