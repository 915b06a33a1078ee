#pragma once
// A TCP port free on this machine now (the kernel's pick for a socket bound to port 0): what
// tp-run gives MASTER_PORT when none is set, and what the multi-process tests use. Another
// program may take it before it is used; the rendezvous then says the port is in use.
#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace tp {

// A TCP port that is free on this machine now: the kernel's pick, which another program may take
// before it is used.
inline int free_local_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  const bool found = fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
                     ::getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0;
  const std::string why = found ? "" : std::strerror(errno);
  if (fd >= 0) ::close(fd);
  if (!found) throw std::runtime_error("tp: cannot find a free TCP port: " + why);
  return ntohs(address.sin_port);
}

}  // namespace tp
