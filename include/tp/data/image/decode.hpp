#pragma once
// Decoding of one image file: JPEG through libjpeg-turbo's TurboJPEG API, PNG through libpng,
// told apart by their first bytes, into a uint8 tensor [C, H, W] with C = 1 (color::grey) or 3
// (color::rgb).
//
//   auto bytes = tp::data::read_file(path);                        // bad_file if missing or empty
//   auto header = tp::data::read_header(bytes, path);             // size without decoding
//   auto image = tp::data::decode(bytes, path, tp::data::color::rgb);
//   auto small = tp::data::decode(bytes, path, color::rgb, {{64, 64}});   // >= 64 x 64
//
// - Pixels are those Python's PIL gives for Image.open(f).convert("RGB") / .convert("L"): the
//   same libjpeg-turbo with its defaults (accurate integer DCT, smooth chroma upsampling), and
//   PIL's integer formula for colour to grey (L = (19595 R + 38470 G + 7471 B + 2^15) >> 16)
//   for PNGs. A colour JPEG decoded as grey is its luma plane (what PIL gives after
//   im.draft("L", im.size)); it can differ by a step or two from .convert("L").
// - PNG: palettes are expanded, alpha and tRNS are dropped (as PIL's convert does, without
//   compositing), 16-bit samples keep their high byte, gamma chunks are ignored (PIL ignores
//   them too). CMYK JPEGs are refused: PIL's inverted-CMYK conversion is not reproduced.
// - at_least = {h, w}: a JPEG is decoded at the smallest of libjpeg-turbo's scaling factors (k/8,
//   k = 1..8) whose output is still at least h x w; the IDCT then does the shrinking, several
//   times faster than decoding at full size. PNGs ignore it.
// - Thread-safe: each thread keeps its own TurboJPEG handle; libpng state lives per call.
// - Every failure is a bad_file naming the path: unknown format, truncated or corrupt data,
//   libjpeg-turbo's warnings included (a truncated JPEG "decodes" to a half-grey image with only
//   a warning; that is an error here). libpng's errors longjmp only over libpng's own C frames
//   into small functions that hold no C++ objects.
#include <png.h>
#include <turbojpeg.h>

#include <array>
#include <cerrno>
#include <csetjmp>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <torch/torch.h>

#include <tp/data/image/bad_file.hpp>

