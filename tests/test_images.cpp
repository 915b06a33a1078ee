// Image decoding (against Python's PIL, which writes the fixtures and decodes them too) and the
// transforms: torchvision's crop sampling, PIL's bilinear resampling, flips, normalization.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <thread>

#include <tp/data/image/decode.hpp>
#include <tp/data/image/transforms.hpp>

#include "support.hpp"

namespace fs = std::filesystem;
using tp::data::color;

namespace {

// Fixtures written once per process by PIL: RGB and grey images in JPEG and PNG, a palette PNG,
// PNGs with alpha, a larger JPEG and PNG, a CMYK JPEG; and PIL's decodes of them, as raw bytes.
constexpr const char* fixtures_py = R"(
import sys, random
from PIL import Image
d = sys.argv[1]
random.seed(3)
def pattern(w, h):
    im = Image.new('RGB', (w, h))
    im.putdata([((x * 7 + y * 3) % 256, (x * x + y * 5) % 256, random.randrange(256) if (x + y) % 3 == 0 else (x * y) % 256)
                for y in range(h) for x in range(w)])
    return im
rgb = pattern(37, 23)
grey = rgb.convert('L')
rgb.save(d + '/rgb.jpg', quality=90)
grey.save(d + '/grey.jpg', quality=90)
rgb.save(d + '/rgb.png')
grey.save(d + '/grey.png')
rgb.convert('P', palette=Image.ADAPTIVE, colors=50).save(d + '/palette.png')
rgba = rgb.copy(); rgba.putalpha(grey); rgba.save(d + '/rgba.png')
Image.merge('LA', (grey, grey.point(lambda v: 255 - v))).save(d + '/la.png')
pattern(64, 48).resize((64, 48)).save(d + '/big.jpg', quality=95)
pattern(200, 150).save(d + '/large.png')
rgb.convert('CMYK').save(d + '/cmyk.jpg')
smooth = Image.new('RGB', (128, 96))
smooth.putdata([(x * 2, y * 2, (x + y) % 256) for y in range(96) for x in range(128)])
smooth.save(d + '/smooth.jpg', quality=95)
for name in ['rgb.jpg', 'grey.jpg', 'rgb.png', 'grey.png', 'palette.png', 'rgba.png', 'la.png', 'big.jpg']:
    open(d + '/' + name + '.rgb', 'wb').write(Image.open(d + '/' + name).convert('RGB').tobytes())
    im = Image.open(d + '/' + name)
    if name.endswith('.jpg'): im.draft('L', im.size)  # the luma plane, as TurboJPEG's grey output
    open(d + '/' + name + '.l', 'wb').write(im.convert('L').tobytes())
photo = pattern(200, 150)  # larger than a few iMCUs, in every layout libjpeg decodes in parts differently
photo.save(d + '/p420.jpg', quality=90)
photo.save(d + '/p422.jpg', quality=90, subsampling=1)
photo.save(d + '/p444.jpg', quality=90, subsampling=0)
photo.save(d + '/pprog.jpg', quality=90, progressive=True)
photo.convert('L').save(d + '/pgrey.jpg', quality=90)
for name in ['p420.jpg', 'p422.jpg', 'p444.jpg', 'pprog.jpg', 'pgrey.jpg']:
    Image.open(d + '/' + name).save(d + '/' + name + '.png')  # PIL's decode, which is ours, losslessly
im = Image.open(d + '/big.jpg'); im.draft('RGB', (16, 12))
assert im.size == (16, 12), im.size
open(d + '/big.jpg.16x12.rgb', 'wb').write(im.convert('RGB').tobytes())
)";

// PIL's bilinear resize of boxes: lines "file top left height width out_h out_w" in, raw RGB out.
constexpr const char* resize_py = R"(
import sys
from PIL import Image
d = sys.argv[1]
with open(d + '/boxes.txt') as boxes, open(d + '/pil_crops.raw', 'wb') as out:
    for line in boxes:
        name, t, l, h, w, oh, ow = line.split()
        t, l, h, w, oh, ow = map(int, (t, l, h, w, oh, ow))
        im = Image.open(d + '/' + name).convert('RGB')
        out.write(im.resize((ow, oh), Image.BILINEAR, box=(l, t, l + w, t + h)).tobytes())
)";

const fs::path& fixtures() {
  static tp_test::TempDir dir("images");
  static const bool written = [] {
    std::ofstream(dir.path / "fixtures.py") << fixtures_py;
    const auto out = tp_test::run(std::string(TP_PYTHON) + " " + (dir.path / "fixtures.py").string() + " " + dir.path.string());
    return fs::exists(dir.path / "big.jpg.16x12.rgb") || (ADD_FAILURE() << out, false);
  }();
  EXPECT_TRUE(written);
  return dir.path;
}

std::string file(const std::string& name) { return (fixtures() / name).string(); }
std::vector<std::uint8_t> bytes_of(const std::string& name) { return tp::data::read_file(file(name)); }

// A decoded [C, H, W] image as the interleaved bytes PIL's tobytes() gives.
std::vector<std::uint8_t> interleaved(const torch::Tensor& chw) {
  auto hwc = chw.permute({1, 2, 0}).contiguous();
  return {hwc.data_ptr<std::uint8_t>(), hwc.data_ptr<std::uint8_t>() + hwc.numel()};
}

// The message of the bad_file that `f` throws, after checking that it starts with `path`.
template <class F>
std::string bad_file_message(const std::string& path, F&& f) {
  try {
    f();
  } catch (const tp::data::bad_file& e) {
    EXPECT_EQ(e.path(), path);
    EXPECT_EQ(std::string(e.what()).rfind(path + ": ", 0), 0u) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no bad_file for " << path;
  return {};
}


// A double uniform in [lo, hi) from the generator's top 53 bits: the same on every platform
// (std::uniform_real_distribution's results are the library's own).
double uniform_in(std::mt19937_64& random, double lo, double hi) { return lo + (hi - lo) * double(random() >> 11) * 0x1.0p-53; }
}  // namespace

TEST(ImageDecode, EqualsWhatPilDecodes) {
  for (std::string name : {"rgb.jpg", "grey.jpg", "rgb.png", "grey.png", "palette.png", "rgba.png", "la.png", "big.jpg"}) {
    const auto bytes = bytes_of(name);
    const auto rgb = tp::data::decode(bytes, file(name), color::rgb);
    const auto grey = tp::data::decode(bytes, file(name), color::grey);
    EXPECT_EQ(rgb.dtype(), torch::kUInt8);
    EXPECT_EQ(rgb.size(0), 3);
    EXPECT_EQ(grey.size(0), 1);
    EXPECT_EQ(interleaved(rgb), bytes_of(name + ".rgb")) << name;
    EXPECT_EQ(interleaved(grey), bytes_of(name + ".l")) << name;
  }
}

