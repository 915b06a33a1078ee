// tp-run: starts N processes of a program on this machine as ranks 0..N-1 of one run, with the
// environment torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), prefixes
// each line they print with "[rank] ", forwards SIGINT and SIGTERM to them, and exits with the
// first failure's status (0 if every rank succeeds).
//
//   tp-run -n 2 ./fashion_mnist --epochs 3
//   tp-run -n 4 --port 29600 --grace 10 ./train
//
// --port: MASTER_PORT (default: $MASTER_PORT, else a free port); --addr: MASTER_ADDR (default:
// $MASTER_ADDR, else 127.0.0.1). When a rank fails, the others get --grace seconds (default 30)
// to notice and report it themselves (tp names the missing rank), then are terminated.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <tp/distributed/free_port.hpp>

namespace {

volatile std::sig_atomic_t pending_signal = 0;
extern "C" void on_signal(int s) { pending_signal = s; }

[[noreturn]] void usage(const std::string& why) {
  std::cerr << "tp-run: " << why << "\nusage: tp-run -n N [--port P] [--addr A] [--grace SECONDS] program [args...]\n";
  std::exit(2);
}


struct Rank {
  pid_t pid = -1;
  int out = -1;          // its stdout and stderr, merged
  std::string partial;   // a line not yet ended
  std::optional<int> status;
};

void print_lines(int rank, Rank& r, const char* data, std::size_t n) {
  r.partial.append(data, n);
  std::size_t start = 0;
  for (std::size_t nl; (nl = r.partial.find('\n', start)) != std::string::npos; start = nl + 1)
    std::cout << '[' << rank << "] " << r.partial.substr(start, nl - start + 1);
  r.partial.erase(0, start);
  std::cout.flush();
}

int exit_code(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

}  // namespace

int main(int argc, char** argv) {
  int n = 0;
  double grace = 30;
  std::string port = std::getenv("MASTER_PORT") ? std::getenv("MASTER_PORT") : "";
  std::string addr = std::getenv("MASTER_ADDR") ? std::getenv("MASTER_ADDR") : "127.0.0.1";
  int i = 1;
  for (; i < argc && argv[i][0] == '-'; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) usage(flag + " needs a value");
    const std::string value = argv[++i];
    try {
      if (flag == "-n" || flag == "--nproc") n = std::stoi(value);
      else if (flag == "--port") port = value;
      else if (flag == "--addr") addr = value;
      else if (flag == "--grace") grace = std::stod(value);
      else usage("unknown option " + flag);
    } catch (const std::logic_error&) {
      usage(flag + " needs a number, got '" + value + "'");
    }
  }
  if (n < 1) usage("give the number of processes with -n N (N >= 1)");
  if (i >= argc) usage("give the program to run");
  if (port.empty()) {
    try {
      port = std::to_string(tp::free_local_port());
    } catch (const std::exception& e) {
      usage(std::string(e.what()) + "; give a port with --port");
    }
  }

  struct sigaction action {};
  action.sa_handler = on_signal;
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);

  std::vector<Rank> ranks(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    int fds[2];
    if (::pipe(fds) != 0) usage(std::string("pipe: ") + std::strerror(errno));
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::dup2(fds[1], STDOUT_FILENO);
      ::dup2(fds[1], STDERR_FILENO);
      ::close(fds[0]);
      ::close(fds[1]);
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(n).c_str(), 1);
      ::setenv("LOCAL_WORLD_SIZE", std::to_string(n).c_str(), 1);
      ::setenv("MASTER_ADDR", addr.c_str(), 1);
      ::setenv("MASTER_PORT", port.c_str(), 1);
      ::execvp(argv[i], argv + i);
      std::fprintf(stderr, "tp-run: cannot run %s: %s\n", argv[i], std::strerror(errno));
      ::_exit(127);
    }
    ::close(fds[1]);
    ranks[static_cast<std::size_t>(r)] = Rank{pid, fds[0], {}, std::nullopt};
  }

  std::optional<int> first_failure;
  std::optional<std::chrono::steady_clock::time_point> terminate_at;
  bool terminated = false;
  for (;;) {
    if (pending_signal) {
      for (auto& r : ranks)
        if (!r.status) ::kill(r.pid, pending_signal);
      pending_signal = 0;
    }
    std::vector<pollfd> fds;
    std::vector<int> owner;
    for (int r = 0; r < n; ++r)
      if (ranks[static_cast<std::size_t>(r)].out >= 0) {
        fds.push_back({ranks[static_cast<std::size_t>(r)].out, POLLIN, 0});
        owner.push_back(r);
      }
    if (fds.empty()) break;
    int wait_ms = -1;
    if (terminate_at && !terminated)
      wait_ms = static_cast<int>(std::max<long>(0, std::chrono::duration_cast<std::chrono::milliseconds>(*terminate_at - std::chrono::steady_clock::now()).count()));
    const int ready = ::poll(fds.data(), fds.size(), wait_ms);
    if (ready < 0 && errno != EINTR) break;
    for (std::size_t k = 0; ready > 0 && k < fds.size(); ++k) {
      if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      auto& r = ranks[static_cast<std::size_t>(owner[k])];
      char buffer[4096];
      const auto got = ::read(r.out, buffer, sizeof buffer);
      if (got > 0) {
        print_lines(owner[k], r, buffer, static_cast<std::size_t>(got));
        continue;
      }
      if (got < 0 && errno == EINTR) continue;
      if (!r.partial.empty()) print_lines(owner[k], r, "\n", 1);
      ::close(r.out);
      r.out = -1;
      int status = 0;
      ::waitpid(r.pid, &status, 0);
      r.status = status;
      if (exit_code(status) != 0 && !first_failure) {
        first_failure = exit_code(status);
        std::cout << "tp-run: rank " << owner[k] << " failed (exit status " << *first_failure << "); the others have " << grace
                  << " s to finish\n" << std::flush;
        terminate_at = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<long>(grace * 1000));
      }
    }
    if (terminate_at && !terminated && std::chrono::steady_clock::now() >= *terminate_at) {
      for (auto& r : ranks)
        if (!r.status) ::kill(r.pid, SIGTERM);
      terminated = true;
    }
  }
  for (auto& r : ranks)
    if (!r.status) {
      int status = 0;
      ::waitpid(r.pid, &status, 0);
      r.status = status;
      if (exit_code(status) != 0 && !first_failure) first_failure = exit_code(status);
    }
  return first_failure.value_or(0);
}
