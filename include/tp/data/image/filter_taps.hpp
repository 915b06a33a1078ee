#pragma once
// The taps of resample.hpp's bilinear filter along one axis: for each output pixel, the first
// source pixel it reads and its weights (PIL's ImagingResample: a triangle filter, stretched by
// the shrinking factor when shrinking, sampling positions at pixel centres), then equalized to one
// count for all pixels so that the pixel loops have fixed trip counts (enlarging_taps: both at
// once, for an enlarged box). axis_taps keeps those of small outputs for reuse.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <unordered_map>
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

// bilinear_taps then equalize_taps where the box is enlarged (length <= out), in a tenth of the
// time (they were 8% of a 256 x 256 file's random resized crop): the triangle then spans one
// source pixel either side of an output's centre, so its taps are the two pixels around the
// centre, k and k + 1, weighted 1 - f and f, already normalized. At an edge, where the centre
// lies outside the pixel centres, the edge pixel takes it all (bilinear_taps renormalizes its
// one tap to 1), and the taps stay two, moved inward as equalize_taps moves them. The weights
// are those of bilinear_taps but for a rounding (its total is not always exactly 1); where
// every output falls on a pixel centre (bilinear_taps: one tap each), the second has weight 0.
inline void enlarging_taps(double start, double length, std::int64_t in, std::int64_t out, bool reverse, filter_taps& t) {
  const double scale = length / double(out);
  const std::int64_t taps = in > 1 ? 2 : 1;
  t.stride = taps;
  t.first.resize(out);
  t.count.assign(out, static_cast<std::int32_t>(taps));
  t.weights.resize(out * taps);
  t.lo = in;
  t.hi = 0;
  for (std::int64_t o = 0; o < out; ++o) {
    const double centre = start + (double(o) + 0.5) * scale - 0.5;  // in pixel indices: pixel i is at i
    std::int64_t k = static_cast<std::int64_t>(centre);  // rounded down (std::floor is a call without SSE4.1):
    if (double(k) > centre) --k;                           // truncation rounds negatives up
    float right = static_cast<float>(centre - double(k));  // the weight of pixel k + 1
    if (k < 0) k = 0, right = 0.0f;
    if (k > in - taps) k = in - taps, right = 1.0f;  // the last pixel (taps 1: the only one)
    const std::int64_t slot = reverse ? out - 1 - o : o;
    t.first[slot] = static_cast<std::int32_t>(k);
    if (taps == 2) t.weights[slot * 2] = 1.0f - right, t.weights[slot * 2 + 1] = right;
    else t.weights[slot] = 1.0f;
    t.lo = std::min(t.lo, k);
    t.hi = std::max(t.hi, k + taps);
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

// The equalized taps of axis `axis` (0: x, 1: y; each has its own store, so that the two of one
// image stay valid together). An enlarged box's are computed into `scratch` by enlarging_taps,
// which costs less than looking them up. A shrunk box's, for outputs of up to 64 pixels, are kept
// per thread and reused: the crop boxes of a small image recur (a 28-pixel axis has a few
// hundred), and bilinear_taps and equalize_taps took a tenth of a 28 x 28 transform; a store
// holds up to 4 MiB of taps and starts again when full. A larger output's boxes rarely recur.
inline const filter_taps& axis_taps(int axis, double start, double length, std::int64_t in, std::int64_t out, bool reverse, filter_taps& scratch) {
  constexpr std::int64_t largest_kept = 64;
  constexpr std::size_t budget = std::size_t(1) << 20;  // values (4 bytes each) a store holds
  if (length <= double(out)) {
    enlarging_taps(start, length, in, out, reverse, scratch);
    return scratch;
  }
  if (out > largest_kept) {
    bilinear_taps(start, length, in, out, reverse, scratch);
    equalize_taps(scratch, in);
    return scratch;
  }
  struct key {
    double start, length;
    std::int64_t in, out;
    bool reverse;
    bool operator==(const key&) const = default;
  };
  struct key_hash {
    std::size_t operator()(const key& k) const noexcept {
      std::size_t h = std::hash<double>{}(k.start);
      for (std::size_t v : {std::hash<double>{}(k.length), std::size_t(k.in), std::size_t(k.out), std::size_t(k.reverse)})
        h = (h ^ v) * 0x100000001b3ull;
      return h;
    }
  };
  struct store {
    std::unordered_map<key, filter_taps, key_hash> taps;
    std::size_t values = 0;
  };
  thread_local std::array<store, 2> stores;
  auto& s = stores[axis];
  const key k{start, length, in, out, reverse};
  if (const auto it = s.taps.find(k); it != s.taps.end()) return it->second;
  if (s.values > budget) s.taps.clear(), s.values = 0;
  filter_taps& t = s.taps[k];
  bilinear_taps(start, length, in, out, reverse, t);
  equalize_taps(t, in);
  s.values += t.weights.size() + 2 * t.first.size();
  return t;
}

}  // namespace tp::data::detail
