#pragma once
// tar_shards(files, rank, world_size, shuffle_seed): tar shards in the WebDataset layout, read
// sequentially through libarchive, as a stream of image_file (image/image_file.hpp):
//
//   auto flow = tp::data::tar_shards(tp::data::tar_files_in("/data", "train-"), env.rank, env.world_size,
//                                    /*shuffle_seed=*/5)
//             | tp::data::shuffle_buffer(1000, 42)          // the stream's own shuffle
//             | tp::data::decode_images(augment, 4, 7) | tp::data::batch(64);
//
// A shard holds files KEY.EXT; consecutive files with the same KEY (up to the first dot of the
// name) are one sample: its image is the .jpg, .jpeg or .png member, its label the .cls member
// (decimal text); other members are passed over. A shard's records are never all in memory:
// each pass reads them front to back (what makes tar shards fast on disks and object stores).
//
// - The shards are scanned at construction, headers and labels only, so that the source knows
//   its sample count (steps_per_epoch defaults to one pass) and each record's id: its index
//   across all shards, in the order given. Every bad shard is found there, before training: a
//   missing file, a shard cut short (naming the member), a sample without an image or a label.
// - Ranks: rank r of W reads whole shard files r, r + W, ... Every rank yields the same number
//   of samples per pass, the smallest rank's total, so that no rank runs short (the rest of a
//   bigger rank's samples are left out of that pass). With shuffle_seed, each pass reads a
//   rank's shards in a new order (a seeded permutation per pass, as WebDataset's shardshuffle),
//   so that a different tail is left out each pass and shuffle_buffer mixes more widely.
// - Position: the view is the dataflow's shard (data/pass_position.hpp). A pass's global order
//   interleaves the ranks (datapoint g is rank g % W's sample g / W), so a position saved after
//   each rank read k samples starts the next pass at sample k of every rank, skipping headers
//   without reading images. The ranks' samples depend on W, so a position taken part-way
//   through a pass holds only on W ranks: check_movable refuses another W with a clear message
//   (at a pass's start or end any W goes on). Views that count passes above it (shuffle_buffer)
//   make the input replay the pass instead, on W ranks only.
#include <archive.h>
#include <archive_entry.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <iterator>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <range/v3/iterator/default_sentinel.hpp>
#include <range/v3/range/concepts.hpp>

#include <tp/data/image/bad_file.hpp>
#include <tp/data/image/image_file.hpp>
#include <tp/data/random.hpp>
#include <tp/data/state.hpp>

namespace tp::data {

// The .tar files in `folder` whose names start with `prefix`, sorted: the shards a writer
// numbered train-000000.tar, train-000001.tar, ...
inline std::vector<std::string> tar_files_in(const std::string& folder, const std::string& prefix = "") {
  std::vector<std::string> files;
  std::error_code error;
  for (std::filesystem::directory_iterator it(folder, error), end; !error && it != end; it.increment(error)) {
    const auto name = it->path().filename().string();
    if (it->path().extension() == ".tar" && name.starts_with(prefix)) files.push_back(it->path().string());
  }
  if (error) throw bad_file(folder, "cannot be listed: " + error.message());
  std::sort(files.begin(), files.end());
  return files;
}

namespace detail {

struct tar_sample {
  std::string key;
  std::int64_t label = -1;
  int members = 0;  // keyed members, what reading it passes over
};
struct tar_shard {
  std::string path;
  std::vector<tar_sample> samples;
  std::int64_t first_id = 0;
};

inline bool image_member(const std::string& ext) { return ext == "jpg" || ext == "jpeg" || ext == "png"; }

// One open shard, member by member. Every failure is a bad_file naming the shard.
class tar_reader {
 public:
  explicit tar_reader(std::string path) : path_(std::move(path)), handle_(archive_read_new()) {
    if (!handle_) throw std::bad_alloc();
    archive_read_support_format_tar(handle_.get());
    archive_read_support_filter_all(handle_.get());  // train-000000.tar.gz reads too
    std::error_code error;
    if (!std::filesystem::is_regular_file(path_, error)) fail("missing; no such shard file");
    if (std::filesystem::file_size(path_, error) == 0) fail("is empty; the shard was never written");
    if (archive_read_open_filename(handle_.get(), path_.c_str(), 1 << 16) != ARCHIVE_OK) fail("is not a tar file, or cannot be read");
  }
  tar_reader(const tar_reader&) = delete;
  tar_reader& operator=(const tar_reader&) = delete;

