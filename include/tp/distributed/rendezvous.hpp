#pragma once
// The rendezvous of a multi-process run: c10d's TCP store on MASTER_ADDR:MASTER_PORT, hosted by
// rank 0, with the checks that c10d leaves out.
//
// - Permanent errors fail at once, with the variable and its value: a MASTER_ADDR that does not
//   resolve, a MASTER_PORT that another program holds on rank 0's machine.
// - Waiting happens only where it can help, and quietly: a rank whose master is not up yet
//   probes the port itself (backing off to half a second) and hands the address to c10d only
//   once something listens there, so c10d's client does not log a warning for every failed
//   attempt; a temporary name-service failure is retried the same way.
// - LibTorch 2.4 and later default to the libuv store, which some builds lack (Debian's); the
//   store uses it where the build has it, and the classic one elsewhere.
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <iostream>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <tp/distributed/environment.hpp>

namespace tp::detail {

using rendezvous_clock = std::chrono::steady_clock;

inline std::string seconds_text(std::chrono::milliseconds t) {
  std::ostringstream s;
  s << static_cast<double>(t.count()) / 1000.0 << " s";
  return s.str();
}

// The addresses MASTER_ADDR names. A name that does not exist is final; a name service that
// does not answer (EAI_AGAIN) is asked again until the deadline.
inline std::unique_ptr<addrinfo, void (*)(addrinfo*)> resolve_master(const process_environment& env,
                                                                      rendezvous_clock::time_point deadline) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  const std::string port = std::to_string(env.master_port);
  for (auto pause = std::chrono::milliseconds(10);; pause = std::min(pause * 2, std::chrono::milliseconds(500))) {
    addrinfo* found = nullptr;
    const int rc = ::getaddrinfo(env.master_addr.c_str(), port.c_str(), &hints, &found);
    if (rc == 0) return {found, ::freeaddrinfo};
    if (rc != EAI_AGAIN || rendezvous_clock::now() + pause > deadline)
      throw std::invalid_argument("tp: MASTER_ADDR is '" + env.master_addr + "', which does not resolve to an address (" +
                                  ::gai_strerror(rc) + "); set it to the host name or IP address of rank 0's machine");
    std::this_thread::sleep_for(pause);
  }
}

// Rank 0 hosts the store on every interface: a port already taken is an error now, not after
// the timeout.
inline void check_port_free(const process_environment& env) {
  for (const int family : {AF_INET6, AF_INET}) {
    const int fd = ::socket(family, SOCK_STREAM, 0);
    if (fd < 0) continue;  // no IPv6 here: try IPv4
    const int on = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on);  // as c10d's server does
    int rc;
    if (family == AF_INET6) {
      sockaddr_in6 a{};
      a.sin6_family = AF_INET6;
      a.sin6_port = htons(env.master_port);
      a.sin6_addr = in6addr_any;
      rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    } else {
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(env.master_port);
      a.sin_addr.s_addr = htonl(INADDR_ANY);
      rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    }
    const int error = errno;
    ::close(fd);
    if (rc == 0) return;
    if (error == EADDRINUSE)
      throw std::runtime_error("tp: MASTER_PORT is " + std::to_string(env.master_port) +
                               ", but another program on rank 0's machine listens on that port; set MASTER_PORT to a free port");
  }
}

// Whether something accepts connections at `a` now (a connect that succeeds within `wait`).
inline bool accepts_connections(const addrinfo& a, std::chrono::milliseconds wait, int& error) {
  const int fd = ::socket(a.ai_family, a.ai_socktype | SOCK_NONBLOCK, a.ai_protocol);
  if (fd < 0) {
    error = errno;
    return false;
  }
  bool up = ::connect(fd, a.ai_addr, a.ai_addrlen) == 0;
  error = up ? 0 : errno;
  if (!up && error == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, static_cast<int>(std::max<std::int64_t>(wait.count(), 1))) == 1) {
      socklen_t length = sizeof error;
      ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length);
      up = error == 0;
    } else {
      error = ETIMEDOUT;
    }
  }
  ::close(fd);
  return up;
}

// Waits until rank 0's store accepts connections, or throws at the deadline.
inline void wait_for_master(const process_environment& env, const addrinfo& addresses, rendezvous_clock::time_point deadline,
                            std::chrono::milliseconds timeout) {
  int error = 0;
  const auto said_after = rendezvous_clock::now() + std::chrono::seconds(2);
  bool said = false;
  for (auto pause = std::chrono::milliseconds(10);; pause = std::min(pause * 2, std::chrono::milliseconds(500))) {
    for (const addrinfo* a = &addresses; a; a = a->ai_next)
      if (accepts_connections(*a, std::chrono::milliseconds(500), error)) return;
    if (!said && rendezvous_clock::now() >= said_after) {  // one line, not one per attempt
      said = true;
      std::cerr << "tp: rank " << env.rank << " is waiting for rank 0's rendezvous store at " << env.master_addr << ":"
                << env.master_port << " (" << std::strerror(error) << "), for up to " << seconds_text(timeout) << std::endl;
    }
    if (rendezvous_clock::now() + pause > deadline)
      throw std::runtime_error("cannot reach rank 0's rendezvous store at " + env.master_addr + ":" + std::to_string(env.master_port) +
                               " within " + seconds_text(timeout) + " (last attempt: " + std::strerror(error) +
                               "); is rank 0 running, and are MASTER_ADDR and MASTER_PORT the same on every rank?");
    std::this_thread::sleep_for(pause);
  }
}

inline c10d::TCPStoreOptions store_options(const process_environment& env, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions options;
  options.port = env.master_port;
  options.isServer = env.rank == 0;
  options.numWorkers = static_cast<std::size_t>(env.world_size);
  options.waitWorkers = false;  // join_ranks waits, and says for whom
  options.timeout = timeout;
  return options;
}

