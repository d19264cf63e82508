// Lines of text between the processes of one launch, over TCP, before MPI
// connects them (Note [Joining without mpirun] in join_world.h): who is
// there, and the addresses MPI needs. Tensors never travel here.
//
//   Listener listener(29500);                        // rank 0
//   LineSocket peer = listener.accept(deadline, "the other ranks");
//   LineSocket master = connect_to("10.0.0.1", 29500, deadline);  // rank k
//   master.send_line("hello", deadline);
//
// Every wait ends at its deadline with a tandem::Error saying what it waited
// for; a line is at most kMaxLineBytes long, so a stray or hostile peer can
// neither hang nor flood the process.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <string_view>

namespace tandem::distributed {

using Deadline = std::chrono::steady_clock::time_point;

inline constexpr size_t kMaxLineBytes = 4096;

// One TCP connection carrying '\n'-terminated lines. Closed when destroyed.
class LineSocket {
 public:
  // Takes ownership of a connected socket; `peer` names it in messages.
  LineSocket(int fd, std::string peer);
  ~LineSocket();
  LineSocket(LineSocket&& other) noexcept;
  LineSocket& operator=(LineSocket&& other) noexcept;
  LineSocket(const LineSocket&) = delete;
  LineSocket& operator=(const LineSocket&) = delete;

  // `line` must not contain '\n'.
  void send_line(std::string_view line, Deadline deadline);
  // The next line, without its '\n'. An Error at the deadline, when the peer
  // closes the connection, or past kMaxLineBytes; `waiting_for` says what the
  // line was to carry.
  std::string receive_line(Deadline deadline, std::string_view waiting_for);
  const std::string& peer() const { return peer_; }

 private:
  int fd_ = -1;
  std::string peer_;
  std::string received_;  // Bytes read past the last line returned.
};

// A listening TCP socket on every IPv4 address of this machine.
class Listener {
 public:
  explicit Listener(int port);
  ~Listener();
  Listener(const Listener&) = delete;
  Listener& operator=(const Listener&) = delete;

  // The next connection; an Error at the deadline saying it waited for
  // `waiting_for`.
  LineSocket accept(Deadline deadline, std::string_view waiting_for);

 private:
  int fd_ = -1;
  int port_ = 0;
};

// Connects to host:port (IPv4), retrying while nobody listens there yet (the
// listener may start later than its peers) until the deadline.
LineSocket connect_to(const std::string& host, int port, Deadline deadline);

}  // namespace tandem::distributed
