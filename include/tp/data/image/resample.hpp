#pragma once
// The one pixel loop of the image transforms: bilinear resampling of a box of a source image to
// an output size, with the horizontal flip and a per-channel affine map (Normalize) folded in,
// written straight into a [C, H, W] buffer. A crop, a resize, a flip and a normalization of one
// image cost one pass over the output instead of one LibTorch op (and one tensor) each.
//
// Filter: PIL's bilinear resampling (ImagingResample, filter_taps.hpp): a triangle filter,
// stretched by the shrinking factor when shrinking (antialiasing), sampling positions at pixel
// centres, the box given in fractional source pixels, source pixels outside the box but inside
// the image used by the filter. torchvision's ImageFolder yields PIL images, so this is what its
// RandomResizedCrop and Resize do there; their tensor path without antialias (torchvision 0.14's
// default for tensors) aliases when shrinking and would be cheaper only by the taps it skips.
// Interleaved 8-bit RGB (most images) takes resample_rgb8.hpp's fixed-point path on x86-64;
// the rest is computed here in float, with one rounding at the end. Either result is within one
// step of PIL's uint8 result (PIL rounds after each pass).
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <tp/data/image/filter_taps.hpp>
#include <tp/data/image/resample_grey_avx2.hpp>
#include <tp/data/image/resample_rgb8.hpp>

