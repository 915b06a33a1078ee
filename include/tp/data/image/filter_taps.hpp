#pragma once
// The taps of resample.hpp's bilinear filter along one axis: for each output pixel, the first
// source pixel it reads and its weights (PIL's ImagingResample: a triangle filter, stretched by
// the shrinking factor when shrinking, sampling positions at pixel centres), then equalized to one
// count for all pixels so that the pixel loops have fixed trip counts.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace tp::data::detail {

// Along one axis: for each output pixel, the first source pixel and its weights.
struct filter_taps {
  std::vector<std::int32_t> first, count;
  std::vector<float> weights;  // `stride` per output pixel
  std::int64_t stride = 0;
  std::int64_t lo = 0, hi = 0;  // the source pixels any output pixel reads: [lo, hi)
};

// Output pixel o in [0, out) samples the box [start, start + length) of an axis of `in` pixels;
// `reverse` mirrors the output (output o takes the taps of out - 1 - o).
inline void bilinear_taps(double start, double length, std::int64_t in, std::int64_t out, bool reverse, filter_taps& t) {
  const double scale = length / double(out);
  const double filter_scale = std::max(scale, 1.0), support = filter_scale;
  t.stride = static_cast<std::int64_t>(std::ceil(support)) * 2 + 1;
  t.first.assign(out, 0);
  t.count.assign(out, 0);
  t.weights.assign(out * t.stride, 0.0f);
  t.lo = in;
  t.hi = 0;
  thread_local std::vector<double> w;
  w.resize(t.stride + 1);
  for (std::int64_t o = 0; o < out; ++o) {
    const double centre = start + (double(o) + 0.5) * scale;
    std::int64_t lo = std::max<std::int64_t>(static_cast<std::int64_t>(centre - support + 0.5), 0);
    std::int64_t hi = std::min<std::int64_t>(static_cast<std::int64_t>(centre + support + 0.5), in);
    hi = std::min(hi, lo + t.stride);  // rounding can reach one more; its weight is 0
    double total = 0;
    for (std::int64_t i = lo; i < hi; ++i) {
      const double x = std::abs((double(i) - centre + 0.5) / filter_scale);
      total += (w[i - lo] = x < 1 ? 1 - x : 0);
    }
    // Zero weights at either end (a pixel centre exactly one support away) are not taps.
    while (hi > lo + 1 && w[hi - 1 - lo] == 0) --hi;
    std::int64_t skip = 0;
    while (lo + skip + 1 < hi && w[skip] == 0) ++skip;
    if (total <= 0) {  // cannot happen for a box inside the image; nearest pixel then
      hi = lo + 1;
      w[0] = total = 1;
    }
    const std::int64_t slot = reverse ? out - 1 - o : o;
    t.first[slot] = static_cast<std::int32_t>(lo + skip);
    t.count[slot] = static_cast<std::int32_t>(hi - lo - skip);
    for (std::int64_t k = skip; k < hi - lo; ++k) t.weights[slot * t.stride + k - skip] = static_cast<float>(w[k] / total);
    t.lo = std::min(t.lo, lo + skip);
    t.hi = std::max(t.hi, hi);
  }
}

// Every output pixel gets the same number of taps (zero weights fill short ones, moved inward
// at the image's edges), so that the loops below have fixed trip counts the compiler unrolls.
inline void equalize_taps(filter_taps& t, std::int64_t in) {
  std::int32_t taps = 1;
  for (auto n : t.count) taps = std::max(taps, n);
  thread_local std::vector<float> weights;
  weights.assign(t.first.size() * taps, 0.0f);
  for (std::size_t o = 0; o < t.first.size(); ++o) {
    const std::int32_t shift = std::max<std::int32_t>(0, t.first[o] + taps - std::int32_t(in));
    for (std::int32_t k = 0; k < t.count[o]; ++k) weights[o * taps + k + shift] = t.weights[o * t.stride + k];
    t.first[o] -= shift;
    t.count[o] = taps;
    t.lo = std::min<std::int64_t>(t.lo, t.first[o]);
    t.hi = std::max<std::int64_t>(t.hi, t.first[o] + taps);
  }
  t.weights.swap(weights);
  t.stride = taps;
}

}  // namespace tp::data::detail
