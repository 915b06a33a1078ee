// bench_image_pipeline MODE ROOT THREADS SECONDS SIZE: images per second through one image
// pipeline on an ImageFolder tree, printed as "images_per_s X". Run by image_pipeline.sh, which
// interleaves it with the torchvision peer (image_pipeline_peer.py) and takes medians.
//
//   tp       image_folder(ROOT) | shuffle | decode_images(transforms: random_resized_crop(SIZE),
//            random_horizontal_flip, normalize; THREADS threads) | batch(64): what training reads
//   tp_uint8 the same without normalize: uint8 batches (normalization left to the device)
//   decode   the limit: each of THREADS threads reads its share of the same files and decodes
//            each at full size to RGB with libjpeg-turbo (jpeg_read_scanlines), nothing else
//   inline   tp_uint8's work in this one thread: decode_images' own worker code on its chunks of
//            whole batches, read, decoded and cropped into pooled batch buffers, without worker
//            threads or queues (until 2026-11-27, a loop of its own that stacked a tensor per
//            image): what the hand-offs between threads cost, by difference. Best of passes over
//            all the files, printed as images per second (a best, where tp_uint8's is a mean over
//            SECONDS: on a noisy machine it favours inline a little)
//   inline_float  the same with normalize: tp's work in this one thread
//   overhead the transforms alone (with and without normalize) and the full decode, on 256 files
//            held in memory (spread over the listing, so over every class: until 2026-11-27 the
//            first 256, one class's), in this thread, best of passes: microseconds per image
//            (printed as "us_per_image X uint8_us X decode_us X"); THREADS is unused
//
// No mallopt: decode_images' batches come from a pool of reused buffers, so a 38 MiB batch of
// 64 float 224 x 224 x 3 images does not page-fault anew each time (as malloc'd ones did).
//
// tp, tp_uint8 and decode: the clock starts after the first batch (or the first 64 images), so
// thread start-up and the first reads of cold files are not counted; the run stops at the first
// batch after SECONDS. inline and overhead take the best of whole passes (at least 2 and 3).
// jpeglib.h needs FILE and size_t declared first.
#include <cstddef>
#include <cstdio>
#include <jpeglib.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <tp/data/batch.hpp>
#include <tp/data/decode_images.hpp>
#include <tp/data/image/decode.hpp>
#include <tp/data/image/transforms.hpp>
#include <tp/data/image_folder.hpp>
#include <tp/data/shuffle.hpp>

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

// The process's CPU time (all threads, user and system), in seconds. With TP_BENCH_CPU set, each
// run also prints the CPU microseconds it spent per image to stderr: on a shared machine the
// work per image moves less with the neighbours' load than the images per second do.
double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  const auto s = [](timeval t) { return double(t.tv_sec) + double(t.tv_usec) * 1e-6; };
  return s(u.ru_utime) + s(u.ru_stime);
}
struct cpu_meter {
  double start = cpu_seconds();
  double report(double images) const {
    if (std::getenv("TP_BENCH_CPU")) std::fprintf(stderr, "cpu_us_per_image %.3f\n", (cpu_seconds() - start) / images * 1e6);
    return images;
  }
};

tp::data::transforms augment(std::int64_t size, bool normalized = true) {
  auto t = tp::data::transforms(tp::data::color::rgb).random_resized_crop(size, size).random_horizontal_flip(0.5);
  if (normalized) t.normalize({0.485, 0.456, 0.406}, {0.229, 0.224, 0.225});
  return t;
}

double run_tp(const std::string& root, int threads, double seconds, std::int64_t size, bool normalized) {
  auto flow = tp::data::image_folder(root) | tp::data::shuffle(1) | tp::data::decode_images(augment(size, normalized), threads, 7) |
              tp::data::batch(64);
  std::int64_t images = 0;
  std::optional<clock_type::time_point> start;
  std::optional<cpu_meter> cpu;
  for (;;) {  // passes
    for (auto&& b : flow) {
      if (!start) {
        start = clock_type::now();
        cpu.emplace();
        continue;
      }
      images += b.data.size(0);
      if (seconds_since(*start) >= seconds) return cpu->report(double(images)) / seconds_since(*start);
    }
  }
}

double run_inline(const std::string& root, double seconds, std::int64_t size, bool normalized) {
  using files = decltype(tp::data::image_folder(root) | tp::data::shuffle(1));
  tp::data::detail::seeded_chunks<files> chunks(tp::data::image_folder(root) | tp::data::shuffle(1), 7);
  chunks.set_slab_size(64);  // as batch(64) sets it: chunks of whole batches, into pooled buffers
  tp::data::detail::decode_worker<tp::data::transforms> worker{augment(size, normalized)};
  double best = 0;
  const auto start = clock_type::now();
  for (std::uint64_t pass = 0; pass < 2 || seconds_since(start) < seconds; ++pass) {
    chunks.set_pass(pass);
    std::int64_t images = 0;
    const auto t0 = clock_type::now();
    for (auto it = chunks.begin(); !(it == ranges::default_sentinel); ++it)
      for (const auto& r : worker(*it)) {
        if (r.error) std::rethrow_exception(r.error);  // as the pipeline would: a bad file ends the run
        images += r.decoded();
      }
    best = std::max(best, double(images) / seconds_since(t0));
  }
  return best;
}