TEST(ImageDecode, ReadsHeadersWithoutDecoding) {
  const auto rgb = tp::data::read_header(bytes_of("rgb.jpg"), "rgb.jpg");
  EXPECT_EQ(std::vector<std::int64_t>({rgb.height, rgb.width, rgb.channels}), std::vector<std::int64_t>({23, 37, 3}));
  EXPECT_TRUE(rgb.jpeg);
  const auto grey = tp::data::read_header(bytes_of("grey.png"), "grey.png");
  EXPECT_EQ(std::vector<std::int64_t>({grey.height, grey.width, grey.channels}), std::vector<std::int64_t>({23, 37, 1}));
  EXPECT_FALSE(grey.jpeg);
  EXPECT_EQ(tp::data::read_header(bytes_of("palette.png"), "p").channels, 3);
  EXPECT_EQ(tp::data::read_header(bytes_of("la.png"), "la").channels, 1);
}

TEST(ImageDecode, ScaledDecodeIsLibjpegsAndPilsDraft) {
  const auto bytes = bytes_of("big.jpg");  // 64 x 48
  const auto quarter = tp::data::decode(bytes, "big.jpg", color::rgb, {{12, 16}});
  EXPECT_EQ(quarter.sizes(), torch::IntArrayRef({3, 12, 16}));
  EXPECT_EQ(interleaved(quarter), bytes_of("big.jpg.16x12.rgb"));
  // The smallest of 1/8, 2/8 and 4/8 still at least the size asked for (2/8 would give 12 rows,
  // 4/8 gives 24); none of the scales without SIMD code (5/8 would give 30 x 40: full size).
  EXPECT_EQ(tp::data::decode(bytes, "big.jpg", color::rgb, {{20, 20}}).sizes(), torch::IntArrayRef({3, 24, 32}));
  EXPECT_EQ(tp::data::decode(bytes, "big.jpg", color::rgb, {{30, 40}}).sizes(), torch::IntArrayRef({3, 48, 64}));
  EXPECT_EQ(tp::data::decode(bytes, "big.jpg", color::grey, {{100, 100}}).sizes(), torch::IntArrayRef({1, 48, 64}));
  // PNGs have no scaled decode.
  EXPECT_EQ(tp::data::decode(bytes_of("large.png"), "large.png", color::rgb, {{10, 10}}).sizes(), torch::IntArrayRef({3, 150, 200}));
}

TEST(ImageDecode, BadFilesAreErrorsNamingTheFile) {
  const fs::path dir = fixtures() / "bad";
  fs::create_directories(dir);
  const auto write = [&](const std::string& name, std::vector<std::uint8_t> bytes) {
    std::ofstream(dir / name, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
    return (dir / name).string();
  };
  const auto decode = [](const std::string& path) { return tp::data::decode(tp::data::read_file(path), path, color::rgb); };
  const auto contains = [](const std::string& message, const std::string& part) {
    EXPECT_NE(message.find(part), std::string::npos) << message;
  };

  auto jpeg = bytes_of("big.jpg");
  const auto truncated = write("truncated.jpg", {jpeg.begin(), jpeg.begin() + std::ptrdiff_t(jpeg.size() / 2)});
  contains(bad_file_message(truncated, [&] { decode(truncated); }), "corrupt or truncated JPEG");
  auto scrambled_bytes = jpeg;
  for (std::size_t i = jpeg.size() / 3; i < jpeg.size() / 3 + 40; ++i) scrambled_bytes[i] = std::uint8_t(i * 37);
  const auto scrambled = write("scrambled.jpg", scrambled_bytes);
  bad_file_message(scrambled, [&] { decode(scrambled); });
  // Cut below the rows a crop reads: its end marker is missing, so the rest is decoded to check.
  const auto photo = bytes_of("p420.jpg");
  const auto cut_low = write("cut_low.jpg", {photo.begin(), photo.begin() + std::ptrdiff_t(photo.size() * 4 / 5)});
  const auto top_rows = [&] {
    std::vector<std::uint8_t> pixels;
    const auto bytes = tp::data::read_file(cut_low);
    tp::data::detail::jpeg_decode(bytes, cut_low, tp::data::detail::jpeg_header(bytes, cut_low), 8, true,
                                  tp::data::detail::pixel_region{0, 0, 16, 16}, pixels);
  };
  contains(bad_file_message(cut_low, top_rows), "corrupt or truncated JPEG");
  const auto headless = write("headless.jpg", {jpeg.begin(), jpeg.begin() + 20});
  contains(bad_file_message(headless, [&] { tp::data::read_header(tp::data::read_file(headless), headless); }), "JPEG");

  const auto text = write("text.png", {'h', 'e', 'l', 'l', 'o', '\n'});
  contains(bad_file_message(text, [&] { decode(text); }), "neither a JPEG nor a PNG");
  auto png = bytes_of("large.png");
  auto text_mode = png;
  text_mode.erase(text_mode.begin() + 4);  // "\r\n" became "\n"
  const auto damaged = write("damaged.png", text_mode);
  contains(bad_file_message(damaged, [&] { decode(damaged); }), "signature is damaged");
  const auto cut = write("cut.png", {png.begin(), png.begin() + std::ptrdiff_t(png.size() * 2 / 3)});
  contains(bad_file_message(cut, [&] { decode(cut); }), "cannot decode PNG");
  auto corrupt_bytes = png;
  for (std::size_t i = png.size() / 2; i < png.size() / 2 + 16; ++i) corrupt_bytes[i] ^= 0x5A;
  const auto corrupt = write("corrupt.png", corrupt_bytes);
  contains(bad_file_message(corrupt, [&] { decode(corrupt); }), "cannot decode PNG");

  const auto cmyk = file("cmyk.jpg");
  contains(bad_file_message(cmyk, [&] { decode(cmyk); }), "CMYK");
  const auto empty = write("empty.jpg", {});
  contains(bad_file_message(empty, [&] { tp::data::read_file(empty); }), "empty");
  const auto missing = (dir / "missing.jpg").string();
  contains(bad_file_message(missing, [&] { tp::data::read_file(missing); }), "cannot open");
  // Bytes given directly may be empty too.
  contains(bad_file_message("x.jpg", [&] { tp::data::decode({}, "x.jpg", color::rgb); }), "empty");
}

// A 200 x 150 JPEG with luma sampled h x v and chroma 1 x 1, written with libjpeg: PIL writes
// only 4:4:4, 4:2:2 and 4:2:0.
static std::vector<std::uint8_t> jpeg_sampled(int h, int v) {
  jpeg_compress_struct c{};
  jpeg_error_mgr errors{};
  c.err = jpeg_std_error(&errors);  // its error_exit ends the program: the input here is valid
  jpeg_create_compress(&c);
  unsigned char* memory = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &memory, &size);
  c.image_width = 200;
  c.image_height = 150;
  c.input_components = 3;
  c.in_color_space = JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, 90, TRUE);
  c.comp_info[0].h_samp_factor = h;
  c.comp_info[0].v_samp_factor = v;
  jpeg_start_compress(&c, TRUE);
  std::vector<std::uint8_t> row(200 * 3);
  for (unsigned y = 0; y < 150; ++y) {
    for (unsigned x = 0; x < 200; ++x)
      row[x * 3] = std::uint8_t(x * 7 + y * 3), row[x * 3 + 1] = std::uint8_t(x * x + y * 5), row[x * 3 + 2] = std::uint8_t((x * 13) ^ (y * 29));
    JSAMPROW p = row.data();
    jpeg_write_scanlines(&c, &p, 1);
  }
  jpeg_finish_compress(&c);
  std::vector<std::uint8_t> bytes(memory, memory + size);
  std::free(memory);
  jpeg_destroy_compress(&c);
  return bytes;
}

