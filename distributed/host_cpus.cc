#include "distributed/host_cpus.h"

#include <dirent.h>
#include <sched.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.h"

namespace tandem::distributed {
namespace {

// This host's ranks of `world`: those with the same processor name.
MPI_Comm ranks_on_this_host(MPI_Comm world) {
  int rank = 0, size = 1;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &size);
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  MPI_Get_processor_name(name, &length);
  std::vector<char> names(static_cast<size_t>(size) * MPI_MAX_PROCESSOR_NAME);
  MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names.data(), MPI_MAX_PROCESSOR_NAME,
                MPI_CHAR, world);
  // The color: the first rank with this name.
  int color = rank;
  for (int r = 0; r < rank; ++r) {
    if (std::strncmp(&names[static_cast<size_t>(r) * MPI_MAX_PROCESSOR_NAME], name,
                     MPI_MAX_PROCESSOR_NAME) == 0) {
      color = r;
      break;
    }
  }
  MPI_Comm host = MPI_COMM_NULL;
  MPI_Comm_split(world, color, rank, &host);
  return host;
}

// Sets the affinity of every thread of this process.
void set_process_affinity(const cpu_set_t& mask) {
  DIR* tasks = ::opendir("/proc/self/task");
  if (tasks == nullptr) {
    sched_setaffinity(0, sizeof mask, &mask);
    return;
  }
  while (const dirent* entry = ::readdir(tasks)) {
    const int thread = std::atoi(entry->d_name);
    // A refusal (a restricted container) leaves the thread as it was: a
    // placement hint, never a reason to fail.
    if (thread > 0) sched_setaffinity(thread, sizeof mask, &mask);
  }
  ::closedir(tasks);
}

}  // namespace

std::vector<int> cpu_share(const std::vector<int>& cpus, int local_rank, int local_size) {
  TANDEM_INTERNAL_ASSERT(local_size > 0 && local_rank >= 0 && local_rank < local_size,
                         "local rank ", local_rank, " of ", local_size);
  const size_t n = cpus.size(), r = static_cast<size_t>(local_rank),
               l = static_cast<size_t>(local_size);
  if (n == 0) return {};
  if (n < l) return {cpus[r % n]};
  return std::vector<int>(cpus.begin() + static_cast<std::ptrdiff_t>(r * n / l),
                          cpus.begin() + static_cast<std::ptrdiff_t>((r + 1) * n / l));
}

void share_host_cpus(MPI_Comm world) {
  MPI_Comm host = ranks_on_this_host(world);
  int local_rank = 0, local_size = 1;
  MPI_Comm_rank(host, &local_rank);
  MPI_Comm_size(host, &local_size);
  cpu_set_t mask;
  CPU_ZERO(&mask);
  sched_getaffinity(0, sizeof mask, &mask);
  std::vector<cpu_set_t> masks(static_cast<size_t>(local_size));
  MPI_Allgather(&mask, sizeof mask, MPI_BYTE, masks.data(), sizeof mask, MPI_BYTE, host);
  MPI_Comm_free(&host);
  if (local_size < 2) return;
  for (const cpu_set_t& other : masks) {
    if (!CPU_EQUAL(&other, &mask)) return;  // The launcher placed the ranks.
  }
  cpu_set_t share;
  CPU_ZERO(&share);
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &mask)) cpus.push_back(cpu);
  }
  for (int cpu : cpu_share(cpus, local_rank, local_size)) CPU_SET(cpu, &share);
  set_process_affinity(share);
}

}  // namespace tandem::distributed
