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

}  // namespace tp::data::detail