// The region asked of a JPEG (libjpeg's crop and skip, widened by a chroma sample and to an
// iMCU's start) has the pixels of the whole decode, in the chroma layouts PIL writes and luma
// sampled 4x2 and 2x4 (which libjpeg-turbo 2 crops wrongly at reduced scales: they are decoded
// at full width then, and only then), progressive or not, at full and at every reduced scale:
// for every left edge over three iMCUs (of 16 pixels), with every right edge (the first and last
// pixel of a part are where the chroma upsampling would repeat an edge sample), and parts one
// pixel wide at either edge.
TEST(ImageDecode, PartsOfAJpegArePartsOfTheWholeDecode) {
  std::vector<tp::data::detail::pixel_region> regions{{0, 0, 10, 10}, {37, 53, 61, 140}, {70, 3, 75, 5}, {20, 150, 150, 200},
                                                      {40, 0, 43, 1},  {40, 199, 43, 200}};
  for (std::int64_t left = 0; left < 48; ++left)
    for (std::int64_t width : {1, 2, 3, 14, 15, 16, 17, 18, 31, 33})
      regions.push_back({(left * 7) % 140, left + 40, (left * 7) % 140 + 3, left + 40 + width});
  struct file {
    std::string name;
    std::vector<std::uint8_t> bytes;
    bool cropped_reduced;  // cropped at reduced scales too (not luma 4x2 and 2x4: decoded at full width)
  };
  std::vector<file> files{{"luma 4x2", jpeg_sampled(4, 2), false}, {"luma 2x4", jpeg_sampled(2, 4), false}};
  for (std::string name : {"p420.jpg", "p422.jpg", "p444.jpg", "pprog.jpg", "pgrey.jpg"}) files.push_back({name, bytes_of(name), true});
  for (const auto& [name, bytes, cropped_reduced] : files)
    for (int num : {8, 4, 2, 1}) {
      const bool crops = num == 8 || cropped_reduced;
      const auto info = tp::data::detail::jpeg_header(bytes, name);
      std::vector<std::uint8_t> whole, part;
      const auto w = tp::data::detail::jpeg_decode(bytes, name, info, num, true, std::nullopt, whole);
      EXPECT_EQ(w.height, tp::data::detail::jpeg_scaled(150, num));
      for (const auto& r : regions) {
        tp::data::detail::pixel_region region{r.top * num / 8, r.left * num / 8, r.bottom * num / 8, r.right * num / 8};
        if (region.bottom <= region.top || region.right <= region.left) continue;  // empty at a reduced scale
        const auto p = tp::data::detail::jpeg_decode(bytes, name, info, num, true, region, part);
        ASSERT_LE(p.left, region.left);
        ASSERT_GE(p.left + p.width, std::min(region.right, w.width));
        ASSERT_EQ(p.top, region.top);
        ASSERT_EQ(p.height, region.bottom - region.top);
        if (!crops) {
          EXPECT_EQ(p.width, w.width) << name << " at " << num << "/8";
        } else if (region.right - region.left <= w.width / 2) {
          EXPECT_LT(p.width, w.width) << name << " at " << num << "/8";
        }
        const std::int64_t right = std::min(region.right, w.width);
        int wrong = 0;
        for (std::int64_t y = 0; y < p.height; ++y)
          wrong += std::memcmp(&part[std::size_t((y * p.width + region.left - p.left) * 3)],
                               &whole[std::size_t(((p.top + y) * w.width + region.left) * 3)], std::size_t((right - region.left) * 3)) != 0;
        EXPECT_EQ(wrong, 0) << name << " at " << num << "/8, rows " << region.top << "..." << region.bottom << ", columns "
                            << region.left << "..." << region.right;
      }
    }
  // Read as grey, a 4x2 file's chroma is not decoded at all: its parts are cropped at 4/8 too.
  const auto& sampled = files[0].bytes;
  const auto info = tp::data::detail::jpeg_header(sampled, "luma 4x2");
  std::vector<std::uint8_t> whole, part;
  const auto w = tp::data::detail::jpeg_decode(sampled, "luma 4x2", info, 4, false, std::nullopt, whole);
  const tp::data::detail::pixel_region region{10, 30, 40, 50};
  const auto p = tp::data::detail::jpeg_decode(sampled, "luma 4x2", info, 4, false, region, part);
  EXPECT_EQ(p.channels, 1);
  EXPECT_LT(p.width, w.width);
  for (std::int64_t y = 0; y < p.height; ++y)
    EXPECT_EQ(std::memcmp(&part[std::size_t(y * p.width + region.left - p.left)], &whole[std::size_t((p.top + y) * w.width + region.left)], 20), 0)
        << "grey row " << p.top + y;
}

// The transforms decode only about their crop of a JPEG: the same result as from the whole
// image (its lossless PNG copy), bitwise, for growing and shrinking crops, flipped, normalized.
TEST(ImageTransforms, CropsOfAJpegDecodeOnlyTheirPartWithTheSameResult) {
  for (std::string name : {"p420.jpg", "p444.jpg", "pprog.jpg", "pgrey.jpg"})
    for (std::uint64_t seed = 0; seed < 12; ++seed) {
      const auto grow = tp::data::transforms().scaled_decode(false).random_resized_crop(120, 160).random_horizontal_flip();
      const auto shrink = tp::data::transforms().scaled_decode(false).random_resized_crop(30, 40).normalize({0.5}, {0.25});
      for (const auto& t : {grow, shrink})
        EXPECT_TRUE(torch::equal(t(bytes_of(name), name, seed), t(bytes_of(name + ".png"), name, seed))) << name << " seed " << seed;
    }
}

