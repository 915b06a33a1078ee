#pragma once
// What the multi-process tests share: temporary folders, processes started with their output
// as a pipe, ranks of mp_worker started with a launcher's environment, and reading the weight
// files they write. No LibTorch here.
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "../built_paths.hpp"
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <tp/distributed/free_port.hpp>

namespace tp_test {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& name) : path(fs::temp_directory_path() / ("tp_mp_" + name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};


// A started process: its pid and its output (stdout and stderr merged) as a pipe.
struct Process {
  pid_t pid = -1;
  int out = -1;
  std::string output;
  int status = 0;

  // Reads until the process closes its output (or `until` appears), then reaps it if closed.
  bool read_until(const std::string& until = "") {
    char buffer[4096];
    for (;;) {
      if (!until.empty() && output.find(until) != std::string::npos) return true;
      const auto n = ::read(out, buffer, sizeof buffer);
      if (n <= 0) break;
      output.append(buffer, static_cast<std::size_t>(n));
    }
    ::close(out);
    out = -1;
    ::waitpid(pid, &status, 0);
    return until.empty();
  }
  void finish() {
    if (out >= 0) read_until();
  }
  bool succeeded() const { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }
};

// own_group: the process leads a process group of its own, as a shell's foreground job does.
inline Process start(const std::vector<std::string>& args, const std::map<std::string, std::string>& env, bool own_group = false) {
  int fds[2];
  if (::pipe(fds) != 0) throw std::runtime_error("pipe failed");
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (own_group) ::setpgid(0, 0);
    ::dup2(fds[1], STDOUT_FILENO);
    ::dup2(fds[1], STDERR_FILENO);
    ::close(fds[0]);
    ::close(fds[1]);
    for (int s : {SIGINT, SIGTERM, SIGUSR1}) ::signal(s, SIG_DFL);  // as a user's shell would leave them
    for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"}) ::unsetenv(name);
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  return {pid, fds[0], {}, 0};
}

inline std::vector<std::string> worker(const std::vector<std::string>& flags) {
  std::vector<std::string> args{TP_MP_WORKER};
  args.insert(args.end(), flags.begin(), flags.end());
  return args;
}

// Starts `world` ranks of mp_worker with torchrun's environment.
inline std::vector<Process> start_ranks(int world, const std::vector<std::string>& flags, int port) {
  std::vector<Process> ranks;
  for (int r = 0; r < world; ++r)
    ranks.push_back(start(worker(flags), {{"RANK", std::to_string(r)},
                                          {"WORLD_SIZE", std::to_string(world)},
                                          {"LOCAL_RANK", std::to_string(r)},
                                          {"MASTER_ADDR", "127.0.0.1"},
                                          {"MASTER_PORT", std::to_string(port)}}));
  return ranks;
}

inline std::vector<float> floats(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<float> v((std::istreambuf_iterator<char>(in)), {});
  std::vector<float> out(v.size() / sizeof(float));
  std::ifstream again(path, std::ios::binary);
  again.read(reinterpret_cast<char*>(out.data()), static_cast<std::streamsize>(out.size() * sizeof(float)));
  return out;
}

inline std::string bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline auto resume_flags(const fs::path& dir, std::vector<std::string> common) {
  return [=](const std::string& logdir, const std::string& out) {
    auto f = common;
    f.insert(f.end(), {"--logdir", (dir / logdir).string(), "--out", (dir / out).string()});
    return f;
  };
}

// Runs two ranks to their end; both must succeed.
inline void run_two_ranks(const std::vector<std::string>& flags) {
  auto ranks = start_ranks(2, flags, tp::free_local_port());
  for (auto& r : ranks) r.finish();
  for (auto& r : ranks) ASSERT_TRUE(r.succeeded()) << r.output;
}

inline long long newest_checkpoint(const fs::path& folder) {
  long long newest = -1;
  for (const auto& e : fs::directory_iterator(folder)) {
    const auto name = e.path().filename().string();
    if (name.starts_with("model-") && name.ends_with(".ckpt")) newest = std::max(newest, std::stoll(name.substr(6, name.size() - 11)));
  }
  return newest;
}

// The step a rank said it was interrupted at (-1: it did not say).
inline long long interrupted_at(const std::string& output) {
  const std::string said = "interrupted at global step ";
  const auto at = output.find(said);
  return at == std::string::npos ? -1 : std::stoll(output.substr(at + said.size()));
}

}  // namespace tp_test
