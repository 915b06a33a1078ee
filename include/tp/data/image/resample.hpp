#pragma once
// The one pixel loop of the image transforms: bilinear resampling of a box of a source image to
// an output size, with the horizontal flip and a per-channel affine map (Normalize) folded in,
// written straight into a [C, H, W] buffer. A crop, a resize, a flip and a normalization of one
// image cost one pass over the output instead of one LibTorch op (and one tensor) each.
//
// Filter: PIL's bilinear resampling (ImagingResample): a triangle filter, stretched by the
// shrinking factor when shrinking (antialiasing), sampling positions at pixel centres, the box
// given in fractional source pixels, source pixels outside the box but inside the image used by
// the filter. torchvision's ImageFolder yields PIL images, so this is what its RandomResizedCrop
// and Resize do there; their tensor path without antialias (torchvision 0.14's default for
// tensors) aliases when shrinking and would be cheaper only by the taps it skips. Computing in
// float, with one rounding at the end, the result is within one step of PIL's uint8 result
// (PIL rounds after each pass).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

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

// A source image: element (y, x, c) at data[y * stride_y + x * stride_x + c * stride_c].
template <class T>
struct pixels {
  const T* data;
  std::int64_t height, width, channels;
  std::int64_t stride_y, stride_x, stride_c;
};

// Horizontal pass over one source row, already in floats and interleaved (x * C + c, from
// column tx.lo): planes[c][x] for each channel c.
template <int C, int K>
void horizontal(const float* row, const filter_taps& tx, std::int64_t channels, std::int64_t out_w, float* planes, std::int64_t plane) {
  const std::int64_t ch = C > 0 ? C : channels;
  for (std::int64_t x = 0; x < out_w; ++x) {
    const float* p = row + (tx.first[x] - tx.lo) * ch;
    const float* w = &tx.weights[x * K];
    for (std::int64_t c = 0; c < ch; ++c) {
      float v = 0;
      for (int k = 0; k < K; ++k) v += w[k] * p[k * ch + c];
      planes[c * plane + x] = v;
    }
  }
}

template <int C>
void horizontal_taps(const float* row, const filter_taps& tx, std::int64_t channels, std::int64_t out_w, float* planes, std::int64_t plane) {
  switch (tx.stride) {
    case 1: return horizontal<C, 1>(row, tx, channels, out_w, planes, plane);
    case 2: return horizontal<C, 2>(row, tx, channels, out_w, planes, plane);
    case 3: return horizontal<C, 3>(row, tx, channels, out_w, planes, plane);
    case 4: return horizontal<C, 4>(row, tx, channels, out_w, planes, plane);
  }
  const std::int64_t ch = C > 0 ? C : channels, taps = tx.stride;
  for (std::int64_t x = 0; x < out_w; ++x)
    for (std::int64_t c = 0; c < ch; ++c) {
      float v = 0;
      for (std::int64_t k = 0; k < taps; ++k) v += tx.weights[x * taps + k] * row[(tx.first[x] - tx.lo + k) * ch + c];
      planes[c * plane + x] = v;
    }
}

template <class Out>
inline void store(Out* o, const float* v, std::int64_t n, float a, float b) {
  if constexpr (std::is_same_v<Out, std::uint8_t>) {
    // Through int32, which the compiler vectorizes (a direct float to uint8 conversion it does not).
    for (std::int64_t x = 0; x < n; ++x) o[x] = static_cast<std::uint8_t>(static_cast<std::int32_t>(std::min(std::max(v[x] + 0.5f, 0.0f), 255.0f)));
  } else {
    for (std::int64_t x = 0; x < n; ++x) o[x] = v[x] * a + b;
  }
}

// The path for interleaved RGB sources and outputs (most images): a pixel's three channels in
// one 4-lane vector (GCC's vector extensions: g++ and clang++, any target), so that a tap is one
// vector multiply-add for the three channels instead of three scalar ones; the fourth lane is
// carried and dropped. Four output pixels are transposed to three planes for the store.
using pixel_lanes = float __attribute__((vector_size(16)));

inline pixel_lanes load_pixel(const float* p) {
  pixel_lanes v;
  std::memcpy(&v, p, sizeof v);  // an unaligned load: R G B and the next pixel's R
  return v;
}

// The horizontal taps once more, for the vector loop: each weight in all four lanes (SSE2 has no
// broadcast from memory) and each first pixel as its offset in floats.
struct pixel_taps {
  std::vector<pixel_lanes> weights;
  std::vector<std::int32_t> offset;
};

inline void spread_taps(const filter_taps& tx, pixel_taps& p) {
  p.weights.resize(tx.weights.size());
  p.offset.resize(tx.first.size());
  for (std::size_t i = 0; i < tx.weights.size(); ++i) p.weights[i] = pixel_lanes{} + tx.weights[i];
  for (std::size_t x = 0; x < tx.first.size(); ++x) p.offset[x] = static_cast<std::int32_t>((tx.first[x] - tx.lo) * 3);
}