// The fixed-point path for 8-bit RGB (resample_rgb8.hpp) against the float one on the same
// pixels: within one step, rarely off; its SSE2 and AVX2 loops bitwise equal, bytes and floats,
// streamed or not (a resumed run on another machine makes the same images); float outputs its
// uint8 result, scaled. Noise is the hardest case for rounding. Boxes: enlarging (AVX2's
// byte-shuffle windows), shrinking by little and by much (many taps), flipped, fractional, widths
// not a multiple of 8 or 16, the identity, widths a multiple of 32 (uint8 rows then go straight
// to the output), outputs over 64 pixels (whose shrunk axes' taps are computed anew, not kept),
// and float images large enough to be streamed (32k values: 96 x 128, 120 x 224, 110 x 100).
TEST(ImageTransforms, FixedPointRgbIsWithinAStepOfFloatOnEveryPath) {
  namespace d = tp::data::detail;
  torch::manual_seed(3);
  const std::int64_t h = 61, w = 83;
  const auto noise = torch::randint(0, 256, {h, w, 3}, torch::kUInt8).contiguous();
  const auto as_float = noise.to(torch::kFloat).contiguous();
  const d::pixels<std::uint8_t> bytes{noise.data_ptr<std::uint8_t>(), h, w, 3, w * 3, 3, 1};
  const d::pixels<float> floats{as_float.data_ptr<float>(), h, w, 3, w * 3, 3, 1};
  // normalize's own constants (ToTensor, then ImageNet's mean and std): products that round, so
  // that a fused multiply-add in one loop and not in another would show.
  const float scale[3] = {float(1 / 255.0 / 0.229), float(1 / 255.0 / 0.224), float(1 / 255.0 / 0.225)};
  const float offset[3] = {float(-0.485 / 0.229), float(-0.456 / 0.224), float(-0.406 / 0.225)};
  struct box {
    double x, y, bw, bh;
    std::int64_t oh, ow;
    bool flip;
  };
  const std::vector<box> boxes = {{3, 5, 40, 30, 56, 72, false}, {10.5, 2.25, 33.5, 40.75, 50, 37, true}, {0, 0, 83, 61, 40, 70, false},
                                  {1, 2, 80, 55, 9, 13, true},   {0, 0, 83, 61, 61, 83, false},        {20, 20, 5, 4, 33, 47, true},
                                  {0, 0, 83, 61, 1, 1, false},   {2, 3, 50, 40, 45, 64, true},         {0, 0, 83, 61, 20, 32, false},
                                  {5, 7, 40, 30, 96, 128, true}, {2, 1, 70, 50, 120, 224, false}, {9, 4, 30, 50, 110, 100, true}};
#if defined(__SSE2__)
  bool& avx2 = d::use_avx2();
  const bool has_avx2 = avx2;
#endif
  for (const auto& b : boxes) {
    std::vector<std::uint8_t> fixed(3 * b.oh * b.ow), reference(fixed.size()), sse2(fixed.size());
    // Floats in 64-byte aligned memory, as a batch buffer's: images of 32k values and more are
    // streamed there (SSE2's 16 bytes, AVX2's 32); rows of 100 floats are 32-byte aligned every
    // other row, so AVX2 streams one and stores the next.
    const auto fixed_floats = torch::empty({std::int64_t(fixed.size())}), sse2_floats = torch::empty_like(fixed_floats);
    float* fixed_float = fixed_floats.data_ptr<float>();
    ASSERT_EQ(reinterpret_cast<std::uintptr_t>(fixed_float) % 64, 0u);  // else the large images would not stream
    ASSERT_EQ(reinterpret_cast<std::uintptr_t>(sse2_floats.data_ptr<float>()) % 64, 0u);
    d::resample(bytes, b.x, b.y, b.bw, b.bh, b.oh, b.ow, b.flip, scale, offset, 3, fixed.data());
    d::resample(bytes, b.x, b.y, b.bw, b.bh, b.oh, b.ow, b.flip, scale, offset, 3, fixed_float);
    d::resample(floats, b.x, b.y, b.bw, b.bh, b.oh, b.ow, b.flip, scale, offset, 3, reference.data());
#if defined(__SSE2__)
    avx2 = false;
    d::resample(bytes, b.x, b.y, b.bw, b.bh, b.oh, b.ow, b.flip, scale, offset, 3, sse2.data());
    d::resample(bytes, b.x, b.y, b.bw, b.bh, b.oh, b.ow, b.flip, scale, offset, 3, sse2_floats.data_ptr<float>());
    avx2 = has_avx2;
#else
    sse2 = fixed;
    sse2_floats.copy_(fixed_floats);
#endif
    EXPECT_EQ(fixed, sse2) << "box " << b.x << ", " << b.y << " to " << b.oh << " x " << b.ow;
    EXPECT_TRUE(torch::equal(fixed_floats, sse2_floats)) << "box " << b.x << ", " << b.y << " to " << b.oh << " x " << b.ow;
    int worst = 0;
    std::size_t off = 0;
    float float_error = 0;
    for (std::size_t i = 0; i < fixed.size(); ++i) {
      const int e = std::abs(int(fixed[i]) - int(reference[i]));
      worst = std::max(worst, e);
      off += e != 0;
      const std::size_t c = i / std::size_t(b.oh * b.ow);
      float_error = std::max(float_error, std::abs(fixed_float[i] - (float(fixed[i]) * scale[c] + offset[c])));
    }
    EXPECT_LE(worst, 1) << "box " << b.x << ", " << b.y << " to " << b.oh << " x " << b.ow;
    EXPECT_LT(double(off), 0.02 * double(fixed.size()) + 1) << "box " << b.x << ", " << b.y << " to " << b.oh << " x " << b.ow;
    EXPECT_LE(float_error, 1e-5f);
  }
}

