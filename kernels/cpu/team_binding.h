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
// those of the process's affinity mask. The frontend and every thread the
// user creates stay unbound, so the scheduler keeps them off the cores the
// team is using where it can. The binding is done once per worker; OpenMP
// reuses the same helper threads for each later region of that worker.
//
// Not bound: the naive engine's kernels (they run on the user's thread,
// RunContext::kPushingThread), processes whose OpenMP placement the user set
// (OMP_PROC_BIND or OMP_PLACES), and any process with TANDEM_BIND_THREADS=0.
// A refused affinity call (a restricted container) leaves the thread as it
// was: binding is a placement hint, never a reason to fail an op.
#pragma once

namespace tandem::kernels {

// Binds the calling worker and its OpenMP team as the Note says, once per
// thread; a no-op for `worker` < 0 or when binding is off. Call it from the
// engine worker that is about to run an all-cores kernel.
void bind_team_to_cores(int worker);

// Whether bind_team_to_cores binds at all: TANDEM_BIND_THREADS is not "0"
// and OpenMP's own placement variables are unset. Throws tandem::Error for a
// TANDEM_BIND_THREADS other than "0" or "1".
bool team_binding_enabled();

}  // namespace tandem::kernels