template <int K>
void horizontal_pixels(const float* row, const pixel_taps& t, std::int64_t out_w, pixel_lanes* out) {
  for (std::int64_t x = 0; x < out_w; ++x) {
    const float* p = row + t.offset[x];
    const pixel_lanes* w = &t.weights[x * K];
    pixel_lanes v = load_pixel(p) * w[0];
    for (int k = 1; k < K; ++k) v += load_pixel(p + 3 * k) * w[k];
    out[x] = v;
  }
}

inline void horizontal_pixels_taps(const float* row, const pixel_taps& t, std::int64_t taps, std::int64_t out_w, pixel_lanes* out) {
  switch (taps) {
    case 1: return horizontal_pixels<1>(row, t, out_w, out);
    case 2: return horizontal_pixels<2>(row, t, out_w, out);
    case 3: return horizontal_pixels<3>(row, t, out_w, out);
    case 4: return horizontal_pixels<4>(row, t, out_w, out);
    case 5: return horizontal_pixels<5>(row, t, out_w, out);
  }
  for (std::int64_t x = 0; x < out_w; ++x) {
    const float* p = row + t.offset[x];
    pixel_lanes v = load_pixel(p) * t.weights[x * taps];
    for (std::int64_t k = 1; k < taps; ++k) v += load_pixel(p + 3 * k) * t.weights[x * taps + k];
    out[x] = v;
  }
}

template <class Out>
inline void store_lanes(Out* o, pixel_lanes v, float a, float b) {
  if constexpr (std::is_same_v<Out, std::uint8_t>) {
    v += 0.5f;
#if defined(__SSE2__)  // truncation, then packing with saturation to [0, 255]: no clamps needed
    const __m128i ints = _mm_cvttps_epi32(v), words = _mm_packs_epi32(ints, ints);
    const std::int32_t bytes = _mm_cvtsi128_si32(_mm_packus_epi16(words, words));
    std::memcpy(o, &bytes, sizeof bytes);
#else
    for (int k = 0; k < 4; ++k) o[k] = static_cast<std::uint8_t>(static_cast<std::int32_t>(std::min(std::max(v[k], 0.0f), 255.0f)));
#endif
  } else {
    v = v * a + b;
    std::memcpy(o, &v, sizeof v);
  }
}

template <class T, class Out>
void resample_pixels(const pixels<T>& src, const filter_taps& tx, const filter_taps& ty, std::int64_t out_h, std::int64_t out_w,
                     const float* scale, const float* offset, Out* out) {
  thread_local std::vector<float> row;
  thread_local std::vector<pixel_lanes> ring;
  thread_local pixel_taps spread;
  thread_local std::vector<const pixel_lanes*> in;  // the ring's rows, in the order of the vertical taps
  spread_taps(tx, spread);
  in.resize(ty.stride);
  const std::int64_t n_values = (tx.hi - tx.lo) * 3, taps = ty.stride, plane = out_h * out_w;
  row.resize(n_values + 1);  // + 1: the last pixel's load reads one float beyond it
  ring.resize(taps * out_w);
  std::int64_t next = 0;
  for (std::int64_t y = 0; y < out_h; ++y) {
    const std::int64_t first = ty.first[y];
    for (std::int64_t r = std::max(next, first); r < first + taps; ++r) {
      const T* s = src.data + r * src.stride_y + tx.lo * 3;
      for (std::int64_t i = 0; i < n_values; ++i) row[i] = float(s[i]);  // vectorized
      horizontal_pixels_taps(row.data(), spread, tx.stride, out_w, ring.data() + (r % taps) * out_w);
    }
    next = first + taps;
    const float* w = &ty.weights[y * taps];
    for (std::int64_t k = 0; k < taps; ++k) in[k] = ring.data() + ((first + k) % taps) * out_w;
    const auto vertical = [&](std::int64_t x) {
      pixel_lanes v = in[0][x] * w[0];
      for (std::int64_t k = 1; k < taps; ++k) v += in[k][x] * w[k];
      return v;
    };
    Out* o = out + y * out_w;
    std::int64_t x = 0;
    for (; x + 4 <= out_w; x += 4) {
      const pixel_lanes p0 = vertical(x), p1 = vertical(x + 1), p2 = vertical(x + 2), p3 = vertical(x + 3);
      const pixel_lanes rg01 = __builtin_shufflevector(p0, p1, 0, 4, 1, 5), rg23 = __builtin_shufflevector(p2, p3, 0, 4, 1, 5);
      const pixel_lanes b01 = __builtin_shufflevector(p0, p1, 2, 6, 3, 7), b23 = __builtin_shufflevector(p2, p3, 2, 6, 3, 7);
      store_lanes(o + x, __builtin_shufflevector(rg01, rg23, 0, 1, 4, 5), scale[0], offset[0]);
      store_lanes(o + plane + x, __builtin_shufflevector(rg01, rg23, 2, 3, 6, 7), scale[1], offset[1]);
      store_lanes(o + 2 * plane + x, __builtin_shufflevector(b01, b23, 0, 1, 4, 5), scale[2], offset[2]);
    }
    for (; x < out_w; ++x) {
      const pixel_lanes p = vertical(x);
      for (int c = 0; c < 3; ++c) {
        const float value = p[c];
        store(o + c * plane + x, &value, 1, scale[c], offset[c]);
      }
    }
  }
}