// Grey rows of an enlarged box take resample_grey_avx2.hpp's windows where the CPU has AVX2:
// the same floats as the scalar loop, bitwise (a run resumed on a CPU without AVX2 makes the same
// images), for boxes as random_resized_crop draws them on a 28 x 28 file (fractional, flipped,
// down to the last row, whose bytes end the buffer), outputs not a multiple of 8, and of fewer
// than 8 pixels or shrunk (the scalar loop alone). Also the output itself is held to a bilinear
// filter by RandomResizedCropIsPilsBilinearResizeOfTheBox; this holds the two loops together.
TEST(ImageTransforms, GreyWindowsAreTheScalarLoopsFloats) {
  namespace d = tp::data::detail;
#if !defined(__SSE2__)
  GTEST_SKIP() << "the AVX2 windows are x86-64's";
#else
  if (!d::use_avx2()) GTEST_SKIP() << "this CPU has no AVX2";
  std::mt19937_64 random(11);
  const auto uniform = [&](double lo, double hi) { return uniform_in(random, lo, hi); };
  const std::int64_t h = 28, w = 28;
  std::vector<std::uint8_t> image(std::size_t(h * w));  // exactly the image: its last row ends the buffer
  for (auto& v : image) v = static_cast<std::uint8_t>(random());
  const d::pixels<std::uint8_t> grey{image.data(), h, w, 1, w, 1, 1};
  const float scale[3] = {1 / 255.0f / 0.229f, 1 / 255.0f / 0.224f, 1 / 255.0f / 0.225f}, offset[3] = {-2.1f, -2.0f, -1.8f};
  bool& avx2 = d::use_avx2();
  int windowed = 0;
  for (int run = 0; run < 300; ++run) {
    const double bw = run % 5 == 0 ? double(w) : uniform(2, double(w)), bh = run % 5 == 1 ? double(h) : uniform(2, double(h));
    const double x = run % 3 == 0 ? double(w) - bw : uniform(0, double(w) - bw), y = run % 4 == 0 ? double(h) - bh : uniform(0, double(h) - bh);
    const std::int64_t ow = run % 7 == 0 ? 1 + std::int64_t(random() % 7) : run % 7 == 1 ? 8 + std::int64_t(random() % 40) : 28;
    const std::int64_t oh = run % 6 == 0 ? 5 + std::int64_t(random() % 30) : 28;
    const bool flip = run % 2 == 1;
    d::filter_taps taps;
    d::grey_windows plan;
    windowed += d::plan_grey_windows(d::axis_taps(0, x, bw, w, ow, flip, taps), ow, plan);
    for (const std::int64_t channels : {1, 3}) {
      std::vector<float> fast(std::size_t(channels * oh * ow)), slow(fast.size());
      std::vector<std::uint8_t> fast8(fast.size()), slow8(fast.size());
      d::resample(grey, x, y, bw, bh, oh, ow, flip, scale, offset, channels, fast.data());
      d::resample(grey, x, y, bw, bh, oh, ow, flip, scale, offset, channels, fast8.data());
      avx2 = false;
      d::resample(grey, x, y, bw, bh, oh, ow, flip, scale, offset, channels, slow.data());
      d::resample(grey, x, y, bw, bh, oh, ow, flip, scale, offset, channels, slow8.data());
      avx2 = true;
      ASSERT_EQ(0, std::memcmp(fast.data(), slow.data(), fast.size() * sizeof(float)))
          << "box " << x << ", " << y << ", " << bw << " x " << bh << " to " << oh << " x " << ow << (flip ? ", flipped" : "");
      ASSERT_EQ(fast8, slow8) << "box " << x << ", " << y << ", " << bw << " x " << bh << " to " << oh << " x " << ow;
    }
  }
  EXPECT_GT(windowed, 150);  // most boxes took the windows (the rest: outputs under 8, or shrunk)
#endif
}

// RGB rows take AVX2 windows where the CPU has AVX2: rgb8_windows (resample_rgb8_avx2.hpp) for an
// enlarged box, rgb8_plane_windows (resample_rgb8_plane_windows.hpp) for one shrunk by up to
// about 3 (3 to 6 taps). The paths are counted by what their plans accept, as resample_rgb8
// chooses them (a fault put in the plane windows on purpose fails this test). Each must give the
// SSE2 loop's bytes and floats, bitwise, for boxes as random_resized_crop draws them (fractional,
// flipped, at the right and bottom edges, down to the last row, whose bytes end the buffer),
// outputs not a multiple of 8 and of fewer than 8 pixels, and shrinking factors past the plane
// windows' reach (the general loop).
TEST(ImageTransforms, RgbWindowsAreTheSse2LoopsBytes) {
  namespace d = tp::data::detail;
#if !defined(__SSE2__)
  GTEST_SKIP() << "the AVX2 windows are x86-64's";
#else
  if (!d::use_avx2()) GTEST_SKIP() << "this CPU has no AVX2";
  std::mt19937_64 random(12);
  const auto uniform = [&](double lo, double hi) { return uniform_in(random, lo, hi); };
  const std::int64_t h = 61, w = 160;
  std::vector<std::uint8_t> image(std::size_t(h * w * 3));  // exactly the image: its last row ends the buffer
  for (auto& v : image) v = static_cast<std::uint8_t>(random());
  const d::pixels<std::uint8_t> rgb{image.data(), h, w, 3, w * 3, 3, 1};
  const float scale[3] = {1 / 255.0f / 0.229f, 1 / 255.0f / 0.224f, 1 / 255.0f / 0.225f}, offset[3] = {-2.1f, -2.0f, -1.8f};
  bool& avx2 = d::use_avx2();
  int planes[4] = {}, windows = 0, general = 0;  // planes: by pairs of taps (2 or 3)
  for (int run = 0; run < 400; ++run) {
    // Output widths under 8, of 8 to 47 or of 24 to 43; the box's width 0.4 to 1, 1 to 2, 2 to 3.3
    // or 3.3 to 5 times its output's.
    // (Small images: the floats are stored, not streamed; FixedPointRgbIsWithinAStepOfFloatOnEveryPath
    // streams them.)
    const std::int64_t ow = run % 7 == 0   ? 1 + std::int64_t(random() % 7)
                            : run % 7 == 1 ? 8 + std::int64_t(random() % 40)
                                           : 24 + std::int64_t(random() % 20);
    const std::int64_t oh = run % 6 == 0 ? 5 + std::int64_t(random() % 30) : 20 + std::int64_t(random() % 20);
    const double factors[5] = {0.4, 1, 2, 3.3, 5};
    const double bw = std::min(double(w), double(ow) * uniform(factors[run % 4], factors[run % 4 + 1]));
    const double bh = run % 5 == 1 ? double(h) : uniform(2, double(h));
    const double x = run % 3 == 0 ? double(w) - bw : uniform(0, double(w) - bw);
    const double y = run % 4 == 0 ? double(h) - bh : uniform(0, double(h) - bh);
    const bool flip = run % 2 == 1;
    d::filter_taps taps;
    const auto& tx = d::axis_taps(0, x, bw, w, ow, flip, taps);
    std::vector<std::int16_t> q;
    d::quantize_taps(tx.weights.data(), ow, tx.stride, q);
    d::rgb8_windows plan;
    d::rgb8_plane_windows plane_plan;
    if (d::plan_rgb8_windows(tx, q, ow, plan)) ++windows;
    else if (d::plan_rgb8_plane_windows(tx, q, ow, plane_plan)) ++planes[(tx.stride + 1) / 2];
    else ++general;
    std::vector<float> fast(std::size_t(3 * oh * ow)), slow(fast.size());
    std::vector<std::uint8_t> fast8(fast.size()), slow8(fast.size());
    d::resample(rgb, x, y, bw, bh, oh, ow, flip, scale, offset, 3, fast.data());
    d::resample(rgb, x, y, bw, bh, oh, ow, flip, scale, offset, 3, fast8.data());
    avx2 = false;
    d::resample(rgb, x, y, bw, bh, oh, ow, flip, scale, offset, 3, slow.data());
    d::resample(rgb, x, y, bw, bh, oh, ow, flip, scale, offset, 3, slow8.data());
    avx2 = true;
    const auto box = [&] {
      return "box " + std::to_string(x) + ", " + std::to_string(y) + ", " + std::to_string(bw) + " x " + std::to_string(bh) + " to " +
             std::to_string(oh) + " x " + std::to_string(ow) + (flip ? ", flipped" : "");
    };
    ASSERT_EQ(fast8, slow8) << box();
    ASSERT_EQ(0, std::memcmp(fast.data(), slow.data(), fast.size() * sizeof(float))) << box();
  }
  // Each loop had its share of the 400 boxes: the plane windows with 2 and 3 pairs of taps, the
  // enlarging windows, the general loop (102, 79, 102 and 117 when written).
  EXPECT_GT(planes[2], 50);
  EXPECT_GT(planes[3], 40);
  EXPECT_GT(windows, 50);
  EXPECT_GT(general, 50);
#endif
}