double run_decode(const std::string& root, int threads, double seconds) {
  std::vector<std::string> paths;
  for (const auto& f : tp::data::image_folder(root)) paths.push_back(f.path);
  std::atomic<std::int64_t> images = 0;
  std::atomic<bool> started = false, stop = false;
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t)
    workers.emplace_back([&, t] {
      jpeg_decompress_struct info;
      jpeg_error_mgr errors;
      info.err = jpeg_std_error(&errors);  // the files are whole: an error ends the program
      jpeg_create_decompress(&info);
      std::vector<unsigned char> pixels;
      for (std::size_t i = std::size_t(t); !stop; i = (i + std::size_t(threads)) % paths.size()) {
        const auto bytes = tp::data::read_file(paths[i]);
        jpeg_mem_src(&info, bytes.data(), static_cast<unsigned long>(bytes.size()));
        jpeg_read_header(&info, TRUE);
        info.out_color_space = JCS_RGB;
        jpeg_start_decompress(&info);
        const std::size_t row = std::size_t(info.output_width) * 3;
        pixels.resize(row * info.output_height);
        while (info.output_scanline < info.output_height) {
          JSAMPROW rows[16];
          for (unsigned k = 0; k < 16; ++k) rows[k] = pixels.data() + row * std::min(info.output_scanline + k, info.output_height - 1);
          jpeg_read_scanlines(&info, rows, std::min(16u, info.output_height - info.output_scanline));
        }
        jpeg_finish_decompress(&info);
        if (started) ++images;
      }
      jpeg_destroy_decompress(&info);
    });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // as tp's first batch: warm
  started = true;
  const auto start = clock_type::now();
  const cpu_meter cpu;
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  const double n = double(images.load()), elapsed = seconds_since(start);
  stop = true;
  for (auto& w : workers) w.join();
  return cpu.report(n) / elapsed;
}

// Per image, in this thread, on 256 files held in memory: the transforms (normalized
// floats and uint8) and the full decode, each the best of passes over all of them for SECONDS in
// all. The least noisy measure on a shared machine: a pass that another tenant slowed is not
// the best, and no thread, queue or file read takes part.
void run_overhead(const std::string& root, double seconds, std::int64_t size) {
  // Files spread evenly over the listing: a class's files differ in how dear they are to decode (at
  // 256 x 256, the first 256, all T-shirts, took 156-159 us each to decode, these 141-150).
  std::vector<std::pair<std::string, std::vector<std::uint8_t>>> files;
  const auto listing = tp::data::image_folder(root);
  const std::size_t n = std::min<std::size_t>(listing.size(), 256);
  for (std::size_t j = 0; j < n; ++j) {
    const auto& f = listing[j * listing.size() / n];
    files.emplace_back(f.path, tp::data::read_file(f.path));
  }
  const auto floats = augment(size), bytes = augment(size, false);
  std::vector<std::uint8_t> pixels;
  // The transforms write into the slots of a ring of four batches of 64, as decode_images writes
  // into the slots of the pooled batches in flight: no tensor is allocated (and page-faulted) per
  // image, and a slot is not in the cache when written (one reused slot would be, in L1).
  constexpr std::size_t ring_slots = 4 * 64;
  std::vector<float> ring;
  std::size_t slot_floats = 0, next_slot = 0;
  const tp::data::transforms::output into = [&](torch::IntArrayRef sizes, torch::ScalarType type) -> void* {
    const auto n = std::size_t(c10::multiply_integers(sizes)) * c10::elementSize(type);
    const std::size_t floats = (n + 63) / 64 * 16;  // slots 64-byte aligned, as a batch's are when rows are
    if (floats > slot_floats) ring.assign(ring_slots * floats + 16, 0.0f), slot_floats = floats;
    auto* base = reinterpret_cast<float*>((reinterpret_cast<std::uintptr_t>(ring.data()) + 63) / 64 * 64);
    return base + (next_slot++ % ring_slots) * slot_floats;
  };
  double best[3] = {1e300, 1e300, 1e300};
  const auto start = clock_type::now();
  for (std::uint64_t pass = 0; pass < 3 || seconds_since(start) < seconds; ++pass)
    for (int k = 0; k < 3; ++k) {
      const auto t0 = clock_type::now();
      for (std::size_t i = 0; i < files.size(); ++i) {
        const auto& [path, data] = files[i];
        if (k == 0) floats(data, path, pass * files.size() + i, into);
        else if (k == 1) bytes(data, path, pass * files.size() + i, into);
        else tp::data::detail::decode_hwc(data, path, tp::data::color::rgb, {}, pixels);
      }
      best[k] = std::min(best[k], seconds_since(t0) / double(files.size()) * 1e6);
    }
  std::printf("us_per_image %.3f uint8_us %.3f decode_us %.3f\n", best[0], best[1], best[2]);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s tp|tp_uint8|inline|inline_float|decode|overhead ROOT THREADS SECONDS SIZE\n", argv[0]);
    return 2;
  }
  const std::string mode = argv[1], root = argv[2];
  const int threads = std::atoi(argv[3]);
  const double seconds = std::atof(argv[4]);
  const std::int64_t size = std::atoll(argv[5]);
  torch::set_num_threads(1);  // collation in the consuming thread, as DataLoader's workers do it
  if (mode == "tp") std::printf("images_per_s %.1f\n", run_tp(root, threads, seconds, size, true));
  else if (mode == "tp_uint8") std::printf("images_per_s %.1f\n", run_tp(root, threads, seconds, size, false));
  else if (mode == "inline") std::printf("images_per_s %.1f\n", run_inline(root, seconds, size, false));
  else if (mode == "inline_float") std::printf("images_per_s %.1f\n", run_inline(root, seconds, size, true));
  else if (mode == "decode") std::printf("images_per_s %.1f\n", run_decode(root, threads, seconds));
  else if (mode == "overhead") run_overhead(root, seconds, size);
  else return std::fprintf(stderr, "unknown mode %s\n", mode.c_str()), 2;
  return 0;
}
