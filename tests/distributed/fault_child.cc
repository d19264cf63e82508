// A rank that leaves: run by ctest under mpirun (which is told not to end
// the job when one process exits) or without it
// (launch_without_mpirun.sh), the last rank exits, is killed or throws out
// of main after the first collective; every other rank's next collective
// must fail within the timeout with an Error naming it and the rank that did
// not arrive, instead of hanging. In mode "absent" (without mpirun, the last
// rank never started) init() itself must fail so on every other rank.
// Prints "rank R: fault check passed" or "rank R: fault check failed: ..."
// for ctest to read.
//
//   mpirun -np 3 fault_child exit|kill|throw
//   launch_without_mpirun.sh --leave-out-last 3 fault_child absent
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "core/error.h"
#include "eager/ops.h"

#include "distributed/collectives.h"

using namespace tandem;

namespace {

constexpr auto kTimeout = std::chrono::seconds(3);

void report(int rank, const std::string& verdict) {
  std::printf("rank %d: %s\n", rank, verdict.c_str());
  std::fflush(stdout);
}

int check_absent_rank() {
  const int me = std::atoi(std::getenv("TANDEM_RANK"));
  const int last = std::atoi(std::getenv("TANDEM_WORLD_SIZE")) - 1;
  std::string verdict = "fault check failed: init() finished without the last rank";
  try {
    distributed::init({.timeout = kTimeout});
  } catch (const Error& e) {
    const std::string message = e.what();
    const bool names_it = message.find(str_cat("rank ", last, " of a world")) != std::string::npos;
    verdict = str_cat(names_it ? "fault check passed: " : "fault check failed: ", message);
  }
  report(me, verdict);
  std::_Exit(0);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "exit";
  if (mode == "absent") return check_absent_rank();
  distributed::init({.timeout = kTimeout});
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
  report(me, verdict);
  // MPI cannot end cleanly with a rank gone, nor can the collective stuck
  // inside it be joined: leave at once.
  std::_Exit(0);
}
