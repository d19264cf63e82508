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

// The CPUs in the process's affinity mask, in increasing order, as the first
// caller saw it (before any thread was bound).
const std::vector<int>& allowed_cpus() {
  static const std::vector<int> cpus = [] {
    std::vector<int> result;
    cpu_set_t mask;
    if (sched_getaffinity(0, sizeof mask, &mask) != 0) return result;
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (CPU_ISSET(cpu, &mask)) result.push_back(cpu);
    }
    return result;
  }();
  return cpus;
}

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

}  // namespace

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
  static const bool enabled = team_binding_enabled();
  const std::vector<int>& cpus = allowed_cpus();
  if (!enabled || cpus.size() < 2) return;
  // The full team, so that OpenMP creates every helper it will ever use for
  // this worker now, while the worker is still unbound: a helper created
  // later would inherit the worker's one-CPU mask.
  const size_t first = static_cast<size_t>(worker);
#pragma omp parallel
  bind_this_thread(cpus[(first + omp_get_thread_num()) % cpus.size()]);
}

}  // namespace tandem::kernels
