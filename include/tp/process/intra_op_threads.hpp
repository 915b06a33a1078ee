#pragma once
// How many intra-op threads LibTorch gets when train() starts (TrainOptions::intra_op_threads).
//
// LibTorch's own default is one thread per core as its CPU detection counts them, and on some
// machines it counts too few: Debian's LibTorch, and Python's, pick one thread on a 2-core AMD
// EPYC, where the example's CNN steps in 17.2 ms with one thread and 10.0 ms with two. So tp
// chooses, unless told otherwise: the physical cores this process may run on (its CPU affinity,
// SMT siblings counted once: a second hardware thread of a busy core adds little to BLAS
// kernels and fights the first), shared among the processes of a run on this machine, so that
// `tp-run -n 4` on 8 cores gives each rank 2 threads rather than 8. OMP_NUM_THREADS, when set,
// wins (LibTorch reads it), as does the option.
#include <string>

#include <tp/compiled_part.hpp>

namespace tp::detail {

// The physical cores in this thread's CPU affinity: (package, core) pairs from sysfs; each CPU
// counted as its own core where sysfs does not say. At least 1.
TP_DECL int physical_cores_available();

// How many processes of this run share the machine: the launcher's local size (torchrun and
// tp-run: LOCAL_WORLD_SIZE; Open MPI: OMPI_COMM_WORLD_LOCAL_SIZE), or else, in a launched run
// that does not say, its whole size (fewer threads rather than oversubscribed cores).
TP_DECL int processes_on_this_machine();

struct intra_op_threads_choice {
  int threads = 0;     // what to set; 0: leave LibTorch's setting as it is
  std::string reason;  // for the run-environment line
};

// option: TrainOptions::intra_op_threads (> 0: that many; 0: tp's default; -1: leave it).
TP_DECL intra_op_threads_choice choose_intra_op_threads(int option, const char* omp_num_threads, int physical_cores, int processes);

// The affinity and sysfs are read only when they decide (tp's default): train() asks at every
// start, and a program that sets its threads itself should not pay for the reads.
TP_DECL intra_op_threads_choice choose_intra_op_threads(int option);

}  // namespace tp::detail

#if TP_DEFINE_COMPILED_PART
#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <set>
#include <utility>

namespace tp::detail {

TP_DECL int physical_cores_available() {
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  if (sched_getaffinity(0, sizeof(cpus), &cpus) != 0) return 1;
  std::set<std::pair<long, long>> cores;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &cpus)) continue;
    const std::string topology = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    long package = -1, core = -1;
    std::ifstream(topology + "physical_package_id") >> package;
    std::ifstream(topology + "core_id") >> core;
    if (package < 0 || core < 0) cores.emplace(-1, cpu);
    else cores.emplace(package, core);
  }
  return cores.empty() ? 1 : static_cast<int>(cores.size());
}

TP_DECL int processes_on_this_machine() {
  for (const char* name : {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS"})
    if (const char* value = std::getenv(name)) {
      char* end = nullptr;
      const long n = std::strtol(value, &end, 10);
      if (end != value && *end == '\0' && n >= 1) return static_cast<int>(n);
    }
  return 1;
}

TP_DECL intra_op_threads_choice choose_intra_op_threads(int option, const char* omp_num_threads, int physical_cores, int processes) {
  if (option > 0) return {option, "TrainOptions::intra_op_threads"};
  if (option < 0) return {0, "LibTorch's, as the program left it"};
  if (omp_num_threads && *omp_num_threads) return {0, std::string("OMP_NUM_THREADS=") + omp_num_threads};
  const int share = std::max(1, physical_cores / std::max(1, processes));
  std::string reason = "tp's default: the " + std::to_string(physical_cores) + " physical core(s) this process may run on";
  if (processes > 1) reason += ", shared by " + std::to_string(processes) + " processes";
  return {share, reason};
}

TP_DECL intra_op_threads_choice choose_intra_op_threads(int option) {
  const char* omp_num_threads = std::getenv("OMP_NUM_THREADS");
  if (option != 0 || (omp_num_threads && *omp_num_threads)) return choose_intra_op_threads(option, omp_num_threads, 1, 1);
  return choose_intra_op_threads(option, omp_num_threads, physical_cores_available(), processes_on_this_machine());
}

}  // namespace tp::detail
#endif
