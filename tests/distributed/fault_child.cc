// A rank that leaves: run by ctest under mpirun (which is told not to end
// the job when one process exits), the last rank exits, is killed or throws
// out of main after the first collective; every other rank's next
// collective must fail within the timeout with an Error naming it and the
// rank that did not arrive, instead of hanging. Prints "fault check passed"
// or "fault check failed: ..." for ctest to read.
//
//   mpirun -np 2 fault_child exit|kill|throw
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "core/error.h"
#include "eager/ops.h"

#include "distributed/collectives.h"

using namespace tandem;

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "exit";
  distributed::init({.timeout = std::chrono::seconds(3)});
  const int me = distributed::rank(), last = distributed::world_size() - 1;
  distributed::all_reduce(full({4}, 1.0)).to_vector<float>();
  if (me == last) {
    if (mode == "kill") std::raise(SIGKILL);
    if (mode == "throw") throw std::runtime_error("the last rank gives up");
    std::_Exit(3);
  }
  std::string verdict = "fault check failed: the collective finished without the last rank";
  try {
    distributed::all_reduce(full({4}, 1.0)).to_vector<float>();
  } catch (const Error& e) {
    const std::string message = e.what();
    const bool names_it = message.find("all_reduce #2") != std::string::npos &&
                          message.find(str_cat("rank ", last)) != std::string::npos;
    verdict = str_cat(names_it ? "fault check passed: " : "fault check failed: ", message);
  }
  std::printf("rank %d: %s\n", me, verdict.c_str());
  std::fflush(stdout);
  // MPI cannot end cleanly with a rank gone, nor can the collective stuck
  // inside it be joined: leave at once.
  std::_Exit(0);
}