  // The next regular file whose name is KEY.EXT (WebDataset's rule: the key ends at the first
  // dot of the file's name); false at the shard's end.
  bool next(std::string& key, std::string& ext) {
    for (;;) {
      archive_entry* entry = nullptr;
      const int status = archive_read_next_header(handle_.get(), &entry);
      if (status == ARCHIVE_EOF) {
        // libarchive ends quietly where a member ends and so does the file; a whole tar ends
        // with zero blocks (its end-of-archive marker), which it reads past.
        if (archive_filter_bytes(handle_.get(), 0) <= archive_read_header_position(handle_.get()))
          fail(last_.empty() ? "holds no member and no end-of-archive marker" : "cut short after member " + last_ + " (no end-of-archive marker follows)");
        return false;
      }
      if (status != ARCHIVE_OK && status != ARCHIVE_WARN) fail(last_.empty() ? "is not a tar file" : "cut short after member " + last_);
      if (archive_entry_filetype(entry) != AE_IFREG) continue;
      const char* name = archive_entry_pathname(entry);
      last_ = name ? name : "";
      size_ = archive_entry_size(entry);
      const auto slash = last_.rfind('/');
      const auto dot = last_.find('.', slash == std::string::npos ? 0 : slash + 1);
      if (dot == std::string::npos) continue;
      key = last_.substr(0, dot);
      ext = last_.substr(dot + 1);
      std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      return true;
    }
  }
  // The whole current member (else libarchive passes over it at the next header).
  std::vector<std::uint8_t> data() {
    std::vector<std::uint8_t> bytes(static_cast<std::size_t>(std::max<std::int64_t>(size_, 0)));
    std::size_t got = 0;
    while (got < bytes.size()) {
      const auto n = archive_read_data(handle_.get(), bytes.data() + got, bytes.size() - got);
      if (n <= 0) fail("cut short in member " + last_);
      got += static_cast<std::size_t>(n);
    }
    return bytes;
  }
  [[noreturn]] void fail(const std::string& what) const {
    const char* why = handle_ ? archive_error_string(handle_.get()) : nullptr;
    throw bad_file(path_, what + (why ? std::string(" (libarchive: ") + why + ")" : std::string()) +
                              (what.starts_with("cut short") ? "; the shard was not fully written or copied" : ""));
  }
  const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
  // Freed by its owner, also when the constructor throws (a bad shard): fuzzing found the leak.
  struct archive_free {
    void operator()(archive* a) const noexcept { archive_read_free(a); }
  };
  std::unique_ptr<archive, archive_free> handle_;
  std::string last_;
  std::int64_t size_ = 0;
};

// Headers and labels of one shard; every sample must have an image and a label.
inline tar_shard scan_tar(const std::string& path) {
  tar_reader reader(path);
  tar_shard shard{path, {}, 0};
  std::vector<bool> has_image;
  std::string key, ext;
  while (reader.next(key, ext)) {
    if (shard.samples.empty() || shard.samples.back().key != key) {
      shard.samples.push_back({key, -1, 0});
      has_image.push_back(false);
    }
    auto& sample = shard.samples.back();
    ++sample.members;
    if (image_member(ext)) has_image.back() = true;
    if (ext != "cls") continue;
    const auto text = reader.data();
    const auto* first = reinterpret_cast<const char*>(text.data());
    const auto* last = first + text.size();
    while (last != first && (last[-1] == '\n' || last[-1] == '\r' || last[-1] == ' ')) --last;
    const auto [end, error] = std::from_chars(first, last, sample.label);
    if (error != std::errc() || end != last || sample.label < 0 || first == last)
      throw bad_file(path + ":" + key, "the label member " + key + ".cls is not a class index (decimal text >= 0)");
  }
  for (std::size_t i = 0; i < shard.samples.size(); ++i) {
    const auto& s = shard.samples[i];
    if (!has_image[i]) throw bad_file(path + ":" + s.key, "sample without an image (no " + s.key + ".jpg, .jpeg or .png member)");
    if (s.label < 0) throw bad_file(path + ":" + s.key, "sample without a label (no " + s.key + ".cls member)");
  }
  return shard;
}

// One rank's read through its shards in one pass.
struct tar_cursor {
  std::shared_ptr<const std::vector<tar_shard>> shards;
  std::vector<std::size_t> order;  // this rank's shards, in this pass's order
  std::size_t file = 0, sample = 0;  // the next sample: order[file]'s sample-th
  std::int64_t left = 0;             // samples still to yield this pass
  std::unique_ptr<tar_reader> reader;
  image_file current;
  bool done = false;

