#include "distributed/join_world.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "core/environment.h"
#include "core/error.h"

#include "distributed/mpi_communicator.h"
#include "distributed/rendezvous.h"

namespace tandem::distributed {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int64_t kMaxWorldSize = int64_t{1} << 20;
// A connection that says nothing for this long is not one of ours.
constexpr auto kHelloWait = std::chrono::seconds(5);
constexpr std::string_view kHello = "tandem-join";

// "rank 2" or "ranks 2, 5": the ranks not yet marked.
std::string missing_ranks(const std::vector<bool>& joined) {
  std::string list;
  int count = 0;
  for (size_t r = 0; r < joined.size(); ++r) {
    if (!joined[r]) list += str_cat(count++ == 0 ? "" : ", ", r);
  }
  return str_cat(count == 1 ? "rank " : "ranks ", list);
}

// A line "<word> <rest>"; the rest, or nullopt for another word. A line
// "error <message>" from rank 0 is its failure, raised here.
std::optional<std::string> field(const std::string& line, std::string_view word) {
  if (line.starts_with("error ")) {
    TANDEM_CHECK(false, "distributed::init: rank 0 ended the launch: ", line.substr(6));
  }
  if (!line.starts_with(word) || line.size() <= word.size() || line[word.size()] != ' ') {
    return std::nullopt;
  }
  return line.substr(word.size() + 1);
}

// `name` on the PATH; empty if it is not there.
std::filesystem::path find_program(const char* name) {
  const std::optional<std::string_view> path = environment::get("PATH");
  std::stringstream directories(std::string(path.value_or("/usr/bin:/bin")));
  for (std::string directory; std::getline(directories, directory, ':');) {
    const std::filesystem::path candidate = std::filesystem::path(directory) / name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return {};
}

// Open MPI's name server, writing its address to `uri_file`. posix_spawn,
// not fork: fork would run the engine's fork handlers (Note [Engines across
// fork] in core/engine/threaded_engine.cc), which wait for pending ops and
// restart workers in the child. Through util-linux's setpriv where there is
// one, so that the server is killed if this process dies during the join.
pid_t start_name_server(const std::filesystem::path& uri_file) {
  const std::filesystem::path server = find_program("ompi-server");
  TANDEM_CHECK(!server.empty(),
               "distributed::init: rank 0 needs Open MPI's ompi-server (Debian package "
               "openmpi-bin) on the PATH to join ranks started without mpirun");
  std::vector<std::string> words;
  if (const std::filesystem::path setpriv = find_program("setpriv"); !setpriv.empty()) {
    words = {setpriv.string(), "--pdeathsig", "KILL", "--"};
  }
  for (std::string word :
       {server.string(), std::string("--no-daemonize"), std::string("-r"), uri_file.string()}) {
    words.push_back(std::move(word));
  }
  std::vector<char*> argv;
  for (std::string& word : words) argv.push_back(word.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  const int code = ::posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ);
  TANDEM_CHECK(code == 0, "distributed::init: cannot start ", server.string(), ": ",
               std::strerror(code));
  return pid;
}

// One step of the join: `open` accepts or connects the joining rank (an
// intercommunicator), which is then merged with the world, the joining rank
// last (`joining` = 1 on its side). It runs on a thread of its own, given up
// at the deadline: MPI cannot cancel it, so it stays behind, blocked, until
// the process ends.
MPI_Comm merge_in(std::function<int(MPI_Comm*)> open, int joining, Deadline deadline,
                  const std::string& what) {
  struct Outcome {
    std::mutex mu;
    std::condition_variable finished;
    bool done = false;
    int code = MPI_SUCCESS;
    MPI_Comm merged = MPI_COMM_NULL;
  };
  auto outcome = std::make_shared<Outcome>();
  std::thread([outcome, open = std::move(open), joining] {
    MPI_Comm intercomm = MPI_COMM_NULL, merged = MPI_COMM_NULL;
    int code = open(&intercomm);
    if (code == MPI_SUCCESS) {
      code = MPI_Intercomm_merge(intercomm, joining, &merged);
      MPI_Comm_free(&intercomm);
    }
    std::lock_guard lock(outcome->mu);
    outcome->code = code;
    outcome->merged = merged;
    outcome->done = true;
    outcome->finished.notify_all();
  }).detach();
  std::unique_lock lock(outcome->mu);
  TANDEM_CHECK(outcome->finished.wait_until(lock, deadline, [&] { return outcome->done; }),
               "distributed::init: ", what, " did not finish before the timeout");
  TANDEM_CHECK(outcome->code == MPI_SUCCESS, "distributed::init: ", what,
               " failed: ", mpi_error_text(outcome->code));
  return outcome->merged;
}

}  // namespace

std::optional<LaunchEnvironment> launch_environment() {
  const bool has_rank = environment::get("TANDEM_RANK").has_value();
  const bool has_size = environment::get("TANDEM_WORLD_SIZE").has_value();
  if (!has_rank && !has_size) return std::nullopt;
  TANDEM_CHECK(has_rank && has_size, "TANDEM_RANK and TANDEM_WORLD_SIZE go together, but ",
               has_rank ? "TANDEM_WORLD_SIZE" : "TANDEM_RANK", " is not set");
  LaunchEnvironment launch;
  launch.world_size = static_cast<int>(
      environment::integer("TANDEM_WORLD_SIZE", 1, kMaxWorldSize, 1, "processes in the launch"));
  launch.rank = static_cast<int>(environment::integer("TANDEM_RANK", 0, launch.world_size - 1, 0,
                                                      "this process's rank in the launch"));
  launch.master_port = static_cast<int>(
      environment::integer("MASTER_PORT", 1, 65535, 29500, "rank 0's rendezvous port"));
  const std::optional<std::string_view> address = environment::get("MASTER_ADDR");
  TANDEM_CHECK(address.has_value() || launch.world_size == 1,
               "MASTER_ADDR must name rank 0's host when TANDEM_WORLD_SIZE is ", launch.world_size);
  launch.master_addr = std::string(address.value_or(""));
  return launch;
}

bool started_by_mpi_launcher() {
  return environment::get("OMPI_COMM_WORLD_SIZE") || environment::get("PMIX_RANK") ||
         environment::get("PMI_RANK");
}

struct WorldJoin::State {
  LaunchEnvironment launch;
  std::chrono::milliseconds timeout;
  // Rank 0: the name server, its address file, and a connection per rank.
  pid_t server = -1;
  std::filesystem::path server_directory;
  std::vector<std::optional<LineSocket>> ranks;
  // The other ranks: the connection to rank 0.
  std::optional<LineSocket> master;

