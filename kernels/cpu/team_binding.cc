#include "kernels/cpu/team_binding.h"

#include <omp.h>
#include <pthread.h>
#include <sched.h>

#include <cstdlib>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace tandem::kernels {
namespace {

void bind_this_thread(int cpu) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  // A refusal leaves the thread where it was; see the Note.
  pthread_setaffinity_np(pthread_self(), sizeof one, &one);
}

bool is_set(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0';
}

// Note [A team no larger than its CPUs]: OpenMP sized its teams from the
// mask the process started with; a worker that may now run on fewer CPUs
// (distributed::init shares a host's CPUs among its ranks) gets a team of
// that many threads, unless the user chose OMP_NUM_THREADS.
void fit_team(size_t cpus) {
  if (!is_set("OMP_NUM_THREADS") && cpus > 0 && static_cast<size_t>(omp_get_max_threads()) > cpus) {
    omp_set_num_threads(static_cast<int>(cpus));
  }
}

}  // namespace

std::vector<int> cpus_of_this_thread() {
  std::vector<int> result;
  cpu_set_t mask;
  if (sched_getaffinity(0, sizeof mask, &mask) != 0) return result;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &mask)) result.push_back(cpu);
  }
  return result;
}

bool team_binding_enabled() {
  if (const char* text = std::getenv("TANDEM_BIND_THREADS")) {
    std::string_view value(text);
    TANDEM_CHECK(value == "0" || value == "1", "TANDEM_BIND_THREADS='", value,
                 "' is not a switch; expected 0 (leave threads unbound) or 1 (bind, the default)");
    if (value == "0") return false;
  }
  return !is_set("OMP_PROC_BIND") && !is_set("OMP_PLACES");
}

void bind_team_to_cores(int worker) {
  thread_local bool done = false;
  if (done || worker < 0) return;
  done = true;
  const std::vector<int> cpus = cpus_of_this_thread();
  fit_team(cpus.size());
  static const bool enabled = team_binding_enabled();
  if (!enabled || cpus.size() < 2) return;
  // The full team, so that OpenMP creates every helper it will ever use for
  // this worker now, while the worker is still unbound: a helper created
  // later would inherit the worker's one-CPU mask.
  const size_t first = static_cast<size_t>(worker);
#pragma omp parallel
  bind_this_thread(cpus[(first + omp_get_thread_num()) % cpus.size()]);
}

}  // namespace tandem::kernels