  // Passes over n samples: whole shards by their counts, then headers only.
  void skip(std::int64_t n) {
    for (; n > 0 && file < order.size(); ++file) {
      const auto count = static_cast<std::int64_t>((*shards)[order[file]].samples.size());
      if (n < count) {
        for (; n > 0; --n) read(false);
        return;
      }
      n -= count;
    }
  }
  void advance() {
    if (left-- <= 0) {
      done = true;
      return;
    }
    while (sample == (*shards)[order[file]].samples.size()) next_file();
    read(true);
  }

 private:
  void next_file() {
    reader.reset();
    sample = 0;
    ++file;
  }
  void read(bool keep) {
    const auto& shard = (*shards)[order[file]];
    if (!reader) reader = std::make_unique<tar_reader>(shard.path);
    const auto& expected = shard.samples[sample];
    image_file out{shard.path + ":" + expected.key, expected.label, shard.first_id + static_cast<std::int64_t>(sample), {}};
    std::string key, ext;
    for (int m = 0; m < expected.members; ++m) {
      if (!reader->next(key, ext)) reader->fail("ended before sample " + expected.key + "; it changed since it was scanned");
      if (key != expected.key) reader->fail("holds " + key + " where " + expected.key + " was; it changed since it was scanned");
      if (keep && image_member(ext) && out.bytes.empty()) out.bytes = reader->data();
    }
    ++sample;
    if (keep) current = std::move(out);
  }
};

}  // namespace detail

class tar_shards : public ranges::view_base {
 public:

  class iterator {
   public:
    using value_type = image_file;
    using difference_type = std::ptrdiff_t;
    using iterator_concept = std::input_iterator_tag;

    iterator() = default;
    explicit iterator(std::shared_ptr<detail::tar_cursor> cursor) : cursor_(std::move(cursor)) { cursor_->advance(); }
    const image_file& operator*() const { return cursor_->current; }
    iterator& operator++() {
      cursor_->advance();
      return *this;
    }
    void operator++(int) { cursor_->advance(); }
    friend bool operator==(const iterator& it, ranges::default_sentinel_t) { return it.cursor_->done; }

   private:
    std::shared_ptr<detail::tar_cursor> cursor_;  // shared: copies of an input iterator read on together
  };

  tar_shards() = default;
  // shuffle_seed: each pass reads this rank's shards in a new order.
  explicit tar_shards(const std::vector<std::string>& files, int rank = 0, int world_size = 1,
                      std::optional<std::uint64_t> shuffle_seed = std::nullopt)
      : rank_(rank), world_size_(world_size), seed_(shuffle_seed) {
    if (files.empty()) throw std::invalid_argument("tp::data::tar_shards: no shard files given");
    if (world_size < 1 || rank < 0 || rank >= world_size)
      throw std::invalid_argument("tp::data::tar_shards: rank " + std::to_string(rank) + " is not in [0, world_size " +
                                  std::to_string(world_size) + ")");
    if (static_cast<int>(files.size()) < world_size)
      throw std::invalid_argument("tp::data::tar_shards: " + std::to_string(files.size()) + " shard files for " + std::to_string(world_size) +
                                  " ranks; every rank reads whole shards, so write at least one shard per rank");
    std::vector<detail::tar_shard> shards;
    std::int64_t id = 0;
    for (const auto& file : files) {
      shards.push_back(detail::scan_tar(file));
      shards.back().first_id = id;
      id += static_cast<std::int64_t>(shards.back().samples.size());
    }
    shards_ = std::make_shared<const std::vector<detail::tar_shard>>(std::move(shards));
    share_ = share_on(world_size_);
    if (share_ == 0)
      throw std::invalid_argument("tp::data::tar_shards: rank " + std::to_string(smallest_rank(world_size_)) + " of " +
                                  std::to_string(world_size_) + " gets shards with no sample; every rank yields as many as the smallest share");
  }