// quantize_taps: each output's Q14 weights sum to exactly 1 << 14 (a flat area stays flat), the
// rounding's remainder going to the largest weight, the first of equal ones; the two-tap loop
// (an enlarged axis) and the general one agree.
TEST(ImageTransforms, QuantizedTapsSumToOneWithTheRemainderOnTheLargest) {
#if !defined(__SSE2__)
  GTEST_SKIP() << "the fixed-point loops are x86-64's";
#else
  namespace d = tp::data::detail;
  std::vector<std::int16_t> q;
  // Two taps: exact halves; two halves and a half-step each way (both round up: the larger takes
  // the -1); equal weights that both round up (the first takes the -2); a larger first weight.
  const float two[] = {0.5f, 0.5f, 16383 / 32768.0f, 16385 / 32768.0f, 8192.6f / 16384, 8192.6f / 16384,
                       0.75f, 0.25f};
  d::quantize_taps(two, 4, 2, q);
  const std::vector<std::int16_t> two_q = {8192, 8192, 8192, 8192, 8191, 8193, 12288, 4096};
  EXPECT_EQ(q, two_q);
  // The same weights with a third of 0 take the general loop, which gives the same.
  float padded[12];
  for (int o = 0; o < 4; ++o) padded[3 * o] = two[2 * o], padded[3 * o + 1] = two[2 * o + 1], padded[3 * o + 2] = 0;
  d::quantize_taps(padded, 4, 3, q);
  for (int o = 0; o < 4; ++o)
    EXPECT_EQ((std::vector<std::int16_t>{q[3 * o], q[3 * o + 1], q[3 * o + 2]}),
              (std::vector<std::int16_t>{two_q[2 * o], two_q[2 * o + 1], 0}));
  // Three taps: thirds (5461 each: the first takes the 1 left); two equal largest at the ends
  // (5734 + 4915 + 5734: the first takes the 1); a largest in the middle (4424 + 7537 + 4424: it
  // gives 1 back).
  const float three[] = {1 / 3.0f, 1 / 3.0f, 1 / 3.0f, 0.35f, 0.3f, 0.35f, 0.27f, 0.46f, 0.27f};
  d::quantize_taps(three, 3, 3, q);
  EXPECT_EQ(q, (std::vector<std::int16_t>{5462, 5461, 5461, 5735, 4915, 5734, 4424, 7536, 4424}));
#endif
}

// Where a box is enlarged, its taps come from enlarging_taps (filter_taps.hpp) instead of
// bilinear_taps and equalize_taps: each output must weigh each source pixel as they do (within a
// float's rounding), and read only pixels of the axis, within [lo, hi). Boxes as
// random_resized_crop draws them: fractional starts, lengths from half a pixel to the output's,
// whole axes, at the edges, flipped or not; axes of 1 and 2 pixels.
TEST(ImageTransforms, EnlargingTapsWeighAsTheBilinearFilter) {
  namespace d = tp::data::detail;
  std::mt19937_64 random(5);
  const auto uniform = [&](double lo, double hi) { return uniform_in(random, lo, hi); };
  for (int run = 0; run < 400; ++run) {
    const std::int64_t in = run < 8 ? 1 + run % 2 : 1 + std::int64_t(random() % 300), out = 1 + std::int64_t(random() % 300);
    const double length = run % 10 < 2 ? std::min<double>(in, out) : uniform(std::min(0.5, double(in)), std::min<double>(in, out));
    const double start = run % 7 == 0 ? 0.0 : run % 7 == 1 ? double(in) - length : uniform(0, double(in) - length);
    const bool reverse = run % 4 >= 2;
    d::filter_taps fast, slow;
    d::enlarging_taps(start, length, in, out, reverse, fast);
    d::bilinear_taps(start, length, in, out, reverse, slow);
    d::equalize_taps(slow, in);
    const auto dense = [&](const d::filter_taps& t, std::int64_t o) {
      std::vector<double> w(std::size_t(in), 0.0);
      for (std::int64_t k = 0; k < t.stride; ++k) {
        const std::int64_t i = t.first[o] + k;
        EXPECT_TRUE(i >= 0 && i < in) << "reads pixel " << i << " of " << in;
        if (i >= 0 && i < in) w[std::size_t(i)] += t.weights[o * t.stride + k];
      }
      return w;
    };
    for (std::int64_t o = 0; o < out; ++o) {
      const auto a = dense(fast, o), b = dense(slow, o);
      for (std::int64_t i = 0; i < in; ++i)
        ASSERT_NEAR(a[i], b[i], 1e-6) << "start " << start << " length " << length << " of " << in << " to " << out << ", output " << o
                                      << " pixel " << i;
    }
    EXPECT_LE(fast.stride, 2);
    EXPECT_EQ(fast.lo, *std::min_element(fast.first.begin(), fast.first.end()));  // resample reads first - lo
    EXPECT_EQ(fast.hi, *std::max_element(fast.first.begin(), fast.first.end()) + fast.stride);
  }
}