// out[c][y][x] = scale[c] * bilinear(box of src)(y, x or mirrored x, c) + offset[c] for c <
// out_channels; a uint8 output is rounded and clamped instead (scale and offset unused). A
// one-channel source fills every output channel (a grey file read as RGB: one channel to
// resample instead of three identical ones).
//
// Two passes, an output row at a time: the source rows it needs are resampled horizontally
// (each source row once, into a ring of `taps` rows that stays in L1), then combined vertically
// into the output row, in loops the compiler vectorizes (all but the horizontal taps: SSE2
// has no gather). The working set stays a few rows, whatever the image's size.
template <class T, class Out>
void resample(const pixels<T>& src, double x0, double y0, double box_w, double box_h, std::int64_t out_h,
              std::int64_t out_w, bool flip, const float* scale, const float* offset, std::int64_t out_channels, Out* out) {
  thread_local filter_taps tx, ty;
  thread_local std::vector<float> row, ring, acc;
  bilinear_taps(x0, box_w, src.width, out_w, flip, tx);
  bilinear_taps(y0, box_h, src.height, out_h, false, ty);
  equalize_taps(tx, src.width);
  equalize_taps(ty, src.height);
  if (src.channels == 3 && out_channels == 3 && src.stride_c == 1 && src.stride_x == 3)
    return resample_pixels(src, tx, ty, out_h, out_w, scale, offset, out);
  const std::int64_t C = src.channels, n_cols = tx.hi - tx.lo, taps = ty.stride, slot = C * out_w;
  row.resize(n_cols * C);
  ring.resize(taps * slot);
  acc.resize(out_w);
  const bool interleaved = src.stride_c == 1 && src.stride_x == C;
  std::int64_t next = 0;  // the first source row not resampled yet
  for (std::int64_t y = 0; y < out_h; ++y) {
    const std::int64_t first = ty.first[y];
    for (std::int64_t r = std::max(next, first); r < first + taps; ++r) {
      const T* s = src.data + r * src.stride_y + tx.lo * src.stride_x;
      if (interleaved)  // a plain conversion loop: vectorized
        for (std::int64_t i = 0; i < n_cols * C; ++i) row[i] = float(s[i]);
      else
        for (std::int64_t x = 0; x < n_cols; ++x)
          for (std::int64_t c = 0; c < C; ++c) row[x * C + c] = float(s[x * src.stride_x + c * src.stride_c]);
      float* planes = ring.data() + (r % taps) * slot;
      if (C == 3) horizontal_taps<3>(row.data(), tx, C, out_w, planes, out_w);
      else if (C == 1) horizontal_taps<1>(row.data(), tx, C, out_w, planes, out_w);
      else horizontal_taps<0>(row.data(), tx, C, out_w, planes, out_w);
    }
    next = first + taps;
    const float* w = &ty.weights[y * taps];
    for (std::int64_t c = 0; c < C; ++c) {
      const float* in0 = ring.data() + (first % taps) * slot + c * out_w;
      float* v = acc.data();
      if (taps == 1) {
        for (std::int64_t x = 0; x < out_w; ++x) v[x] = w[0] * in0[x];
      } else if (taps == 2) {
        const float* in1 = ring.data() + ((first + 1) % taps) * slot + c * out_w;
        for (std::int64_t x = 0; x < out_w; ++x) v[x] = w[0] * in0[x] + w[1] * in1[x];
      } else {
        for (std::int64_t x = 0; x < out_w; ++x) v[x] = w[0] * in0[x];
        for (std::int64_t k = 1; k < taps; ++k) {
          const float* in = ring.data() + ((first + k) % taps) * slot + c * out_w;
          for (std::int64_t x = 0; x < out_w; ++x) v[x] += w[k] * in[x];
        }
      }
      if (C == out_channels) store(out + (c * out_h + y) * out_w, v, out_w, scale[c], offset[c]);
      else
        for (std::int64_t o = 0; o < out_channels; ++o) store(out + (o * out_h + y) * out_w, v, out_w, scale[o], offset[o]);
    }
  }
}

}  // namespace tp::data::detail