  // Starts the next pass: this rank's shards, in this pass's order, from where it starts.
  iterator begin() {
    auto cursor = std::make_shared<detail::tar_cursor>();
    cursor->shards = shards_;
    for (std::size_t f = static_cast<std::size_t>(rank_); f < shards_->size(); f += static_cast<std::size_t>(world_size_))
      cursor->order.push_back(f);
    if (seed_) {
      const auto p = detail::permutation(static_cast<std::int64_t>(cursor->order.size()), *seed_, passes_);
      std::vector<std::size_t> shuffled;
      for (auto i : p) shuffled.push_back(cursor->order[static_cast<std::size_t>(i)]);
      cursor->order = std::move(shuffled);
    }
    ++passes_;
    pass_start_ = std::exchange(next_pass_start_, 0);
    const auto skip = std::min(pass_start_ / world_size_, share_);
    cursor->left = share_ - skip;
    cursor->skip(skip);
    return iterator(std::move(cursor));
  }
  ranges::default_sentinel_t end() const { return {}; }

  // Samples this rank yields per pass (every rank alike), and in all the shards.
  std::optional<std::int64_t> items_per_pass() const { return share_; }
  std::int64_t total() const {
    return shards_->empty() ? 0 : shards_->back().first_id + static_cast<std::int64_t>(shards_->back().samples.size());
  }
  int rank() const noexcept { return rank_; }
  int world_size() const noexcept { return world_size_; }
  std::uint64_t passes() const noexcept { return passes_; }
  void set_passes(std::uint64_t passes) noexcept { passes_ = passes; }

  // The shard view's part in data/pass_position.hpp. The next pass starts `datapoints` into the
  // global order: every rank past its first datapoints / W samples.
  std::int64_t pass_start() const noexcept { return pass_start_; }
  void start_next_pass_at(std::int64_t datapoints) {
    if (datapoints < 0 || datapoints % world_size_ != 0)
      throw std::invalid_argument("tp::data::tar_shards: a pass cannot start at datapoint " + std::to_string(datapoints) + " on " +
                                  std::to_string(world_size_) + " ranks (each rank reads whole shards; the position is from another layout)");
    next_pass_start_ = datapoints;
  }
  // Whether a position saved on where.world_size ranks can be followed here; throws if not.
  void check_movable(const position& where) const {
    if (where.world_size == world_size_) return;
    if (where.datapoints == 0 || where.datapoints >= share_on(where.world_size) * where.world_size) return;  // a pass's start or end
    throw std::invalid_argument(
        "tp::data::tar_shards: the position was saved on " + std::to_string(where.world_size) + " ranks, " +
        std::to_string(where.datapoints) + " datapoints into a pass; each rank reads its own shard files, so what was read there is "
        "not a place in this layout's order on " + std::to_string(world_size_) + " ranks. Resume on " + std::to_string(where.world_size) +
        " ranks, or from a checkpoint taken at the end of a pass");
  }
  // Goes on at `where` (check_movable first): within a pass on the same number of ranks; from
  // another, a position at a pass's end makes the next pass an empty one (the one after starts anew).
  void go_to(const position& where) {
    if (where.world_size == world_size_) return start_next_pass_at(where.datapoints);
    next_pass_start_ = where.datapoints <= 0 ? 0 : share_ * world_size_;
  }

 private:
  std::int64_t rank_total(int rank, int world) const {
    std::int64_t n = 0;
    for (std::size_t f = static_cast<std::size_t>(rank); f < shards_->size(); f += static_cast<std::size_t>(world))
      n += static_cast<std::int64_t>((*shards_)[f].samples.size());
    return n;
  }
  int smallest_rank(int world) const {
    int smallest = 0;
    for (int r = 1; r < world; ++r)
      if (rank_total(r, world) < rank_total(smallest, world)) smallest = r;
    return smallest;
  }
  std::int64_t share_on(int world) const { return static_cast<int>(shards_->size()) < world ? 0 : rank_total(smallest_rank(world), world); }

  std::shared_ptr<const std::vector<detail::tar_shard>> shards_ = std::make_shared<const std::vector<detail::tar_shard>>();
  int rank_ = 0, world_size_ = 1;
  std::optional<std::uint64_t> seed_;
  std::uint64_t passes_ = 0;
  std::int64_t share_ = 0, next_pass_start_ = 0, pass_start_ = 0;
};

}  // namespace tp::data
