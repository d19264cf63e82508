// Pins an engine worker and its OpenMP team to one core each. Internal to
// kernels/.
//
// Note [Binding the team to cores]
// An all-cores kernel runs on the worker that picked it up plus OpenMP's
// helper threads, and the frontend waits for it: three threads on two cores.
// Left to the scheduler, the frontend could land on the core of a helper that
// busy-waits between parallel regions (libgomp spins for up to 300000 rounds
// before it sleeps), and the frontend then waited for the next scheduler
// tick: 4 ms stalls in a loop of 0.09 ms products, and sometimes the worker
// and a helper shared one core, so that half the product ran serially. On the
// 2-core development VM, bench_gemm's n = 256 swung between 0.23x and 0.94x
// of dnnl_sgemm from one run to the next, and the MLP trained at 0.96-0.98x
// libtorch's samples/s.
//
// So the first all-cores kernel on a worker binds the team: OpenMP thread t
// of worker w runs on allowed CPU (w + t) mod n, where the allowed CPUs are
// those of the worker's affinity mask (the process's, unless
// distributed::init gave this process a share of its host's CPUs). The frontend and every thread
// the user creates stay unbound, so the scheduler keeps them off the cores the team is using where
// it can. The binding is done once per worker; OpenMP reuses the same helper threads for each later
// region of that worker.
//
// Note [A team no larger than its CPUs]
// OpenMP sizes its teams once, from the mask the process started with. When
// the mask narrows later (ranks started without mpirun share a host's CPUs,
// Note [Ranks sharing a host] in distributed/host_cpus.h), a team of the
// old size would put several spinning threads on each CPU. So the same
// first kernel also caps the worker's team at its CPUs, unless the user set
// OMP_NUM_THREADS; that holds with binding off too.
//
// Not bound: the naive engine's kernels (they run on the user's thread,
// RunContext::kPushingThread), processes whose OpenMP placement the user set
// (OMP_PROC_BIND or OMP_PLACES), and any process with TANDEM_BIND_THREADS=0.
// A refused affinity call (a restricted container) leaves the thread as it
// was: binding is a placement hint, never a reason to fail an op.
#pragma once

#include <vector>

namespace tandem::kernels {

// The CPUs the calling thread may run on (its affinity mask), in increasing
// order. A worker inherits the mask of the thread that started the engine,
// which is never bound: the process's CPUs, or the share distributed::init
// gave it.
std::vector<int> cpus_of_this_thread();

// Sizes and binds the calling worker's OpenMP team as the Notes say, once
// per thread; a no-op for `worker` < 0, and no binding when it is off. Call it from the
// engine worker that is about to run an all-cores kernel.
void bind_team_to_cores(int worker);

// Whether bind_team_to_cores binds at all: TANDEM_BIND_THREADS is not "0"
// and OpenMP's own placement variables are unset. Throws tandem::Error for a
// TANDEM_BIND_THREADS other than "0" or "1".
bool team_binding_enabled();

}  // namespace tandem::kernels
