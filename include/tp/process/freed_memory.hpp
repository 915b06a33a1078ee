#pragma once
// Freed memory kept for the next step (TrainOptions::keep_freed_memory), set when train() starts.
//
// A CPU step allocates and frees the same large blocks (activations, gradients) every step.
// glibc's malloc serves a block of 128 KiB or more with a fresh mmap, and gives the free top of
// its heap back to the system once more than its trim threshold lies there. It raises both
// thresholds by itself, but only to the largest mapped block freed so far (the trim threshold to
// twice that), so a step that frees more than that at once hands its memory back every time and
// the next step touches it anew: each page is a page fault and is zeroed by the kernel. Measured on
// the GPT example (nanoGPT's CPU configuration, 2 cores): its steps took 92 ms until its first
// evaluation freed a larger block, then 45 ms; 1.2 million page faults in 500 steps, against
// 45 thousand with the settings below, where every step took 45 ms from the first.
//
// So tp sets glibc's thresholds once, as its environment variables would: blocks under 32 MiB
// (glibc's own upper bound for the threshold) come from the heap, and up to 256 MiB freed at its
// top stay mapped for reuse instead of going back to the system. The environment wins: with
// MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_ or a glibc.malloc tunable in GLIBC_TUNABLES set,
// or another malloc than glibc's (jemalloc, tcmalloc), tp changes nothing.
#include <string>

#include <tp/compiled_part.hpp>

namespace tp::detail {

inline constexpr int kept_mmap_threshold = 32 << 20;
inline constexpr int kept_trim_threshold = 256 << 20;

struct freed_memory_choice {
  bool set = false;    // whether tp set malloc's thresholds
  std::string reason;  // for the run-environment line
};

// option: TrainOptions::keep_freed_memory. The environment's variables are read by the caller
// (below) and given here, so that the choice can be tested without changing the process.
TP_DECL freed_memory_choice choose_freed_memory(bool option, const char* mmap_threshold, const char* trim_threshold,
                                                const char* tunables);

// The choice from this process's environment (and the C library it runs on).
TP_DECL freed_memory_choice choose_freed_memory(bool option);

// Applies the choice (at every train()); returns it.
TP_DECL freed_memory_choice keep_freed_memory(bool option);

}  // namespace tp::detail

#if TP_DEFINE_COMPILED_PART
#include <cstdlib>
#include <cstring>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace tp::detail {

TP_DECL freed_memory_choice choose_freed_memory(bool option, const char* mmap_threshold, const char* trim_threshold,
                                                const char* tunables) {
  if (!option) return {false, "malloc's own (TrainOptions::keep_freed_memory is off)"};
  if (mmap_threshold && *mmap_threshold) return {false, std::string("MALLOC_MMAP_THRESHOLD_=") + mmap_threshold};
  if (trim_threshold && *trim_threshold) return {false, std::string("MALLOC_TRIM_THRESHOLD_=") + trim_threshold};
  if (tunables && std::strstr(tunables, "glibc.malloc.")) return {false, "GLIBC_TUNABLES' malloc settings"};
  return {true, "freed blocks under " + std::to_string(kept_mmap_threshold >> 20) + " MiB kept for reuse, " +
                    std::to_string(kept_trim_threshold >> 20) + " MiB before trimming (tp's default)"};
}

TP_DECL freed_memory_choice choose_freed_memory(bool option) {
#if defined(__GLIBC__)
  return choose_freed_memory(option, std::getenv("MALLOC_MMAP_THRESHOLD_"), std::getenv("MALLOC_TRIM_THRESHOLD_"),
                             std::getenv("GLIBC_TUNABLES"));
#else
  (void)option;
  return {false, "malloc's own (not glibc's)"};
#endif
}

TP_DECL freed_memory_choice keep_freed_memory(bool option) {
  auto choice = choose_freed_memory(option);
#if defined(__GLIBC__)
  // mallopt returns 0 where it refuses a value. Where another malloc replaces glibc's (jemalloc,
  // tcmalloc), glibc's settings go unused, which does no harm.
  if (choice.set && (mallopt(M_MMAP_THRESHOLD, kept_mmap_threshold) == 0 || mallopt(M_TRIM_THRESHOLD, kept_trim_threshold) == 0))
    choice = {false, "malloc's own (glibc refused tp's thresholds)"};
#endif
  return choice;
}

}  // namespace tp::detail
#endif
