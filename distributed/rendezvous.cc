#include "distributed/rendezvous.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <thread>
#include <utility>

#include "core/error.h"

namespace tandem::distributed {
namespace {

using Clock = std::chrono::steady_clock;

std::string system_error(int code) { return std::strerror(code); }

// Milliseconds until the deadline, for poll(): 0 once it has passed.
int millis_left(Deadline deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return static_cast<int>(std::clamp<int64_t>(left.count(), 0, 60'000));
}

// Waits until `fd` has `events`; false at the deadline.
bool wait_for(int fd, short events, Deadline deadline) {
  while (true) {
    pollfd entry{fd, events, 0};
    const int ready = ::poll(&entry, 1, millis_left(deadline));
    if (ready > 0) return true;
    if (ready < 0 && errno != EINTR) {
      TANDEM_CHECK(false, "rendezvous: poll failed: ", system_error(errno));
    }
    if (Clock::now() >= deadline) return false;
  }
}

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

}  // namespace

LineSocket::LineSocket(int fd, std::string peer) : fd_(fd), peer_(std::move(peer)) {
  const int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

LineSocket::~LineSocket() { close_fd(fd_); }

LineSocket::LineSocket(LineSocket&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)),
      peer_(std::move(other.peer_)),
      received_(std::move(other.received_)) {}

LineSocket& LineSocket::operator=(LineSocket&& other) noexcept {
  if (this != &other) {
    close_fd(fd_);
    fd_ = std::exchange(other.fd_, -1);
    peer_ = std::move(other.peer_);
    received_ = std::move(other.received_);
  }
  return *this;
}

void LineSocket::send_line(std::string_view line, Deadline deadline) {
  TANDEM_INTERNAL_ASSERT(line.find('\n') == std::string_view::npos && line.size() < kMaxLineBytes,
                         "a rendezvous line must be one short line");
  const std::string bytes = str_cat(line, "\n");
  size_t sent = 0;
  while (sent < bytes.size()) {
    TANDEM_CHECK(wait_for(fd_, POLLOUT, deadline), "rendezvous: could not send to ", peer_,
                 " before the timeout");
    const ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    TANDEM_CHECK(n > 0, "rendezvous: sending to ", peer_, " failed: ", system_error(errno));
    sent += static_cast<size_t>(n);
  }
}

std::string LineSocket::receive_line(Deadline deadline, std::string_view waiting_for) {
  while (true) {
    const size_t end = received_.find('\n');
    if (end != std::string::npos) {
      std::string line = received_.substr(0, end);
      received_.erase(0, end + 1);
      return line;
    }
    TANDEM_CHECK(received_.size() < kMaxLineBytes, "rendezvous: ", peer_, " sent a line over ",
                 kMaxLineBytes, " bytes while this rank waited for ", waiting_for);
    TANDEM_CHECK(wait_for(fd_, POLLIN, deadline), "rendezvous: timed out waiting for ", waiting_for,
                 " from ", peer_);
    char buffer[1024];
    const ssize_t n = ::recv(fd_, buffer, sizeof buffer, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    TANDEM_CHECK(n >= 0, "rendezvous: reading from ", peer_, " failed while waiting for ",
                 waiting_for, ": ", system_error(errno));
    TANDEM_CHECK(n > 0, "rendezvous: ", peer_, " closed the connection while this rank waited for ",
                 waiting_for);
    received_.append(buffer, static_cast<size_t>(n));
  }
}

Listener::Listener(int port) : port_(port) {
  // Non-blocking: a connection that goes away between poll and accept must
  // not block accept.
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  TANDEM_CHECK(fd_ >= 0, "rendezvous: cannot create a socket: ", system_error(errno));
  const int one = 1;
  ::setsockopt(fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  address.sin_port = htons(static_cast<uint16_t>(port));
  if (::bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::listen(fd_, 128) != 0) {
    const int code = errno;
    close_fd(fd_);
    TANDEM_CHECK(false, "rendezvous: rank 0 cannot listen on port ", port,
                 " (MASTER_PORT): ", system_error(code));
  }
}

Listener::~Listener() { close_fd(fd_); }

LineSocket Listener::accept(Deadline deadline, std::string_view waiting_for) {
  while (true) {
    TANDEM_CHECK(wait_for(fd_, POLLIN, deadline), "rendezvous: timed out on port ", port_,
                 " waiting for ", waiting_for);
    sockaddr_in peer{};
    socklen_t length = sizeof peer;
    const int fd = ::accept4(fd_, reinterpret_cast<sockaddr*>(&peer), &length, SOCK_CLOEXEC);
    if (fd < 0) {
      // The connection went away before it was accepted: wait for the next.
      // Anything else (out of descriptors) would keep failing at once.
      const int code = errno;
      TANDEM_CHECK(code == ECONNABORTED || code == EINTR || code == EAGAIN || code == EPROTO,
                   "rendezvous: accepting a connection on port ", port_,
                   " failed: ", system_error(code));
      continue;
    }
    char host[INET_ADDRSTRLEN] = "?";
    ::inet_ntop(AF_INET, &peer.sin_addr, host, sizeof host);
    return LineSocket(fd, str_cat(host, ":", ntohs(peer.sin_port)));
  }
}

LineSocket connect_to(const std::string& host, int port, Deadline deadline) {
  const std::string where = str_cat(host, ":", port);
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int lookup = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  TANDEM_CHECK(lookup == 0, "rendezvous: cannot resolve MASTER_ADDR '", host,
               "': ", ::gai_strerror(lookup));
  const sockaddr_in address = *reinterpret_cast<const sockaddr_in*>(found->ai_addr);
  ::freeaddrinfo(found);
  while (true) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    TANDEM_CHECK(fd >= 0, "rendezvous: cannot create a socket: ", system_error(errno));
    // Non-blocking, so that a host that never answers costs the deadline,
    // not the kernel's two-minute connect timeout.
    int code =
        ::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0 ? 0 : errno;
    if (code == EINPROGRESS) {
      code = ETIMEDOUT;
      if (wait_for(fd, POLLOUT, deadline)) {
        socklen_t length = sizeof code;
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &code, &length);
      }
    }
    if (code == 0) return LineSocket(fd, str_cat("rank 0 at ", where));
    close_fd(fd);
    TANDEM_CHECK(
        Clock::now() < deadline, "rendezvous: could not reach rank 0 at ", where,
        " (MASTER_ADDR:MASTER_PORT) before the timeout; last attempt: ", system_error(code));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

}  // namespace tandem::distributed
