// The rendezvous of ranks started without mpirun (distributed/rendezvous.h,
// distributed/join_world.h), before MPI starts: lines over TCP with their
// deadlines, and rank 0's side of the launch against peers that are wrong,
// stray or silent. These run in one process without MPI; the whole launch,
// MPI included, is the ctest Distributed.without_mpirun_*.
#include "distributed/rendezvous.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include "core/error.h"
#include "tests/error_of.h"

#include "distributed/join_world.h"

namespace tandem::distributed {
namespace {

using ::tandem::testing::error_of;
using ::testing::HasSubstr;
using ::testing::StartsWith;
using namespace std::chrono_literals;

Deadline in(std::chrono::milliseconds wait) { return std::chrono::steady_clock::now() + wait; }

sockaddr_in loopback(int port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = htons(static_cast<uint16_t>(port));
  return address;
}

// A port nobody listens on now (the kernel's pick of a free one).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address = loopback(0);
  ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address);
  socklen_t length = sizeof address;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length);
  ::close(fd);
  return ntohs(address.sin_port);
}

TEST(RendezvousTest, LinesArriveWholeAndInOrder) {
  const int port = free_port();
  Listener listener(port);
  std::thread peer([port] {
    LineSocket socket = connect_to("127.0.0.1", port, in(5s));
    socket.send_line("first", in(5s));
    socket.send_line("", in(5s));
    socket.send_line("third line", in(5s));
    EXPECT_EQ(socket.receive_line(in(5s), "the answer"), "answer");
  });
  LineSocket socket = listener.accept(in(5s), "the peer");
  EXPECT_EQ(socket.receive_line(in(5s), "a line"), "first");
  EXPECT_EQ(socket.receive_line(in(5s), "a line"), "");
  EXPECT_EQ(socket.receive_line(in(5s), "a line"), "third line");
  socket.send_line("answer", in(5s));
  peer.join();
}

TEST(RendezvousTest, ConnectWaitsForALateListener) {
  const int port = free_port();
  std::thread late([port] {
    std::this_thread::sleep_for(300ms);
    Listener listener(port);
    listener.accept(in(5s), "the early peer").send_line("here", in(5s));
  });
  LineSocket socket = connect_to("127.0.0.1", port, in(10s));
  EXPECT_EQ(socket.receive_line(in(5s), "a line"), "here");
  late.join();
}

TEST(RendezvousTest, EveryWaitEndsAtItsDeadlineNamingWhatItWaitedFor) {
  const int port = free_port();
  EXPECT_THAT(error_of([&] { connect_to("127.0.0.1", port, in(200ms)); }),
              HasSubstr(std::to_string(port) + " (MASTER_ADDR:MASTER_PORT) before the timeout"));
  Listener listener(port);
  EXPECT_THAT(error_of([&] { listener.accept(in(100ms), "rank 3"); }),
              HasSubstr("waiting for rank 3"));
  LineSocket client = connect_to("127.0.0.1", port, in(5s));
  LineSocket server = listener.accept(in(5s), "the client");
  EXPECT_THAT(error_of([&] { server.receive_line(in(100ms), "its hello"); }),
              HasSubstr("timed out waiting for its hello"));
}

TEST(RendezvousTest, AnUnknownHostIsAnErrorNamingIt) {
  EXPECT_THAT(error_of([] { connect_to("no-such-host.invalid", 29500, in(5s)); }),
              HasSubstr("cannot resolve MASTER_ADDR 'no-such-host.invalid'"));
}

TEST(RendezvousTest, APeerThatHangsUpIsAnError) {
  const int port = free_port();
  Listener listener(port);
  std::optional<LineSocket> client = connect_to("127.0.0.1", port, in(5s));
  LineSocket server = listener.accept(in(5s), "the client");
  client.reset();
  EXPECT_THAT(error_of([&] { server.receive_line(in(5s), "its hello"); }),
              HasSubstr("closed the connection while this rank waited for its hello"));
}

TEST(RendezvousTest, ALineOverTheLimitIsRefused) {
  const int port = free_port();
  Listener listener(port);
  // A raw socket: LineSocket itself never sends such a line.
  const int flood = ::socket(AF_INET, SOCK_STREAM, 0);
  const sockaddr_in address = loopback(port);
  ASSERT_EQ(::connect(flood, reinterpret_cast<const sockaddr*>(&address), sizeof address), 0);
  LineSocket server = listener.accept(in(5s), "the flood");
  const std::string bytes(2 * kMaxLineBytes, 'x');
  ASSERT_EQ(::send(flood, bytes.data(), bytes.size(), 0), static_cast<ssize_t>(bytes.size()));
  EXPECT_THAT(error_of([&] { server.receive_line(in(5s), "its hello"); }),
              HasSubstr("sent a line over 4096 bytes"));
  ::close(flood);
}

// Rank 0's steps 1 and 2 (Note [Joining without mpirun]) against scripted
// peers: WorldJoin's constructor returns once every rank has checked in.
class RankZeroTest : public ::testing::Test {
 protected:
  LaunchEnvironment launch(int world_size) {
    return {.rank = 0, .world_size = world_size, .master_addr = "127.0.0.1", .master_port = port_};
  }
  LineSocket peer() { return connect_to("127.0.0.1", port_, in(10s)); }
  int port_ = free_port();
};

TEST_F(RankZeroTest, IgnoresStrayConnectionsAndWelcomesItsRanks) {
  std::string welcome;
  std::thread ranks([&] {
    peer().send_line("GET / HTTP/1.1", in(5s));  // Something else knocking.
    { LineSocket silent = peer(); }              // Connects and hangs up.
    LineSocket rank1 = peer();
    rank1.send_line("tandem-join 1 2", in(5s));
    welcome = rank1.receive_line(in(10s), "the name server's address");
  });
  WorldJoin join(launch(2), 10s);
  ranks.join();
  EXPECT_THAT(welcome, StartsWith("server "));
  EXPECT_GT(welcome.size(), 7u);
}

