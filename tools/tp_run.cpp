// tp-run: starts N processes of a program on this machine as ranks 0..N-1 of one run, with the
// environment torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), prefixes
// each line they print with "[rank] ", forwards SIGINT, SIGTERM and SIGUSR1 to them, and exits
// with the first failure's status (0 if every rank succeeds).
//
// The ranks run in a process group of their own, so that a Ctrl-C at the terminal reaches each
// of them once, through tp-run, rather than twice (tp takes a second SIGINT as "end at once").
//
//   tp-run -n 2 ./fashion_mnist --epochs 3
//   tp-run -n 4 --port 29600 --grace 10 ./train
//
// --port: MASTER_PORT (default: $MASTER_PORT, else a free port); --addr: MASTER_ADDR (default:
// $MASTER_ADDR, else 127.0.0.1). When a rank fails, the others get --grace seconds (default 30)
// to notice and report it themselves (tp names the missing rank), then are terminated.
// --max-restarts K (torchrun's flag): when a rank fails, and no stop signal was passed on, every
// rank is stopped (after the grace) and the job starts again, at most K times, each restart said
// in one line; the program goes on from its newest checkpoint (tp's ModelSaver resumes from its
// folder), so a job that outlives a dying rank ends as an uninterrupted one would.
// tp-run's flags come before the program; everything from the program on is the program's own.
// A bad flag or value exits with status 2 and names it; --help lists the flags.
#include <algorithm>
#include <charconv>
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

#include <CLI/CLI.hpp>

#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <tp/distributed/free_port.hpp>

namespace {

volatile std::sig_atomic_t pending_signal = 0;
extern "C" void on_signal(int s) { pending_signal = s; }

[[noreturn]] void usage(const std::string& why) {
  std::cerr << "tp-run: " << why << "\nusage: tp-run -n N [--port P] [--addr A] [--grace SECONDS] [--max-restarts K] program [args...]\n";
  std::exit(2);
}

struct options {
  int n = 0;
  int port = 0;  // 0: a free one
  std::string addr = "127.0.0.1";
  double grace = 30;
  int max_restarts = 0;
  std::vector<std::string> command;  // the program and its arguments, as given
};

// A value that parses as a number and is below `low` is refused, naming the least; one that does
// not parse is left to CLI11's conversion, which names the flag and the value.
CLI::Validator at_least(int low) {
  return CLI::Validator(
      [low](std::string& text) -> std::string {
        double value = 0;
        const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
        if (error != std::errc() || end != text.data() + text.size() || value >= low) return {};
        return "must be at least " + std::to_string(low) + ", not " + text;
      },
      ">= " + std::to_string(low));
}

options parse(int argc, char** argv) {
  options o;
  CLI::App app("Starts N processes of a program on this machine as the ranks of one run, with the environment torchrun "
               "sets (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), and prefixes their lines with [rank].",
               "tp-run");
  app.footer("usage: tp-run -n N [OPTIONS] program [args...]\n"
             "The options come before the program; the arguments after it are the program's, passed on as they are.");
  app.option_defaults()->always_capture_default();
  // Parsing stops at the first argument that is no flag of ours: the program, whose own
  // arguments (flags or not) must reach it untouched.
  app.prefix_command();
  app.add_option("-n,--nproc", o.n, "number of processes (ranks); required")->check(at_least(1))->default_str("");
  app.add_option("--port", o.port, "MASTER_PORT of the rendezvous")->envname("MASTER_PORT")->check(CLI::Range(1, 65535))
      ->default_str("a free port");
  app.add_option("--addr", o.addr, "MASTER_ADDR of the rendezvous")->envname("MASTER_ADDR");
  app.add_option("--grace", o.grace, "seconds the other ranks get to finish after one fails, before they are terminated")
      ->check(at_least(0));
  app.add_option("--max-restarts", o.max_restarts, "times the job starts again, from the program's newest checkpoint, when a rank fails")
      ->check(at_least(0));
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return "tp-run: " + std::string(e.what()) + "\nrun tp-run --help for the flags\n";
  });
  try {
    app.parse(argc, argv);
    o.command = app.remaining();
    // CLI11 puts a flag it does not know there too, and everything after it.
    if (!o.command.empty() && o.command.front() != "--" && o.command.front().starts_with("-"))
      throw CLI::ExtrasError("unknown option " + o.command.front(), CLI::ExitCodes::ExtrasError);
    if (!o.command.empty() && o.command.front() == "--") o.command.erase(o.command.begin());
  } catch (const CLI::ParseError& e) {
    app.exit(e);  // --help to stdout, errors to stderr
    std::exit(e.get_exit_code() == 0 ? 0 : 2);
  }
  if (o.n < 1) usage("give the number of processes with -n N (N >= 1)");
  if (o.command.empty()) usage("give the program to run");
  return o;
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

