#pragma once
// use_avx2(): whether the images' AVX2 loops run (resample_rgb8_avx2.hpp, resample_grey_avx2.hpp),
// that is whether this CPU has AVX2, asked once. They give bitwise the images of the SSE2 and
// scalar loops, so a run resumed on a CPU without AVX2 makes the same crops; it is a reference so
// that a test can turn them off and compare.
namespace tp::data::detail {

inline bool& use_avx2() {
#if defined(__x86_64__) || defined(__i386__)
  static bool yes = __builtin_cpu_supports("avx2");
#else
  static bool yes = false;
#endif
  return yes;
}

// Whether the float conversion's AVX-512 loop runs (resample_rgb8_avx2.hpp): only where the AVX2
// loops do, and the CPU has AVX-512 (the same floats, bitwise).
inline bool use_avx512() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool yes = __builtin_cpu_supports("avx512f");
#else
  static const bool yes = false;
#endif
  return yes && use_avx2();
}

}  // namespace tp::data::detail
