#pragma once
// Where this process stands in a multi-process run, from the environment its launcher set:
//
//   torchrun, tp-run   RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT
//   mpirun (Open MPI)  OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_LOCAL_RANK,
//                      with MASTER_ADDR (and MASTER_PORT) passed along (mpirun -x MASTER_ADDR)
//   SLURM (srun)       SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID; MASTER_ADDR, or else the
//                      node srun ran on (SLURM_LAUNCH_NODE_IPADDR)
//
// The first of these sets that is present is used; MASTER_PORT defaults to 29500. Anything
// missing or malformed is an error that names the variable and what it should hold.
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>

namespace tp {

// This process's place in a multi-process run (rank, world size, local rank) and where the
// rendezvous is, as the launcher's variables say.
struct process_environment {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr = "127.0.0.1";
  std::uint16_t master_port = 29500;
  std::string launcher = "none";  // torchrun, mpirun, slurm, or none (a single process)

  bool is_chief() const noexcept { return rank == 0; }
};

namespace detail {
inline std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (!v) return std::nullopt;
  return std::string(v);
}

inline long env_integer(const char* name, const std::string& text, long min, long max, const char* meaning) {
  errno = 0;
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || v < min || v > max)
    throw std::invalid_argument("tp: the environment variable " + std::string(name) + " is '" + text + "', but it must be " + meaning);
  return v;
}
}  // namespace detail

// Reads the environment; a process started by no launcher is rank 0 of 1.
inline process_environment read_process_environment() {
  using detail::env;
  using detail::env_integer;
  struct names {
    const char *rank, *size, *local, *launcher;
  };
  const names sets[] = {{"RANK", "WORLD_SIZE", "LOCAL_RANK", "torchrun"},
                        {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "mpirun"},
                        {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "slurm"}};
  process_environment pe;
  for (const auto& set : sets) {
    const auto rank = env(set.rank), size = env(set.size);
    if (!rank && !size) continue;
    if (!rank || !size)
      throw std::invalid_argument(std::string("tp: ") + (rank ? set.rank : set.size) + " is set but " + (rank ? set.size : set.rank) +
                                  " is not; a launcher sets both (tp-run, torchrun, mpirun, srun)");
    pe.world_size = static_cast<int>(env_integer(set.size, *size, 1, 1 << 20, "the number of processes (an integer >= 1)"));
    pe.rank = static_cast<int>(env_integer(set.rank, *rank, 0, pe.world_size - 1,
                                           ("this process's rank, an integer from 0 to " + std::to_string(pe.world_size - 1)).c_str()));
    const auto local = env(set.local);
    pe.local_rank = local ? static_cast<int>(env_integer(set.local, *local, 0, pe.world_size - 1, "this process's rank on its machine (>= 0)")) : 0;
    pe.launcher = set.launcher;
    break;
  }
  if (pe.launcher == "none") return pe;
  auto addr = env("MASTER_ADDR");
  if ((!addr || addr->empty()) && pe.launcher == "slurm") addr = env("SLURM_LAUNCH_NODE_IPADDR");
  if (!addr || addr->empty()) {
    if (pe.world_size > 1)
      throw std::invalid_argument("tp: MASTER_ADDR is not set; set it to the host name or address of rank 0's machine (with " +
                                  pe.launcher + ", pass it along: mpirun -x MASTER_ADDR, or export it before srun)");
    addr = "127.0.0.1";
  }
  pe.master_addr = *addr;
  if (const auto port = env("MASTER_PORT"))
    pe.master_port = static_cast<std::uint16_t>(env_integer("MASTER_PORT", *port, 1, 65535, "a TCP port number (1 to 65535)"));
  return pe;
}

}  // namespace tp