// How one run of the job ended: the first failure's exit status (none: every rank succeeded),
// and whether it followed a stop signal passed on to the ranks.
struct job_end {
  std::optional<int> failure;
  bool stopped_by_signal = false;
};

// Starts the n ranks, relays their lines and signals, and waits for every one of them.
job_end run_job(const options& o, const std::string& port, const std::vector<char*>& command) {
  const int n = o.n;
  const double grace = o.grace;
  int forwarded = 0;  // the last signal passed on to the ranks

  std::vector<Rank> ranks(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    int fds[2];
    if (::pipe(fds) != 0) usage(std::string("pipe: ") + std::strerror(errno));
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setpgid(0, 0);
      for (int s : {SIGINT, SIGTERM, SIGUSR1}) ::signal(s, SIG_DFL);
      ::dup2(fds[1], STDOUT_FILENO);
      ::dup2(fds[1], STDERR_FILENO);
      ::close(fds[0]);
      ::close(fds[1]);
      ::setenv("RANK", std::to_string(r).c_str(), 1);
      ::setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      ::setenv("WORLD_SIZE", std::to_string(n).c_str(), 1);
      ::setenv("LOCAL_WORLD_SIZE", std::to_string(n).c_str(), 1);
      ::setenv("MASTER_ADDR", o.addr.c_str(), 1);
      ::setenv("MASTER_PORT", port.c_str(), 1);
      ::execvp(command[0], command.data());
      std::fprintf(stderr, "tp-run: cannot run %s: %s\n", command[0], std::strerror(errno));
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
      forwarded = pending_signal;
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
        std::cout << "tp-run: rank " << owner[k] << (forwarded && *first_failure == 128 + forwarded ? " stopped on the signal passed on" : " failed")
                  << " (exit status " << *first_failure << "); the others have " << grace
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
  return {first_failure, forwarded != 0};
}

}  // namespace

int main(int argc, char** argv) {
  const options o = parse(argc, argv);
  std::vector<std::string> arguments = o.command;
  std::vector<char*> command;
  for (auto& arg : arguments) command.push_back(arg.data());
  command.push_back(nullptr);

  struct sigaction action {};
  action.sa_handler = on_signal;
  ::sigaction(SIGINT, &action, nullptr);
  ::sigaction(SIGTERM, &action, nullptr);
  ::sigaction(SIGUSR1, &action, nullptr);

  for (int restart = 0;; ++restart) {
    // A fresh free port for each run: the last one's may still be held by closing connections.
    std::string port = o.port > 0 ? std::to_string(o.port) : "";
    if (port.empty()) {
      try {
        port = std::to_string(tp::free_local_port());
      } catch (const std::exception& e) {
        usage(std::string(e.what()) + "; give a port with --port");
      }
    }
    const auto end = run_job(o, port, command);
    if (!end.failure) return 0;
    if (end.stopped_by_signal || restart >= o.max_restarts) return *end.failure;
    std::cout << "tp-run: restart " << restart + 1 << " of " << o.max_restarts << " (exit status " << *end.failure
              << "): every rank starts again, and the program goes on from its newest checkpoint\n"
              << std::flush;
  }
}
