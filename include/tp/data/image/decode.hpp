#pragma once
// Decoding of one image file: JPEG through libjpeg-turbo (its libjpeg API), PNG through libpng,
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
// - at_least = {h, w}: a JPEG is decoded at the smallest of the scales 1/8, 1/4, 1/2 and 1
//   (libjpeg-turbo's with SIMD code: jpeg_scale) whose output is still at least h x w; the IDCT
//   then does the shrinking, several times faster than decoding at full size. PNGs ignore it.
// - The transforms (transforms.hpp) decode only the part of a JPEG their crop reads
//   (jpeg_decode): libjpeg-turbo's jpeg_crop_scanline and jpeg_skip_scanlines, same pixels
//   (the whole width of the rare layouts libjpeg-turbo 2 crops wrongly: crop_keeps_widths).
// - Thread-safe: each thread keeps its own libjpeg reader; libpng state lives per call.
// - Every failure is a bad_file naming the path: unknown format, truncated or corrupt data,
//   libjpeg's warnings included (a truncated JPEG "decodes" to a half-grey image with only a
//   warning; that is an error here). libjpeg's and libpng's errors longjmp only over their own C
//   frames into small functions that hold no C++ objects.
#include <png.h>
// jpeglib.h uses FILE and size_t without including their headers.
#include <cstddef>
#include <cstdio>
#include <jpeglib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <csetjmp>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <torch/torch.h>

#include <tp/data/image/bad_file.hpp>

