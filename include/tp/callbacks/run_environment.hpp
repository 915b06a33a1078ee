#pragma once
// RunEnvironment: says, when training starts, what the run computes with, since that decides
// its speed more than anything tp does: the CPU and the instructions it has for the precisions
// (AVX2, AVX-512, AVX-512 BF16, AMX), the BLAS LibTorch calls and which kernels it picked, the
// intra-op threads, the tower's precision and memory format, and how malloc keeps freed memory.
//
//   tp: CPU AMD EPYC 9R14 (AVX2 AVX-512 AVX-512-BF16, no AMX); BLAS OpenBLAS 0.3.21 (Haswell
//       kernels, OpenMP); 2 intra-op thread(s) (tp's default: the 2 physical core(s) this
//       process may run on); precision bf16-mixed; memory format channels-last; malloc: freed
//       blocks under 32 MiB kept for reuse, 256 MiB before trimming (tp's default)
//
// It says who chose the threads (tp's default, OMP_NUM_THREADS or the option:
// process/intra_op_threads.hpp), and warns when the reference BLAS is in use (about 20 times
// slower than OpenBLAS), and when bf16-mixed runs on a CPU without bf16 instructions (slower
// than fp32 there).
#include <dlfcn.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <ATen/Context.h>
#include <ATen/Parallel.h>

#include <tp/process/freed_memory.hpp>
#include <tp/process/intra_op_threads.hpp>
#include <tp/precision.hpp>

namespace tp {

// What the CPU can do, as far as tp's precisions care.
struct cpu_features {
  std::string model;
  bool avx2 = false, avx512 = false, avx512_bf16 = false, amx_bf16 = false;

  static cpu_features detect() {
    cpu_features f;
    std::ifstream info("/proc/cpuinfo");
    for (std::string line; std::getline(info, line);)
      if (line.starts_with("model name")) {
        f.model = line.substr(line.find(':') + 2);
        break;
      }
#if defined(__x86_64__) || defined(__i386__)
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
      f.avx2 = b & (1u << 5);
      f.avx512 = b & (1u << 16);
      f.amx_bf16 = d & (1u << 22);
    }
    if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) f.avx512_bf16 = a & (1u << 5);
#endif
    return f;
  }
  // Whether bf16 arithmetic runs on instructions made for it.
  bool has_bf16() const noexcept { return avx512_bf16 || amx_bf16; }
};

namespace detail {
// OpenBLAS's own description of itself ("OpenBLAS 0.3.21 DYNAMIC_ARCH ... Haswell ..."), its
// kernels and its threading, found among the loaded libraries; empty if it is not OpenBLAS.
inline std::string describe_blas() {
  using text_fn = char* (*)();
  using int_fn = int (*)();
  const auto config = reinterpret_cast<text_fn>(::dlsym(RTLD_DEFAULT, "openblas_get_config"));
  const auto core = reinterpret_cast<text_fn>(::dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  const auto parallel = reinterpret_cast<int_fn>(::dlsym(RTLD_DEFAULT, "openblas_get_parallel"));
  if (!config || !core) return "";
  std::string version = config();
  if (const auto end = version.find(' ', version.find(' ') + 1); end != std::string::npos) version.resize(end);
  const int threading = parallel ? parallel() : -1;
  return version + " (" + core() + " kernels" + (threading == 2 ? ", OpenMP" : threading == 1 ? ", pthreads" : "") + ")";
}
}  // namespace detail

class RunEnvironment {
 public:
  static constexpr bool chief_only = true;

  RunEnvironment() = default;
  explicit RunEnvironment(std::ostream& out) : out_(&out) {}

  template <class Trainer>
  void before_train(Trainer& trainer) {
    const auto cpu = cpu_features::detect();
    const auto [precision, channels_last] = compute_format_of(trainer.tower());
    std::vector<std::string> isa;
    if (cpu.avx2) isa.push_back("AVX2");
    if (cpu.avx512) isa.push_back("AVX-512");
    if (cpu.avx512_bf16) isa.push_back("AVX-512-BF16");
    if (cpu.amx_bf16) isa.push_back("AMX-BF16");
    std::ostringstream line;
    line << "tp: CPU " << (cpu.model.empty() ? "(unknown)" : cpu.model) << " (";
    for (const auto& i : isa) line << i << " ";
    line << (cpu.has_bf16() ? "bf16 in hardware" : "no bf16 instructions") << ")";
    // Debian's LibTorch calls the system BLAS (OpenBLAS once set up); PyTorch's own builds link MKL.
    const auto blas = at::hasMKL() ? std::string("MKL (in LibTorch)") : detail::describe_blas();
    line << "; BLAS " << (blas.empty() ? "neither OpenBLAS nor MKL" : blas) << "; " << at::get_num_threads() << " intra-op thread(s) ("
         << detail::choose_intra_op_threads(trainer.options().intra_op_threads()).reason << "); precision "
         << precision_name(precision) << "; memory format " << (channels_last ? "channels-last" : "contiguous") << "; malloc: "
         << detail::choose_freed_memory(trainer.options().keep_freed_memory()).reason << "\n";
    if (blas.empty())
      line << "tp: warning: LibTorch calls neither OpenBLAS nor MKL; the reference BLAS is about 20 times slower (on "
              "Debian, install libopenblas0-openmp)\n";
    if (precision == tp::precision::bf16_mixed && !cpu.has_bf16())
      line << "tp: warning: bf16-mixed on a CPU without bf16 instructions is slower than fp32\n";
    *out_ << line.str() << std::flush;
  }

 private:
  std::ostream* out_ = &std::cout;
};

}  // namespace tp