namespace tp::data {

enum class color { grey, rgb };

struct image_header {
  std::int64_t height = 0, width = 0;
  std::int64_t channels = 0;  // colour channels in the file: 1 (grey, with or without alpha) or 3
  bool jpeg = false;          // false: PNG
};

// The whole file, read in one go. bad_file if it is missing, unreadable or empty.
inline std::vector<std::uint8_t> read_file(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (!file) throw bad_file(path, std::string("cannot open: ") + std::strerror(errno));
  std::vector<std::uint8_t> bytes;
  std::uint8_t chunk[1 << 16];
  std::size_t n = 0;
  while ((n = std::fread(chunk, 1, sizeof chunk, file)) > 0) bytes.insert(bytes.end(), chunk, chunk + n);
  const bool failed = std::ferror(file) != 0;
  const int error = errno;
  std::fclose(file);
  if (failed) throw bad_file(path, std::string("cannot read: ") + std::strerror(error));
  if (bytes.empty()) throw bad_file(path, "the file is empty");
  return bytes;
}

namespace detail {

inline bool is_jpeg(std::span<const std::uint8_t> b) { return b.size() >= 3 && b[0] == 0xFF && b[1] == 0xD8 && b[2] == 0xFF; }
inline bool is_png(std::span<const std::uint8_t> b) {
  static constexpr std::uint8_t signature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1A, '\n'};
  return b.size() >= 8 && std::memcmp(b.data(), signature, 8) == 0;
}

[[noreturn]] inline void unknown_format(std::span<const std::uint8_t> b, const std::string& path) {
  if (b.empty()) throw bad_file(path, "the file is empty");
  if (b.size() >= 4 && std::memcmp(b.data() + 1, "PNG", 3) == 0)
    throw bad_file(path, "not a PNG: its signature is damaged (a file copied in text mode?)");
  throw bad_file(path, "neither a JPEG nor a PNG (by its first bytes); tp decodes only those two");
}

// One TurboJPEG decompressor per thread, made on first use: a handle is not thread-safe, and
// making one per image would cost more than decoding a small image.
inline tjhandle jpeg_decompressor(const std::string& path) {
  struct owner {
    tjhandle handle = tjInitDecompress();
    ~owner() {
      if (handle) tjDestroy(handle);
    }
  };
  thread_local owner own;
  if (!own.handle) throw bad_file(path, std::string("libjpeg-turbo could not make a decompressor: ") + tjGetErrorStr2(nullptr));
  return own.handle;
}

[[noreturn]] inline void jpeg_failed(tjhandle handle, const std::string& path) {
  const bool warning = tjGetErrorCode(handle) == TJERR_WARNING;
  throw bad_file(path, std::string(warning ? "corrupt or truncated JPEG" : "cannot decode JPEG") + " (libjpeg-turbo: " +
                           tjGetErrorStr2(handle) + ")");
}

struct jpeg_info {
  int width = 0, height = 0, subsamp = 0, colorspace = 0;
};

inline jpeg_info jpeg_header(tjhandle handle, std::span<const std::uint8_t> bytes, const std::string& path) {
  jpeg_info info;
  if (tjDecompressHeader3(handle, bytes.data(), static_cast<unsigned long>(bytes.size()), &info.width, &info.height,
                          &info.subsamp, &info.colorspace) != 0)
    jpeg_failed(handle, path);
  if (info.colorspace == TJCS_CMYK || info.colorspace == TJCS_YCCK)
    throw bad_file(path, "a CMYK JPEG; tp decodes grey and colour (YCbCr or RGB) JPEGs only: convert it to RGB");
  // A stream cut before its frame header reads as tables only: no error, and no size.
  if (info.width < 1 || info.height < 1) throw bad_file(path, "truncated JPEG: it ends before the image's header");
  return info;
}

// The smallest scaling factor <= 1 whose output is at least at_least; 1/1 without one.
inline tjscalingfactor jpeg_scale(const jpeg_info& info, std::optional<std::array<std::int64_t, 2>> at_least) {
  tjscalingfactor best{1, 1};
  if (!at_least) return best;
  int count = 0;
  const tjscalingfactor* factors = tjGetScalingFactors(&count);
  for (int i = 0; factors && i < count; ++i) {
    const auto f = factors[i];
    if (f.num > f.denom || f.num * best.denom >= best.num * f.denom) continue;  // no upscaling; only smaller ones
    if (TJSCALED(info.height, f) >= (*at_least)[0] && TJSCALED(info.width, f) >= (*at_least)[1]) best = f;
  }
  return best;
}

// PNG through libpng's classic API. libpng reports errors by longjmp to the setjmp in the
// function that called it: png_stage_* below hold only pointers and ints, so the jump skips no
// destructor, and they return false with the message in png_source.
struct png_source {
  const std::uint8_t* data;
  std::size_t size, pos;
  char message[256];
};

inline void png_read_bytes(png_structp png, png_bytep out, std::size_t n) {
  auto* src = static_cast<png_source*>(png_get_io_ptr(png));
  if (n > src->size - src->pos) png_error(png, "the file ends early (truncated PNG)");
  std::memcpy(out, src->data + src->pos, n);
  src->pos += n;
}
inline void png_fail(png_structp png, png_const_charp message) {
  auto* src = static_cast<png_source*>(png_get_error_ptr(png));
  std::snprintf(src->message, sizeof src->message, "%s", message);
  png_longjmp(png, 1);
}
inline void png_ignore_warning(png_structp, png_const_charp) {}  // "known incorrect sRGB profile" and the like

inline bool png_stage_header(png_structp png, png_infop info, bool rgb, bool keep_grey, png_uint_32* width, png_uint_32* height,
                             int* channels) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_info(png, info);
  const int type = png_get_color_type(png, info);
  if (png_get_bit_depth(png, info) == 16) png_set_strip_16(png);  // the high byte, as PIL does
  if (type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (type == PNG_COLOR_TYPE_GRAY && png_get_bit_depth(png, info) < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (rgb && !(type & PNG_COLOR_MASK_COLOR) && !keep_grey) png_set_gray_to_rgb(png);
  png_set_strip_alpha(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  *width = png_get_image_width(png, info);
  *height = png_get_image_height(png, info);
  *channels = png_get_channels(png, info);
  return true;
}

inline bool png_stage_rows(png_structp png, png_bytepp rows) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_image(png, rows);
  png_read_end(png, nullptr);  // checks the rest of the file: a cut-off PNG fails here
  return true;
}

struct decoded {
  std::int64_t height = 0, width = 0, channels = 0;
};

inline decoded decode_png(std::span<const std::uint8_t> bytes, const std::string& path, color c, bool keep_grey,
                          std::vector<std::uint8_t>& out) {
  png_source src{bytes.data(), bytes.size(), 0, {}};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, png_fail, png_ignore_warning);
  png_infop info = png ? png_create_info_struct(png) : nullptr;
  if (!info) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    throw bad_file(path, "libpng could not allocate its state");
  }
  png_set_read_fn(png, &src, png_read_bytes);
  png_uint_32 width = 0, height = 0;
  int channels = 0;
  bool ok = png_stage_header(png, info, c == color::rgb, keep_grey, &width, &height, &channels);
  std::vector<png_bytep> rows;
  std::vector<std::uint8_t> rgb_rows;  // colour read for a grey output: converted below
  if (ok) {
    try {
      const std::size_t row = std::size_t(width) * channels;
      auto& target = (channels == 3 && c == color::grey) ? rgb_rows : out;
      target.resize(row * height);
      rows.resize(height);
      for (png_uint_32 y = 0; y < height; ++y) rows[y] = target.data() + row * y;
    } catch (...) {
      png_destroy_read_struct(&png, &info, nullptr);
      throw;
    }
    ok = png_stage_rows(png, rows.data());
  }
  png_destroy_read_struct(&png, &info, nullptr);
  if (!ok) throw bad_file(path, std::string("cannot decode PNG (libpng: ") + src.message + ")");
  if (channels == 3 && c == color::grey) {
    const std::size_t n = std::size_t(width) * height;
    out.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      const std::uint8_t* p = &rgb_rows[3 * i];
      out[i] = static_cast<std::uint8_t>((p[0] * 19595u + p[1] * 38470u + p[2] * 7471u + 0x8000u) >> 16);  // PIL's L24
    }
    channels = 1;
  }
  return {std::int64_t(height), std::int64_t(width), channels};
}