TEST(ImageDecode, ManyThreadsDecodeAtOnce) {
  const std::vector<std::string> names = {"rgb.jpg", "grey.png", "palette.png", "big.jpg"};
  std::vector<std::vector<std::uint8_t>> files, expected;
  for (const auto& name : names) files.push_back(bytes_of(name)), expected.push_back(bytes_of(name + ".rgb"));
  std::atomic<int> wrong = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 40; ++i) {
        const std::size_t k = std::size_t(i + t) % names.size();
        if (interleaved(tp::data::decode(files[k], names[k], color::rgb)) != expected[k]) ++wrong;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong, 0);
}

TEST(ImageTransforms, CropBoxesFollowTorchvisionsSampling) {
  std::set<std::vector<std::int64_t>> distinct;
  for (std::uint64_t seed = 0; seed < 2000; ++seed) {
    tp::data::example_random random(seed);
    const auto box = tp::data::random_resized_crop_box(28, 40, {0.08, 1.0}, {3.0 / 4.0, 4.0 / 3.0}, random);
    ASSERT_TRUE(box.top >= 0 && box.left >= 0 && box.height > 0 && box.width > 0) << seed;
    ASSERT_TRUE(box.top + box.height <= 28 && box.left + box.width <= 40) << seed;
    const double area = double(box.height * box.width) / (28 * 40);
    EXPECT_GT(area, 0.05);  // 0.08 before rounding the sides
    distinct.insert({box.top, box.left, box.height, box.width});
  }
  EXPECT_GT(distinct.size(), 500u);
  // No try can fit (the ratio 3..4 in a square, at least 90% of it): the centre crop of ratio 3.
  tp::data::example_random random(1);
  const auto fallback = tp::data::random_resized_crop_box(30, 30, {0.9, 1.0}, {3.0, 4.0}, random);
  EXPECT_EQ(std::vector<std::int64_t>({fallback.top, fallback.left, fallback.height, fallback.width}),
            std::vector<std::int64_t>({10, 0, 10, 30}));
}

TEST(ImageTransforms, DeterministicPerSeedDifferentAcrossSeeds) {
  const auto bytes = bytes_of("big.jpg");
  const auto t = tp::data::transforms().random_resized_crop(20, 24).random_horizontal_flip().normalize({0.5}, {0.25});
  const auto a = t(bytes, "big.jpg", 11);
  EXPECT_EQ(a.dtype(), torch::kFloat);
  EXPECT_EQ(a.sizes(), torch::IntArrayRef({3, 20, 24}));
  EXPECT_TRUE(torch::equal(a, t(bytes, "big.jpg", 11)));
  int different = 0;
  for (std::uint64_t seed = 0; seed < 10; ++seed) different += !torch::equal(a, t(bytes, "big.jpg", tp::data::example_seed(seed, 0, 0)));
  EXPECT_EQ(different, 10);
  EXPECT_NE(tp::data::example_seed(7, 0, 1), tp::data::example_seed(7, 1, 0));
  EXPECT_NE(tp::data::example_seed(7, 0, 1), tp::data::example_seed(8, 0, 1));
}

// The crop and PIL's bilinear resize of the same box agree within rounding: upscaling crops of
// a small JPEG, and shrinking ones (antialiased) of a larger PNG.
TEST(ImageTransforms, RandomResizedCropIsPilsBilinearResizeOfTheBox) {
  struct run {
    std::string name;
    std::int64_t h, w, out_h, out_w;
  };
  const std::vector<run> runs = {{"big.jpg", 48, 64, 40, 30}, {"large.png", 150, 200, 24, 32}, {"rgb.png", 23, 37, 23, 37}};
  std::ofstream boxes(fixtures() / "boxes.txt");
  std::vector<torch::Tensor> ours;
  for (const auto& r : runs)
    for (std::uint64_t seed = 0; seed < 6; ++seed) {
      tp::data::example_random random(seed);
      const auto b = tp::data::random_resized_crop_box(r.h, r.w, {0.08, 1.0}, {3.0 / 4.0, 4.0 / 3.0}, random);
      boxes << r.name << ' ' << b.top << ' ' << b.left << ' ' << b.height << ' ' << b.width << ' ' << r.out_h << ' ' << r.out_w << '\n';
      const auto t = tp::data::transforms().scaled_decode(false).random_resized_crop(r.out_h, r.out_w);
      ours.push_back(t(bytes_of(r.name), r.name, seed).permute({1, 2, 0}).reshape({-1}));
    }
  boxes.close();
  std::ofstream(fixtures() / "resize.py") << resize_py;
  tp_test::run(std::string(TP_PYTHON) + " " + (fixtures() / "resize.py").string() + " " + fixtures().string());
  const auto pil = bytes_of("pil_crops.raw");
  const auto all = torch::cat(ours).to(torch::kInt);
  ASSERT_EQ(std::int64_t(pil.size()), all.numel());
  const auto diff = (all - torch::from_blob(const_cast<std::uint8_t*>(pil.data()), {all.numel()}, torch::kUInt8).to(torch::kInt)).abs();
  EXPECT_LE(diff.max().item<int>(), 2);
  EXPECT_LT(diff.to(torch::kFloat).mean().item<float>(), 0.3);
}