// LibTorch 2.4+ asks for the libuv store by default and refuses, before it binds or connects,
// where the build has no libuv; whether it has is not exported, so ask and fall back.
template <class Options>
c10::intrusive_ptr<c10d::TCPStore> make_store(const std::string& address, Options options) {
  if constexpr (requires { options.useLibUV; }) {
    try {
      options.useLibUV = true;
      return c10::make_intrusive<c10d::TCPStore>(address, options);
    } catch (const std::exception& e) {
      if (std::string(e.what()).find("without libuv support") == std::string::npos) throw;
      options.useLibUV = false;
    }
  }
  return c10::make_intrusive<c10d::TCPStore>(address, options);
}

// The store's keys of the join below (c10d's process groups use keys of their own, without '/').
inline constexpr const char* rendezvous_world_key = "tp/world_size";
inline constexpr const char* rendezvous_failed_key = "tp/failed";

// Tells the other ranks why this one will not go on (best effort: the store may be gone).
inline void post_rendezvous_failure(c10d::Store& store, const process_environment& env, const std::string& why) {
  try {
    const std::string text = "rank " + std::to_string(env.rank) + ": " + why;
    store.set(rendezvous_failed_key, std::vector<std::uint8_t>(text.begin(), text.end()));
  } catch (...) {
  }
}

// Every rank counted in under `key` before any goes on, within the deadline. c10d's own wait for
// workers says nothing while it waits and, in LibTorch 1.13, gives up quietly at its timeout; and
// a rank that ends while another still connects shows that one only "Connection closed by peer".
// So each rank checks its WORLD_SIZE against rank 0's, counts itself in and waits for the rest,
// saying once whom it waits for; a rank that cannot go on posts why, and the others end with it.
inline void join_ranks(c10d::Store& store, const process_environment& env, const std::string& key,
                       rendezvous_clock::time_point deadline, std::chrono::milliseconds timeout) {
  const auto where = env.master_addr + ":" + std::to_string(env.master_port);
  auto text = [&](const std::string& k) {
    const auto bytes = store.get(k);
    return std::string(bytes.begin(), bytes.end());
  };
  auto check_failed = [&] {
    if (store.check({rendezvous_failed_key}))
      throw std::runtime_error("another process of the run stopped before training began (" + text(rendezvous_failed_key) +
                               "); this rank stops too");
  };
  if (env.rank == 0) {
    const auto mine = std::to_string(env.world_size);
    store.set(rendezvous_world_key, std::vector<std::uint8_t>(mine.begin(), mine.end()));
  }
  const auto said_after = rendezvous_clock::now() + std::chrono::seconds(5);
  bool said = false, compared = env.rank == 0;
  std::int64_t joined = -1;
  for (auto pause = std::chrono::milliseconds(5);; pause = std::min(pause * 2, std::chrono::milliseconds(250))) {
    check_failed();
    if (!compared && store.check({rendezvous_world_key})) {
      compared = true;
      const auto theirs = text(rendezvous_world_key);
      if (theirs != std::to_string(env.world_size)) {
        const auto why = "WORLD_SIZE is " + std::to_string(env.world_size) + " here but " + theirs +
                         " on rank 0: start every rank of the run with the same WORLD_SIZE";
        post_rendezvous_failure(store, env, why);
        throw std::invalid_argument("tp: " + why);
      }
    }
    if (compared && joined < 0) joined = store.add(key, 1);  // counted in once, after the check
    const auto count = compared ? store.add(key, 0) : joined;
    if (count >= env.world_size) return;
    if (!said && rendezvous_clock::now() >= said_after) {
      said = true;
      std::cerr << "tp: rank " << env.rank << " is waiting for the other processes of the run at " << where << " ("
                << std::max<std::int64_t>(count, 0) << " of " << env.world_size << " here), for up to " << seconds_text(timeout)
                << std::endl;
    }
    if (rendezvous_clock::now() + pause > deadline)
      throw std::runtime_error("only " + std::to_string(std::max<std::int64_t>(count, 0)) + " of WORLD_SIZE=" +
                               std::to_string(env.world_size) + " processes joined the run at " + where + " within " +
                               seconds_text(timeout) + "; start every rank (RANK 0 to " + std::to_string(env.world_size - 1) +
                               ") with the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE (a rank that ended early says why in its own output)");
    std::this_thread::sleep_for(pause);
  }
}

// The store of this run, connected (rank 0: hosting it, and every rank connected to it), once
// every rank has joined it (join_ranks).
inline c10::intrusive_ptr<c10d::TCPStore> connect_store(const process_environment& env, std::chrono::milliseconds timeout) {
  const auto deadline = rendezvous_clock::now() + timeout;
  const auto addresses = resolve_master(env, deadline);
  if (env.rank == 0)
    check_port_free(env);
  else
    wait_for_master(env, *addresses, deadline, timeout);
  const auto left = std::max(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - rendezvous_clock::now()),
                             std::chrono::milliseconds(1000));
  c10::intrusive_ptr<c10d::TCPStore> store;
  try {
    store = make_store(env.master_addr, store_options(env, left));
  } catch (const std::exception& e) {
    const std::string what = e.what();
    throw std::runtime_error(std::string(env.rank == 0 ? "cannot host the rendezvous store on port " + std::to_string(env.master_port)
                                                       : "cannot join rank 0's rendezvous store at " + env.master_addr + ":" +
                                                             std::to_string(env.master_port)) +
                             ": " + what.substr(0, what.find('\n')));
  }
  join_ranks(*store, env, "tp/joined", deadline, timeout);
  return store;
}

}  // namespace tp::detail