// Decodes into `out` as height x width x channels (interleaved, as both libraries write it).
// keep_grey: a grey file stays one channel even for color::rgb (the caller repeats it, after
// resampling one channel instead of three). `header`: the JPEG's, if the caller read it already.
inline decoded decode_hwc(std::span<const std::uint8_t> bytes, const std::string& path, color c,
                          std::optional<std::array<std::int64_t, 2>> at_least, std::vector<std::uint8_t>& out,
                          bool keep_grey = false, const jpeg_info* header = nullptr) {
  if (is_png(bytes)) return decode_png(bytes, path, c, keep_grey, out);
  if (!is_jpeg(bytes)) unknown_format(bytes, path);
  tjhandle handle = jpeg_decompressor(path);
  const auto info = header ? *header : jpeg_header(handle, bytes, path);
  const auto scale = jpeg_scale(info, at_least);
  const int width = TJSCALED(info.width, scale), height = TJSCALED(info.height, scale);
  const int channels = c == color::rgb && !(keep_grey && info.colorspace == TJCS_GRAY) ? 3 : 1;
  out.resize(std::size_t(width) * height * channels);
  // STOPONWARNING: a corrupt stream stops at once instead of decoding the rest into grey.
  if (tjDecompress2(handle, bytes.data(), static_cast<unsigned long>(bytes.size()), out.data(), width, 0, height,
                    channels == 3 ? TJPF_RGB : TJPF_GRAY, TJFLAG_STOPONWARNING) != 0)
    jpeg_failed(handle, path);
  return {height, width, channels};
}

inline std::uint32_t big_endian32(const std::uint8_t* p) { return std::uint32_t(p[0]) << 24 | p[1] << 16 | p[2] << 8 | p[3]; }

}  // namespace detail

// The size and colour channels, from the header alone.
inline image_header read_header(std::span<const std::uint8_t> bytes, const std::string& path) {
  if (detail::is_png(bytes)) {
    // IHDR must come first: length (4), "IHDR", width, height, bit depth, colour type.
    if (bytes.size() < 33 || std::memcmp(bytes.data() + 12, "IHDR", 4) != 0)
      throw bad_file(path, "not a PNG: no IHDR chunk after the signature (truncated or corrupt)");
    const std::int64_t width = detail::big_endian32(&bytes[16]), height = detail::big_endian32(&bytes[20]);
    if (width == 0 || height == 0) throw bad_file(path, "corrupt PNG: its header says it is empty");
    return {height, width, (bytes[25] & PNG_COLOR_MASK_COLOR) ? 3 : 1, false};
  }
  if (!detail::is_jpeg(bytes)) detail::unknown_format(bytes, path);
  const auto info = detail::jpeg_header(detail::jpeg_decompressor(path), bytes, path);
  return {info.height, info.width, info.colorspace == TJCS_GRAY ? 1 : 3, true};
}

// A uint8 tensor [C, H, W]; see the top of this file.
inline torch::Tensor decode(std::span<const std::uint8_t> bytes, const std::string& path, color c,
                            std::optional<std::array<std::int64_t, 2>> at_least = std::nullopt) {
  if (at_least && ((*at_least)[0] < 0 || (*at_least)[1] < 0))
    throw std::invalid_argument("tp::data::decode: at_least must be >= 0, got " + std::to_string((*at_least)[0]) + " x " +
                                std::to_string((*at_least)[1]));
  thread_local std::vector<std::uint8_t> pixels;
  const auto d = detail::decode_hwc(bytes, path, c, at_least, pixels);
  auto hwc = torch::from_blob(pixels.data(), {d.height, d.width, d.channels}, torch::kUInt8);
  return hwc.permute({2, 0, 1}).contiguous();
}

}  // namespace tp::data