TEST_F(RankZeroTest, RefusesAProcessOfAnotherWorldSizeAndTellsTheOthers) {
  std::string told_rank1, told_stranger;
  std::thread ranks([&] {
    LineSocket rank1 = peer();
    rank1.send_line("tandem-join 1 3", in(5s));
    told_rank1 = rank1.receive_line(in(10s), "the name server's address");
    LineSocket stranger = peer();
    stranger.send_line("tandem-join 2 4", in(5s));
    told_stranger = stranger.receive_line(in(10s), "the verdict");
    told_rank1 = rank1.receive_line(in(10s), "the verdict");
  });
  EXPECT_THAT(error_of([&] { WorldJoin join(launch(3), 10s); }),
              HasSubstr("has TANDEM_WORLD_SIZE=4, rank 0 has 3"));
  ranks.join();
  EXPECT_THAT(told_stranger, StartsWith("error "));
  EXPECT_THAT(told_rank1, HasSubstr("TANDEM_WORLD_SIZE=4"));
}

TEST_F(RankZeroTest, RefusesTwoProcessesWithOneRank) {
  std::thread ranks([&] {
    LineSocket first = peer();
    first.send_line("tandem-join 1 3", in(5s));
    first.receive_line(in(10s), "the name server's address");
    LineSocket second = peer();
    second.send_line("tandem-join 1 3", in(5s));
    EXPECT_THAT(second.receive_line(in(10s), "the verdict"), StartsWith("error "));
  });
  EXPECT_THAT(error_of([&] { WorldJoin join(launch(3), 10s); }), HasSubstr("has TANDEM_RANK=1"));
  ranks.join();
}

// The timeout leaves time for rank 2's hello on a loaded machine (starting
// the name server alone takes most of a second there).
TEST_F(RankZeroTest, NamesTheRanksThatNeverCame) {
  std::thread ranks([&] {
    LineSocket rank2 = peer();
    rank2.send_line("tandem-join 2 4", in(5s));
    rank2.receive_line(in(10s), "the name server's address");
    EXPECT_THAT(rank2.receive_line(in(10s), "the verdict"),
                HasSubstr("ranks 1, 3 of a world of 4"));
  });
  EXPECT_THAT(error_of([&] { WorldJoin join(launch(4), 5s); }),
              HasSubstr("ranks 1, 3 of a world of 4"));
  ranks.join();
}

// Rank 1's step 2 against a scripted rank 0.
TEST(OtherRankTest, ReportsRankZerosRefusalAndAStrangerAtItsPort) {
  for (const auto& [reply, expected] :
       {std::pair<std::string, std::string>{"error you are late",
                                            "rank 0 ended the launch: you are late"},
        {"SSH-2.0-OpenSSH", "does not speak Tandem's rendezvous"}}) {
    const int port = free_port();
    std::thread master([&, port] {
      Listener listener(port);
      LineSocket rank1 = listener.accept(in(10s), "rank 1");
      EXPECT_EQ(rank1.receive_line(in(10s), "its hello"), "tandem-join 1 2");
      rank1.send_line(reply, in(5s));
    });
    const LaunchEnvironment launch{
        .rank = 1, .world_size = 2, .master_addr = "127.0.0.1", .master_port = port};
    EXPECT_THAT(error_of([&] { WorldJoin join(launch, 10s); }), HasSubstr(expected));
    master.join();
  }
}

// Sets environment variables for one test, unset again after it.
class LaunchEnvironmentTest : public ::testing::Test {
 protected:
  void set(const char* name, const char* value) {
    ::setenv(name, value, 1);
    names_.push_back(name);
  }
  void TearDown() override {
    for (const char* name : names_) ::unsetenv(name);
  }
  std::vector<const char*> names_;
};

TEST_F(LaunchEnvironmentTest, AbsentWithoutTandemRankOrWorldSize) {
  EXPECT_FALSE(launch_environment().has_value());
}

TEST_F(LaunchEnvironmentTest, ReadsTheFourVariables) {
  set("TANDEM_RANK", "2");
  set("TANDEM_WORLD_SIZE", "4");
  set("MASTER_ADDR", "node7");
  set("MASTER_PORT", "31000");
  const std::optional<LaunchEnvironment> launch = launch_environment();
  ASSERT_TRUE(launch.has_value());
  EXPECT_EQ(launch->rank, 2);
  EXPECT_EQ(launch->world_size, 4);
  EXPECT_EQ(launch->master_addr, "node7");
  EXPECT_EQ(launch->master_port, 31000);
}

TEST_F(LaunchEnvironmentTest, NamesWhatIsMissingOrOutOfRange) {
  set("TANDEM_RANK", "1");
  EXPECT_THAT(error_of([] { launch_environment(); }), HasSubstr("TANDEM_WORLD_SIZE is not set"));
  set("TANDEM_WORLD_SIZE", "2");
  EXPECT_THAT(error_of([] { launch_environment(); }), HasSubstr("MASTER_ADDR must name"));
  set("MASTER_ADDR", "localhost");
  set("TANDEM_RANK", "2");
  EXPECT_THAT(error_of([] { launch_environment(); }), HasSubstr("TANDEM_RANK"));
  set("TANDEM_RANK", "0");
  set("MASTER_PORT", "70000");
  EXPECT_THAT(error_of([] { launch_environment(); }), HasSubstr("MASTER_PORT"));
}

}  // namespace
}  // namespace tandem::distributed