namespace tp::data {

// The channels a decoded image is given: one (grey) or three (RGB), whatever the file holds.
enum class color { grey, rgb };

// An image file's size and kind, read from its header without decoding its pixels.
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

// JPEG through libjpeg(-turbo)'s own API: one reader per thread, made on first use and reused
// (a reader is not thread-safe, and making one per image would cost more than decoding a small
// image). libjpeg reports errors by calling error_exit, which must not return: it longjmps to
// the setjmp in the jpeg_stage_* function that called libjpeg. Those hold only pointers and
// ints, so the jump skips no destructor, and they return false with the message in the reader.
// A warning (corrupt data libjpeg would decode around, a file that ends early and would decode
// half grey) is an error too.
struct jpeg_reader {
  jpeg_decompress_struct info{};
  jpeg_error_mgr errors{};
  std::jmp_buf jump{};
  char message[JMSG_LENGTH_MAX] = {};
  bool warning = false;
  bool made = false;
  const std::uint8_t* header_of = nullptr;  // the bytes whose header was read last, and not decoded since
  std::size_t header_size = 0;
};

inline void jpeg_fail(j_common_ptr c) {
  auto* r = static_cast<jpeg_reader*>(c->client_data);
  (*c->err->format_message)(c, r->message);
  std::longjmp(r->jump, 1);
}
inline void jpeg_message(j_common_ptr c, int level) {
  if (level >= 0) return;  // trace messages
  static_cast<jpeg_reader*>(c->client_data)->warning = true;
  jpeg_fail(c);
}

inline bool jpeg_stage_make(jpeg_reader* r) {
  r->info.err = jpeg_std_error(&r->errors);
  r->errors.error_exit = jpeg_fail;
  r->errors.emit_message = jpeg_message;
  r->info.client_data = r;
  if (setjmp(r->jump)) return false;
  jpeg_create_decompress(&r->info);
  r->info.client_data = r;  // jpeg_create_decompress zeroes the struct but for err
  return true;
}

inline bool jpeg_stage_header(jpeg_reader* r, const std::uint8_t* data, std::size_t size) {
  r->warning = false;
  r->header_of = nullptr;
  if (setjmp(r->jump)) return false;
  jpeg_abort_decompress(&r->info);  // forgets an image left half-read
  jpeg_mem_src(&r->info, data, static_cast<unsigned long>(size));
  jpeg_read_header(&r->info, TRUE);
  r->header_of = data;
  r->header_size = size;
  return true;
}

// A component's IDCT size, and the smallest: libjpeg 7's API and later split each in two (h and
// v, always equal when decompressing).
#if JPEG_LIB_VERSION >= 70
inline int dct_size(const jpeg_component_info& c) { return c.DCT_h_scaled_size; }
inline int min_dct_size(const jpeg_decompress_struct& info) { return info.min_DCT_h_scaled_size; }
#else
inline int dct_size(const jpeg_component_info& c) { return c.DCT_scaled_size; }
inline int min_dct_size(const jpeg_decompress_struct& info) { return info.min_DCT_scaled_size; }
#endif

// Whether jpeg_crop_scanline may crop. libjpeg-turbo 2.x gives each component of a part the width
// its sampling factors alone imply, which is wrong for a component whose IDCT is scaled above
// the smallest (a scaled decode letting the IDCT do some of its upsampling). That is harmless
// where nothing is left to upsample (4:2:0 at 1/2: the chroma passes through, and the colour
// conversion reads the part's width), but where the smoothing upsampler still has work (luma
// sampled 4x2 or 2x4, decoded at 1/2 or 1/4), it upsamples only the left of the part, and the
// right gets chroma never upsampled (libjpeg-turbo 3.0 fixed it). Such images are decoded at
// full width; also at 1/8, where libjpeg upsamples without smoothing and would crop them right.
inline bool crop_keeps_widths(const jpeg_decompress_struct& info) {
  for (int c = 0; c < info.num_components; ++c) {
    const jpeg_component_info& comp = info.comp_info[c];
    if (!comp.component_needed || dct_size(comp) == min_dct_size(info)) continue;
    if (comp.h_samp_factor * dct_size(comp) != info.max_h_samp_factor * min_dct_size(info) ||
        comp.v_samp_factor * dct_size(comp) != info.max_v_samp_factor * min_dct_size(info))
      return false;
  }
  return true;
}

// Starts decompressing at scale num/8, keeping columns [*left, *left + *width) (libjpeg moves the
// left end down to an iMCU's start, and says where; all columns where crop_keeps_widths says no)
// and skipping the rows above `top`.
inline bool jpeg_stage_start(jpeg_reader* r, bool rgb, int num, unsigned* left, unsigned* width, unsigned top) {
  r->header_of = nullptr;
  if (setjmp(r->jump)) return false;
  r->info.out_color_space = rgb ? JCS_RGB : JCS_GRAYSCALE;
  r->info.scale_num = static_cast<unsigned>(num);
  r->info.scale_denom = 8;
  jpeg_start_decompress(&r->info);
  if ((*left > 0 || *width < r->info.output_width) && crop_keeps_widths(r->info)) jpeg_crop_scanline(&r->info, left, width);
  else *left = 0, *width = r->info.output_width;
  if (top > 0 && jpeg_skip_scanlines(&r->info, top) != top) {
    std::snprintf(r->message, sizeof r->message, "it ends before row %u", top);
    return false;
  }
  return true;
}

// Reads `rows` rows into out, then ends the image: it is checked to its end marker when all of
// it was read, or when `check_rest` (the rows below are then decoded into scratch, unused).
inline bool jpeg_stage_rows(jpeg_reader* r, std::uint8_t* out, std::size_t stride, unsigned rows, bool check_rest,
                            std::uint8_t* scratch) {
  if (setjmp(r->jump)) return false;
  JSAMPROW pointers[16];
  for (unsigned y = 0; y < rows;) {
    const unsigned n = rows - y < 16 ? rows - y : 16;
    for (unsigned i = 0; i < n; ++i) pointers[i] = out + std::size_t(y + i) * stride;
    const unsigned got = jpeg_read_scanlines(&r->info, pointers, n);
    if (got == 0) {  // cannot happen with a memory source (it ends with a fake end marker), but say so
      std::snprintf(r->message, sizeof r->message, "no rows after row %u", r->info.output_scanline);
      return false;
    }
    y += got;
  }
  if (r->info.output_scanline < r->info.output_height && !check_rest) {
    jpeg_abort_decompress(&r->info);
    return true;
  }
  while (r->info.output_scanline < r->info.output_height) {
    JSAMPROW row = scratch;
    jpeg_read_scanlines(&r->info, &row, 1);
  }
  jpeg_finish_decompress(&r->info);
  return true;
}

inline jpeg_reader& this_threads_jpeg_reader(const std::string& path) {
  struct owner {
    jpeg_reader reader;
    owner() { reader.made = jpeg_stage_make(&reader); }
    ~owner() {
      if (reader.made) jpeg_destroy_decompress(&reader.info);
    }
  };
  thread_local owner own;
  if (!own.reader.made) throw bad_file(path, std::string("libjpeg could not make a decompressor: ") + own.reader.message);
  return own.reader;
}

[[noreturn]] inline void jpeg_failed(const jpeg_reader& r, const std::string& path) {
  throw bad_file(path, std::string(r.warning ? "corrupt or truncated JPEG" : "cannot decode JPEG") + " (libjpeg: " + r.message + ")");
}

struct jpeg_info {
  int width = 0, height = 0;
  bool grey = false;  // one component
};

// Reads the header into this thread's reader, which the next decode_hwc of the same bytes
// continues from.
inline jpeg_info jpeg_header(std::span<const std::uint8_t> bytes, const std::string& path) {
  auto& r = this_threads_jpeg_reader(path);
  if (!jpeg_stage_header(&r, bytes.data(), bytes.size())) jpeg_failed(r, path);
  const auto space = r.info.jpeg_color_space;
  if (space == JCS_CMYK || space == JCS_YCCK)
    throw bad_file(path, "a CMYK JPEG; tp decodes grey and colour (YCbCr or RGB) JPEGs only: convert it to RGB");
  if (r.info.image_width < 1 || r.info.image_height < 1) throw bad_file(path, "truncated JPEG: it ends before the image's header");
  return {int(r.info.image_width), int(r.info.image_height), space == JCS_GRAYSCALE};
}

inline std::int64_t jpeg_scaled(std::int64_t size, int num) { return (size * num + 7) / 8; }

// The smallest scale num/8 of 1/8, 2/8 and 4/8 whose output is at least at_least; 8 (full
// size) without one. As PIL's draft: libjpeg-turbo's other scales have no SIMD code, for the
// luma's IDCT (5x5 for 5/8) nor for the chroma's of a 4:2:0 file (scaled twice as much: 10x10,
// which also does its upsampling), and decode slower than the whole image does (512 x 512 files
// cropped to 224 x 224: decoding took longer than a full decode, at 5/8 to 7/8).
inline int jpeg_scale(const jpeg_info& info, std::optional<std::array<std::int64_t, 2>> at_least) {
  if (!at_least) return 8;
  for (int num = 1; num < 8; num *= 2)
    if (jpeg_scaled(info.height, num) >= (*at_least)[0] && jpeg_scaled(info.width, num) >= (*at_least)[1]) return num;
  return 8;
}

// Whether the file ends with JPEG's end-of-image marker (a few bytes of padding allowed): one
// that does not was cut short, which a decode stopping above the last row would not notice.
inline bool jpeg_ends_whole(std::span<const std::uint8_t> bytes) {
  const std::size_t from = bytes.size() > 64 ? bytes.size() - 64 : 0;
  for (std::size_t i = bytes.size(); i-- > from + 1;)
    if (bytes[i - 1] == 0xFF && bytes[i] == 0xD9) return true;
  return false;
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
  std::int64_t top = 0, left = 0;  // where the first pixel is in the image (a JPEG's region)
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

// A part of an image, in pixels: rows [top, bottom), columns [left, right).
struct pixel_region {
  std::int64_t top = 0, left = 0, bottom = 0, right = 0;
};

// Decodes the rows and columns of `region` (in pixels of the image at scale num/8; all of it
// without one) of a JPEG whose header jpeg_header read, into `out` as rows x columns x channels.
// The columns are widened (below, and by libjpeg to an iMCU's start on the left; all of them
// where crop_keeps_widths says so): the result says where its first pixel is. Rows above the
// region are skipped (entropy-decoded only), rows below it are not decoded unless the file
// lacks its end marker, which shows it was cut short. The pixels are those of a whole decode.
inline decoded jpeg_decode(std::span<const std::uint8_t> bytes, const std::string& path, const jpeg_info& info, int num,
                           bool rgb, std::optional<pixel_region> region, std::vector<std::uint8_t>& out) {
  auto& r = this_threads_jpeg_reader(path);
  if (r.header_of != bytes.data() || r.header_size != bytes.size()) jpeg_header(bytes, path);  // another image came between
  const std::int64_t height = jpeg_scaled(info.height, num), width = jpeg_scaled(info.width, num);
  pixel_region want = region.value_or(pixel_region{0, 0, height, width});
  want.top = std::clamp<std::int64_t>(want.top, 0, height - 1);
  want.bottom = std::clamp<std::int64_t>(want.bottom, want.top + 1, height);
  want.left = std::clamp<std::int64_t>(want.left, 0, width - 1);
  want.right = std::clamp<std::int64_t>(want.right, want.left + 1, width);
  // libjpeg's smooth chroma upsampling reads the chroma sample on either side of a pixel's: at a
  // cut inside the image it repeats the edge one instead, so the outermost pixel of a part (the
  // first and the last) can differ from the whole decode's. A margin of max_h_samp_factor pixels
  // (one chroma sample's width, 2 for 4:2:0) on each inner side keeps the region asked for exact;
  // libjpeg then widens the left end to a whole iMCU. One pixel would do for that, but not for a
  // part one pixel wide at the image's edge: its chroma would be one sample wide, and libjpeg
  // then upsamples it without smoothing. (It was one iMCU on each side, 16 pixels: at 256 x 256,
  // a random resized crop decoded 13% more columns than it needed.)
  const std::int64_t margin = r.info.max_h_samp_factor;
  const std::int64_t from = std::max<std::int64_t>(want.left - margin, 0), to = std::min(want.right + margin, width);
  unsigned left = static_cast<unsigned>(from), columns = static_cast<unsigned>(to - from);
  const std::int64_t channels = rgb ? 3 : 1, rows = want.bottom - want.top;
  if (!jpeg_stage_start(&r, rgb, num, &left, &columns, static_cast<unsigned>(want.top))) jpeg_failed(r, path);
  out.resize(std::size_t(columns) * channels * rows);
  thread_local std::vector<std::uint8_t> scratch;
  const bool check_rest = want.bottom < height && !jpeg_ends_whole(bytes);
  if (check_rest) scratch.resize(std::size_t(columns) * channels);
  if (!jpeg_stage_rows(&r, out.data(), std::size_t(columns) * channels, static_cast<unsigned>(rows), check_rest, scratch.data()))
    jpeg_failed(r, path);
  return {rows, std::int64_t(columns), channels, want.top, std::int64_t(left)};
}

// Decodes into `out` as height x width x channels (interleaved, as both libraries write it).
// keep_grey: a grey file stays one channel even for color::rgb (the caller repeats it, after
// resampling one channel instead of three).
inline decoded decode_hwc(std::span<const std::uint8_t> bytes, const std::string& path, color c,
                          std::optional<std::array<std::int64_t, 2>> at_least, std::vector<std::uint8_t>& out,
                          bool keep_grey = false) {
  if (is_png(bytes)) return decode_png(bytes, path, c, keep_grey, out);
  if (!is_jpeg(bytes)) unknown_format(bytes, path);
  const auto info = jpeg_header(bytes, path);
  return jpeg_decode(bytes, path, info, jpeg_scale(info, at_least), c == color::rgb && !(keep_grey && info.grey), std::nullopt, out);
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
  const auto info = detail::jpeg_header(bytes, path);
  return {info.height, info.width, info.grey ? 1 : 3, true};
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