TEST(ImageTransforms, FlipNormalizeResizeAndCenterCrop) {
  const auto bytes = bytes_of("rgb.png");  // 23 x 37
  const auto image = tp::data::decode(bytes, "rgb.png", color::rgb);
  EXPECT_TRUE(torch::equal(tp::data::transforms().random_horizontal_flip(1.0)(bytes, "f", 3), image.flip({2})));
  EXPECT_TRUE(torch::equal(tp::data::transforms().random_horizontal_flip(0.0)(bytes, "f", 3), image));
  EXPECT_TRUE(torch::equal(tp::data::transforms()(bytes, "f", 3), image));

  const auto normalized = tp::data::transforms().normalize({0.5, 0.4, 0.3}, {0.2, 0.25, 0.5})(bytes, "n", 0);
  const auto mean = torch::tensor({0.5, 0.4, 0.3}).view({3, 1, 1}), std = torch::tensor({0.2, 0.25, 0.5}).view({3, 1, 1});
  EXPECT_TRUE(torch::allclose(normalized, (image.to(torch::kFloat) / 255 - mean) / std, 1e-5, 1e-5));

  EXPECT_EQ(tp::data::transforms().resize(20)(bytes, "r", 0).sizes(), torch::IntArrayRef({3, 20, 32}));  // int(20 * 37 / 23)
  EXPECT_EQ(tp::data::transforms().resize(9, 11)(bytes, "r", 0).sizes(), torch::IntArrayRef({3, 9, 11}));
  // Centre crops: round((23 - 10) / 2) = 6 (half to even), round((37 - 12) / 2) = 12.
  EXPECT_TRUE(torch::equal(tp::data::transforms().center_crop(10, 12)(bytes, "c", 0), image.slice(1, 6, 16).slice(2, 12, 24)));
  // Flipped, then cropped: the crop is of the flipped image.
  EXPECT_TRUE(torch::equal(tp::data::transforms().random_horizontal_flip(1).center_crop(10, 12)(bytes, "c", 0),
                           image.flip({2}).slice(1, 6, 16).slice(2, 12, 24)));
  // Larger than the image: padded with 0, as torchvision does ((30 - 23) // 2 = 3 rows on top).
  const auto padded = tp::data::transforms().center_crop(30, 37)(bytes, "c", 0);
  EXPECT_EQ(padded.sizes(), torch::IntArrayRef({3, 30, 37}));
  EXPECT_TRUE(torch::equal(padded.slice(1, 3, 26), image));
  EXPECT_EQ(padded.slice(1, 0, 3).sum().item<std::int64_t>() + padded.slice(1, 26, 30).sum().item<std::int64_t>(), 0);
  // Normalized first, then padded: the padding is 0 after normalization.
  const auto normalized_padded = tp::data::transforms().normalize({0.5}, {0.5}).center_crop(25, 37)(bytes, "c", 0);
  EXPECT_EQ(normalized_padded.slice(1, 0, 1).abs().sum().item<float>(), 0.0f);
  EXPECT_TRUE(torch::allclose(normalized_padded.slice(1, 1, 24), image.to(torch::kFloat) / 127.5 - 1, 1e-5, 1e-5));
}

TEST(ImageTransforms, HooksSeeTheImageSoFarAndItsGenerator) {
  const auto bytes = bytes_of("grey.png");
  const auto image = tp::data::decode(bytes, "g", color::grey);
  std::uint64_t drawn = 0;
  const auto t = tp::data::transforms(color::grey)
                     .center_crop(20, 30)
                     .then([&](torch::Tensor x, tp::data::example_random& random) {
                       drawn = random.next();
                       return x.to(torch::kFloat) * 2;
                     })
                     .normalize({1.0}, {2.0});
  const auto out = t(bytes, "g", 5);
  EXPECT_EQ(drawn, tp::data::example_random(5).next());
  // A hook's floats are not divided by 255 again.
  EXPECT_TRUE(torch::allclose(out, (image.slice(1, 2, 22).slice(2, 4, 34).to(torch::kFloat) * 2 - 1) / 2));
  const auto wrong = tp::data::transforms().then([](torch::Tensor x, tp::data::example_random&) { return x[0]; });
  try {
    wrong(bytes, "g.png", 0);
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("[C, H, W]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("g.png"), std::string::npos) << e.what();
  }
}

TEST(ImageTransforms, SettersRejectBadArguments) {
  const auto message = [](auto&& f) {
    try {
      f();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  using tp::data::transforms;
  EXPECT_NE(message([] { transforms().random_resized_crop(0, 4); }).find("sizes must be > 0, got 0 x 4"), std::string::npos);
  EXPECT_NE(message([] { transforms().random_resized_crop(4, 4, {0.5, 0.1}); }).find("scale must be"), std::string::npos);
  EXPECT_NE(message([] { transforms().random_resized_crop(4, 4, {0.1, 1}, {2, 1}); }).find("ratio must be"), std::string::npos);
  EXPECT_NE(message([] { transforms().random_horizontal_flip(1.5); }).find("p must be in [0, 1]"), std::string::npos);
  EXPECT_NE(message([] { transforms().normalize({0.5, 0.5}, {0.5}); }).find("same number"), std::string::npos);
  EXPECT_NE(message([] { transforms().normalize({0.5}, {0}); }).find("std must be > 0"), std::string::npos);
  EXPECT_NE(message([] { transforms(color::grey).normalize({0.5, 0.5, 0.5}, {1, 1, 1}); }).find("grey (1 channel)"), std::string::npos);
  EXPECT_NE(message([] { transforms().then({}); }).find("empty"), std::string::npos);
}

// The scaled decode of a shrinking crop: the same crops, and the same picture within a few steps.
TEST(ImageTransforms, ScaledDecodeKeepsTheCropsOfAFullDecode) {
  const auto bytes = bytes_of("smooth.jpg");  // 128 x 96 gradients: the 1/4 scale fits 32 x 24
  const auto fast = tp::data::transforms().resize(24, 32);
  const auto full = tp::data::transforms().scaled_decode(false).resize(24, 32);
  const auto a = fast(bytes, "s", 1).to(torch::kFloat), b = full(bytes, "s", 1).to(torch::kFloat);
  EXPECT_EQ(a.sizes(), b.sizes());
  EXPECT_LT((a - b).abs().max().item<float>(), 4.0f);
  for (std::uint64_t seed = 0; seed < 8; ++seed) {
    const auto crop = tp::data::transforms().random_resized_crop(8, 8).random_horizontal_flip();
    const auto f = tp::data::transforms(crop)(bytes, "s", seed).to(torch::kFloat);
    const auto g = tp::data::transforms(crop).scaled_decode(false)(bytes, "s", seed).to(torch::kFloat);
    EXPECT_LT((f - g).abs().max().item<float>(), 6.0f) << seed;
  }
}

// A grey file read as RGB is resampled once and repeated: the same as decoding it to RGB first.
TEST(ImageTransforms, GreyFilesReadAsRgbRepeatTheirChannel) {
  for (std::string name : {"grey.jpg", "grey.png"}) {
    const auto bytes = bytes_of(name);
    const auto rgb = tp::data::decode(bytes, name, color::rgb);
    EXPECT_TRUE(torch::equal(tp::data::transforms()(bytes, name, 0), rgb)) << name;
    const auto out = tp::data::transforms().random_resized_crop(16, 16).normalize({0.1, 0.2, 0.3}, {0.5, 0.5, 0.5})(bytes, name, 4);
    EXPECT_EQ(out.sizes(), torch::IntArrayRef({3, 16, 16}));
    EXPECT_TRUE(torch::allclose(out[0] - 0.2, out[1], 1e-5, 1e-5)) << name;
    EXPECT_TRUE(torch::allclose(out[0] - 0.4, out[2], 1e-5, 1e-5)) << name;
  }
}