  ~State() { stop_server(); }

  // The address the name server wrote, once it has written all of it.
  std::string read_server_uri(Deadline deadline) {
    const std::filesystem::path uri_file = server_directory / "uri";
    while (true) {
      std::ifstream in(uri_file);
      std::string uri;
      if (in && std::getline(in, uri) && !in.eof() && !uri.empty()) return uri;
      int status = 0;
      const pid_t ended = ::waitpid(server, &status, WNOHANG);
      if (ended != 0) server = -1;  // Reaped (or gone): never signal its pid again.
      TANDEM_CHECK(ended == 0,
                   "distributed::init: Open MPI's name server (ompi-server) ended before it "
                   "gave its address",
                   ended > 0 && WIFEXITED(status)
                       ? str_cat(" (exit status ", WEXITSTATUS(status), ")")
                       : std::string());
      TANDEM_CHECK(Clock::now() < deadline,
                   "distributed::init: Open MPI's name server gave no address before the timeout");
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  // Asks the server to end (so that it removes its session files), and
  // kills it if it has not within a second.
  void stop_server() {
    if (server > 0) {
      ::kill(server, SIGTERM);
      const Deadline patience = Clock::now() + std::chrono::seconds(1);
      while (::waitpid(server, nullptr, WNOHANG) == 0) {
        if (Clock::now() >= patience) {
          ::kill(server, SIGKILL);
          ::waitpid(server, nullptr, 0);
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      server = -1;
    }
    if (!server_directory.empty()) {
      std::error_code ignored;
      std::filesystem::remove_all(server_directory, ignored);
      server_directory.clear();
    }
  }

  // Rank 0's steps 1 and 2.
  void host(Deadline deadline) {
    char directory[] = "/tmp/tandem-join-XXXXXX";
    TANDEM_CHECK(::mkdtemp(directory) != nullptr,
                 "distributed::init: cannot create a directory in /tmp for the name server");
    server_directory = directory;
    Listener listener(launch.master_port);
    server = start_name_server(server_directory / "uri");
    const std::string uri = read_server_uri(deadline);
    ::setenv("OMPI_MCA_pmix_server_uri", uri.c_str(), 1);
    ranks.resize(static_cast<size_t>(launch.world_size));
    std::vector<bool> joined(ranks.size(), false);
    joined[0] = true;
    try {
      for (int count = 1; count < launch.world_size;) {
        LineSocket peer = listener.accept(
            deadline, str_cat(missing_ranks(joined), " of a world of ", launch.world_size,
                              " (started with TANDEM_RANK, TANDEM_WORLD_SIZE, MASTER_ADDR and "
                              "MASTER_PORT?)"));
        std::optional<std::string> hello;
        try {
          hello = field(
              peer.receive_line(std::min(deadline, Clock::now() + kHelloWait), "a rank's hello"),
              kHello);
        } catch (const Error&) {
          continue;  // Not one of ours: something else knocked on the port.
        }
        int rank = -1, size = -1;
        if (!hello || std::sscanf(hello->c_str(), "%d %d", &rank, &size) != 2) continue;
        std::string problem;
        if (size != launch.world_size) {
          problem = str_cat("a process at ", peer.peer(), " has TANDEM_WORLD_SIZE=", size,
                            ", rank 0 has ", launch.world_size);
        } else if (rank < 1 || rank >= launch.world_size || joined[static_cast<size_t>(rank)]) {
          problem = str_cat("a second process at ", peer.peer(), " has TANDEM_RANK=", rank);
        }
        if (!problem.empty()) {
          peer.send_line(str_cat("error ", problem), deadline);
          TANDEM_CHECK(false, "distributed::init: ", problem);
        }
        peer.send_line(str_cat("server ", uri), deadline);
        ranks[static_cast<size_t>(rank)] = std::move(peer);
        joined[static_cast<size_t>(rank)] = true;
        ++count;
      }
    } catch (const Error& failure) {
      tell_ranks(str_cat("error ", failure.message()));
      throw;
    }
  }

  // Tells every rank that checked in, as far as it can in a second.
  void tell_ranks(const std::string& line) {
    const Deadline soon = Clock::now() + std::chrono::seconds(1);
    for (std::optional<LineSocket>& rank : ranks) {
      if (!rank) continue;
      try {
        rank->send_line(line.substr(0, kMaxLineBytes - 1), soon);
      } catch (const Error&) {
      }
    }
  }

  // Another rank's steps 1 and 2.
  void join(Deadline deadline) {
    master = connect_to(launch.master_addr, launch.master_port, deadline);
    master->send_line(str_cat(kHello, " ", launch.rank, " ", launch.world_size), deadline);
    const std::optional<std::string> uri =
        field(master->receive_line(deadline, "the name server's address"), "server");
    TANDEM_CHECK(uri.has_value(), "distributed::init: ", master->peer(),
                 " does not speak Tandem's rendezvous");
    ::setenv("OMPI_MCA_pmix_server_uri", uri->c_str(), 1);
  }
};

WorldJoin::WorldJoin(const LaunchEnvironment& launch, std::chrono::milliseconds timeout)
    : state_(std::make_unique<State>()) {
  state_->launch = launch;
  state_->timeout = timeout;
  const Deadline deadline = Clock::now() + timeout;
  if (launch.rank == 0) {
    state_->host(deadline);
  } else {
    state_->join(deadline);
  }
}

WorldJoin::~WorldJoin() = default;

MPI_Comm WorldJoin::connect() {
  State& s = *state_;
  const int me = s.launch.rank, size = s.launch.world_size;
  // MPI_Init has read it; children of this process must not find a server
  // that is about to end.
  ::unsetenv("OMPI_MCA_pmix_server_uri");
  // Each step has the timeout; rank k's port comes after k - 1 of them.
  auto steps_from_now = [&](int steps) { return Clock::now() + s.timeout * steps; };
  MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
  MPI_Comm world = MPI_COMM_SELF;
  std::string port;
  try {
    if (me == 0) {
      char name[MPI_MAX_PORT_NAME] = {};
      const int code = MPI_Open_port(MPI_INFO_NULL, name);
      TANDEM_CHECK(code == MPI_SUCCESS,
                   "distributed::init: MPI_Open_port failed: ", mpi_error_text(code));
      port = name;
    } else {
      const std::optional<std::string> name =
          field(s.master->receive_line(steps_from_now(me), "the MPI port's name"), "port");
      TANDEM_CHECK(name.has_value(), "distributed::init: rank 0 sent no MPI port");
      port = *name;
      world = merge_in(
          [port](MPI_Comm* intercomm) {
            return MPI_Comm_connect(port.c_str(), MPI_INFO_NULL, 0, MPI_COMM_SELF, intercomm);
          },
          /*joining=*/1, steps_from_now(1),
          str_cat("rank ", me, " connecting to ranks 0 to ", me - 1));
    }
    for (int k = me + 1; k < size; ++k) {
      if (me == 0) {
        s.ranks[static_cast<size_t>(k)]->send_line(str_cat("port ", port), steps_from_now(1));
      }
      // Ranks 0 to k-1 accept rank k together.
      MPI_Comm grown = merge_in(
          [world, port](MPI_Comm* intercomm) {
            return MPI_Comm_accept(port.c_str(), MPI_INFO_NULL, 0, world, intercomm);
          },
          /*joining=*/0, steps_from_now(1), str_cat("accepting rank ", k, " into the world"));
      if (world != MPI_COMM_SELF) MPI_Comm_free(&world);
      world = grown;
    }
  } catch (const Error& failure) {
    if (me == 0) s.tell_ranks(str_cat("error ", failure.message()));
    throw;
  }
  if (me == 0) {
    char name[MPI_MAX_PORT_NAME] = {};
    port.copy(name, sizeof name - 1);
    MPI_Close_port(name);
  }
  s.stop_server();
  int rank = -1, joined_size = 0;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &joined_size);
  TANDEM_INTERNAL_ASSERT(rank == me && joined_size == size, "joined the world as rank ", rank,
                         " of ", joined_size, ", not ", me, " of ", size);
  MPI_Comm_set_errhandler(world, MPI_ERRORS_RETURN);
  return world;
}

}  // namespace tandem::distributed