namespace tp::data::detail {

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

// Source values to floats (bytes 16 at a time on x86-64, as GCC 12 at -O2 leaves the plain loop
// scalar: a third of the resampling's time).
template <class T>
inline void to_floats(const T* s, std::int64_t n, float* out) {
  std::int64_t i = 0;
#if defined(__SSE2__)
  if constexpr (std::is_same_v<T, std::uint8_t>)
    for (; i + 16 <= n; i += 16) bytes_to_floats(s + i, 1.0f, 0.0f, out + i);
#endif
  for (; i < n; ++i) out[i] = float(s[i]);
}

template <class Out>
inline void store(Out* o, const float* v, std::int64_t n, float a, float b, [[maybe_unused]] std::int64_t image_values) {
  if constexpr (std::is_same_v<Out, std::uint8_t>) {
    std::int64_t x = 0;
#if defined(__SSE2__)  // 16 at a time: clamped (NaN to 0), truncated, packed (the compiler's loop took 3 times longer)
    const __m128 half = _mm_set1_ps(0.5f), zero = _mm_setzero_ps(), top = _mm_set1_ps(255.0f);
    for (; x + 16 <= n; x += 16) {
      __m128i ints[4];
      for (int k = 0; k < 4; ++k)
        ints[k] = _mm_cvttps_epi32(_mm_min_ps(_mm_max_ps(_mm_add_ps(_mm_loadu_ps(v + x + 4 * k), half), zero), top));
      const __m128i bytes = _mm_packus_epi16(_mm_packs_epi32(ints[0], ints[1]), _mm_packs_epi32(ints[2], ints[3]));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o + x), bytes);
    }
#endif
    // The rest counted from 0: g++ 12 -O3, given `for (; x < n; ++x)` here and a constant n,
    // warned that the loop might run 2^62 times (-Waggressive-loop-optimizations).
    const std::int64_t rest = n - x;
    for (std::int64_t k = 0; k < rest; ++k)
      o[x + k] = static_cast<std::uint8_t>(static_cast<std::int32_t>(std::min(std::max(v[x + k] + 0.5f, 0.0f), 255.0f)));
  } else {
    std::int64_t x = 0;
#if defined(__SSE2__)
    if (streams_floats(o, image_values)) {  // resample_rgb8.hpp: fenced at the end of resample()
      const __m128 va = _mm_set1_ps(a), vb = _mm_set1_ps(b);
      for (; x + 4 <= n; x += 4) _mm_stream_ps(o + x, _mm_add_ps(_mm_mul_ps(_mm_loadu_ps(v + x), va), vb));
    }
#endif
    for (; x < n; ++x) o[x] = v[x] * a + b;
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
// has no gather). The working set stays a few rows, whatever the image's size; resample_rgb8
// follows the same plan.
template <class T, class Out>
void resample(const pixels<T>& src, double x0, double y0, double box_w, double box_h, std::int64_t out_h,
              std::int64_t out_w, bool flip, const float* scale, const float* offset, std::int64_t out_channels, Out* out) {
  thread_local filter_taps scratch_x, scratch_y;
  thread_local std::vector<float> row, ring, acc;
  const filter_taps& tx = axis_taps(0, x0, box_w, src.width, out_w, flip, scratch_x);
  const filter_taps& ty = axis_taps(1, y0, box_h, src.height, out_h, false, scratch_y);
#if defined(__SSE2__)
  if constexpr (std::is_same_v<T, std::uint8_t>)
    if (src.channels == 3 && out_channels == 3 && src.stride_c == 1 && src.stride_x == 3)
      return resample_rgb8(src.data, src.height, src.width, src.stride_y, tx, ty, out_h, out_w, scale, offset, out);
#endif
  const std::int64_t C = src.channels, n_cols = tx.hi - tx.lo, taps = ty.stride, slot = C * out_w;
  const std::int64_t image_values = out_channels * out_h * out_w;
  row.resize(n_cols * C);
  ring.resize(taps * slot);
  acc.resize(out_w);
  const bool interleaved = src.stride_c == 1 && src.stride_x == C;
#if defined(__SSE2__)
  thread_local grey_windows windows;
  thread_local std::vector<std::uint8_t> padded;  // a row with fewer than windows.reach bytes readable (the image's last)
  const bool grey_avx2 = std::is_same_v<T, std::uint8_t> && C == 1 && interleaved && use_avx2() && plan_grey_windows(tx, out_w, windows);
#endif
  std::int64_t next = 0;  // the first source row not resampled yet
  for (std::int64_t y = 0; y < out_h; ++y) {
    const std::int64_t first = ty.first[y];
    for (std::int64_t r = std::max(next, first); r < first + taps; ++r) {
      const T* s = src.data + r * src.stride_y + tx.lo * src.stride_x;
      float* planes = ring.data() + (r % taps) * slot;
#if defined(__SSE2__)
      if constexpr (std::is_same_v<T, std::uint8_t>)
        if (grey_avx2) {
          if ((src.height - 1 - r) * src.stride_y + src.width - tx.lo < windows.reach) {
            padded.assign(std::size_t(windows.reach), 0);
            std::copy_n(s, n_cols, padded.data());
            s = padded.data();
          }
          horizontal_grey8_windows(s, windows, planes);
          continue;
        }
#endif
      if (interleaved) to_floats(s, n_cols * C, row.data());
      else
        for (std::int64_t x = 0; x < n_cols; ++x)
          for (std::int64_t c = 0; c < C; ++c) row[x * C + c] = float(s[x * src.stride_x + c * src.stride_c]);
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
      if (C == out_channels) {
        store(out + (c * out_h + y) * out_w, v, out_w, scale[c], offset[c], image_values);
      } else if constexpr (std::is_same_v<Out, std::uint8_t>) {  // the same bytes in every channel
        store(out + y * out_w, v, out_w, scale[0], offset[0], image_values);
        for (std::int64_t o = 1; o < out_channels; ++o) std::copy_n(out + y * out_w, out_w, out + (o * out_h + y) * out_w);
      } else {
        for (std::int64_t o = 0; o < out_channels; ++o) store(out + (o * out_h + y) * out_w, v, out_w, scale[o], offset[o], image_values);
      }
    }
  }
#if defined(__SSE2__)
  if constexpr (!std::is_same_v<Out, std::uint8_t>) flush_streamed_floats();
#endif
}

}  // namespace tp::data::detail
