#pragma once
// decode_images(f, threads, seed, bad_files): image_files (image/image_file.hpp) to
// torch::data::Example<>{image, label}, decoded and augmented in `threads` worker threads, in the
// source's order:
//
//   auto augment = tp::data::transforms().random_resized_crop(224).random_horizontal_flip(0.5);
//   auto flow = tp::data::image_folder(root) | tp::data::shuffle(42) | tp::data::shard(rank, world)
//             | tp::data::decode_images(augment, 4, /*seed=*/7)           // + bad_files::skip
//             | tp::data::batch(64);
//
// f is any callable f(std::span<const std::uint8_t> bytes, const std::string& path,
// std::uint64_t seed) -> torch::Tensor (transforms is one). The label is an int64 scalar
// tensor (a batch of them is what cross_entropy takes).
//
// - Seeds: example k of pass p gets example_seed(seed, p, file.id). It depends on the example
//   and the pass only, not on threads, timing, rank or where a pass was resumed, so a resumed run
//   makes the same crops. The view counts its passes (data/state.hpp), so that the dataflow's
//   saved state brings the pass number back.
// - Batches: with batch(n) right below it (and f a transforms, or any f that also takes an
//   `into`: f(bytes, path, seed, into) writes to into(sizes, type)'s memory and returns no
//   tensor, or returns its own when into gives nullptr), each n consecutive examples are decoded
//   into one buffer and their labels into another, and a worker decodes whole batches: one whose
//   files all land there reaches batch(n) as it is, with no tensor per image. The buffers are
//   reused once their batch is freed. A skipped file shifts the batches off their buffers: those
//   are then stacked as usual.
// - Bytes: a file whose `bytes` are empty is read in the worker thread (image_folder's); a tar
//   shard's record arrives read. Workers take files in chunks of 32 consecutive ones, or of
//   whole batches (chunk_files): a hand-off per small image cost more than its decoding.
// - A bad file (bad_file: missing, truncated, not an image) reaches the consumer with its
//   message, at its place in the order (the files before it come out first), unless bad_files::skip:
//   then it is left out and counted, and at the end of a pass one line to stderr says how many
//   were skipped and why the first one was; skipped() counts them over all passes. A skip shifts
//   the items after it, so such a pass has no global order to carry to another layout (a resume
//   replays it, on the same number of ranks): keeps_order() says so to data/pass_position.hpp.
//   Other exceptions (a transform's own bug) always go through.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <functional>
#include <iostream>
#include <iterator>
#include <memory>
#include <new>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <range/v3/iterator/default_sentinel.hpp>
#include <range/v3/range/access.hpp>
#include <range/v3/range/concepts.hpp>
#include <range/v3/range/traits.hpp>
#include <torch/data/example.h>
#include <torch/types.h>

#include <tp/batch.hpp>
#include <tp/data/batch.hpp>
#include <tp/data/image/bad_file.hpp>
#include <tp/data/image/decode.hpp>
#include <tp/data/image/example_random.hpp>
#include <tp/data/image/image_file.hpp>
#include <tp/data/image/transforms.hpp>
#include <tp/data/length.hpp>
#include <tp/data/parallel_map.hpp>

namespace tp::data {

// What decode_images does with a file it cannot decode (bad_file): hand the error to the consumer,
// or leave the file out and count it.
enum class bad_files { fail, skip };

namespace detail {

// Memory for batches, kept for the next ones when a batch is freed: a batch of 64 float
// 224 x 224 x 3 images is 38 MiB, which the C library would otherwise give back to the kernel
// and fault in again page by page for the next batch (a third of the time at that size). Pinned
// (page-locked, for a CUDA tower: pin_memory) buffers come from LibTorch's pinned allocator and go
// back to it: it caches them too, and reuses one only once the copies to a GPU recorded on it
// have finished, which this pool could not tell.
//
// It keeps as many free buffers as were ever in use at once: the batches in the workers, in a
// queue and in the step, with their labels. At a pass's end all of them come back before the
// next pass takes any; a fixed 8 gave most back to the kernel there, and with 8 threads some in
// every pass's middle too (about 30 page faults per 224 x 224 float image). When full, the
// longest free goes, so that sizes no longer asked for (a transform without a fixed size) age out.
class buffer_pool : public std::enable_shared_from_this<buffer_pool> {
 public:
  explicit buffer_pool(bool pinned = false) : pinned_(pinned) {
    if (pinned) tp::detail::check_pinned_memory_available("tp::data::decode_images::pin_memory");
  }
  ~buffer_pool() {
    for (auto& b : free_) release(b);
  }
  bool pinned() const noexcept { return pinned_; }

  // A CPU tensor of these sizes and type, in memory made to be batched in place (batch.hpp's
  // batch_memory), which comes back here when the last tensor using it is freed.
  torch::Tensor take(torch::IntArrayRef sizes, torch::ScalarType type) {
    std::int64_t count = 1;
    for (auto s : sizes) count *= s;
    const std::size_t bytes = (std::size_t(count) * c10::elementSize(type) + 63) / 64 * 64;
    std::optional<buffer> found;
    {
      std::lock_guard lock(mutex_);
      // Room for every buffer in use to come back: give_back runs in a tensor's deleter, where
      // an allocation that throws would end the program.
      free_.reserve(std::max(most_in_use_, in_use_ + 1) + 1);
      most_in_use_ = std::max(most_in_use_, ++in_use_);
      for (auto it = free_.rbegin(); it != free_.rend(); ++it)  // the last freed first: still in the caches
        if (it->bytes == bytes) {
          found = std::move(*it);
          free_.erase(std::next(it).base());
          break;
        }
    }
    pooled* owner = nullptr;
    try {
      if (!found) found = allocate(bytes);
      owner = new pooled(shared_from_this(), std::move(*found));
    } catch (...) {  // out of memory: the count and the buffer as they were
      if (found) release(*found);
      std::lock_guard lock(mutex_);
      --in_use_;
      throw;
    }
    c10::DataPtr memory(owner->memory.data, owner, &free_batch_memory, c10::Device(c10::kCPU));  // owns owner from here
    c10::Storage storage(c10::Storage::use_byte_size_t(), bytes, std::move(memory), nullptr, false);
    return torch::empty({0}, torch::TensorOptions(type)).set_(storage, 0, sizes);
  }
  // Buffers held for the next take. They are never more than were in use at once, and stay
  // until the pool goes (with the dataflow that made it), as a caching allocator's do.
  std::size_t free_buffers() {
    std::lock_guard lock(mutex_);
    return free_.size();
  }

 private:
  struct buffer {
    void* data = nullptr;
    std::size_t bytes = 0;
    torch::Tensor pinned;  // the pinned allocation that holds `data`, if pinned
  };
  struct pooled : batch_memory {
    pooled(std::shared_ptr<buffer_pool> p, buffer b) : pool(std::move(p)), memory(std::move(b)) {}
    ~pooled() override { pool->give_back(std::move(memory)); }
    std::shared_ptr<buffer_pool> pool;
    buffer memory;
  };

  buffer allocate(std::size_t bytes) const {
    if (pinned_) {
      auto block = torch::empty({static_cast<std::int64_t>(bytes)}, torch::TensorOptions(torch::kByte).pinned_memory(true));
      return {block.data_ptr(), bytes, block};
    }
    void* data = std::aligned_alloc(64, bytes);
    if (!data) throw std::bad_alloc();
    return {data, bytes, {}};
  }
  static void release(buffer& b) {
    if (!b.pinned.defined()) std::free(b.data);
    b.pinned.reset();
  }
  void give_back(buffer b) {
    {
      std::lock_guard lock(mutex_);
      --in_use_;
      if (!b.pinned.defined()) {  // else to LibTorch's pinned allocator (see the top)
        free_.push_back(std::move(b));
        if (free_.size() <= most_in_use_) return;
        b = std::move(free_.front());
        free_.erase(free_.begin());
      }
    }
    release(b);  // outside the lock: giving memory back to the kernel takes a while
  }

  bool pinned_;
  std::mutex mutex_;
  std::vector<buffer> free_;  // the longest free first
  std::size_t in_use_ = 0, most_in_use_ = 0;
};

// n examples that a batch(n) downstream will take together, decoded into one buffer [n, ...]
// and their labels into one [n]: a batch whose files all land there is handed to batch(n) whole
// (no tensor per image; decoded_view::iterator::whole_batch), and the examples of any other
// (a skipped file, the short last one) are views of it, which collate_fn's stack finds adjacent
// (batch.hpp). The buffer is made by the first image to be ready, with its sizes and type; an
// image of other sizes or type (a transform that does not crop to one size) gets a tensor of its
// own. A slot is a pointer, not a view: a LibTorch view per image cost as much as resampling it.
class batch_slab {
 public:
  batch_slab(std::int64_t slots, std::shared_ptr<buffer_pool> pool) : slots_(slots), pool_(std::move(pool)) {}
  std::int64_t slots() const noexcept { return slots_; }

  // Memory for the image in slot i, if it has the buffer's sizes and type; nullptr otherwise.
  void* slot(std::int64_t i, torch::IntArrayRef sizes, torch::ScalarType type) {
    std::lock_guard lock(mutex_);
    if (!images_.defined()) {
      std::vector<std::int64_t> all{slots_};
      all.insert(all.end(), sizes.begin(), sizes.end());
      images_ = pool_->take(all, type);
      slot_bytes_ = images_.nbytes() / static_cast<std::size_t>(slots_);
    }
    if (images_.scalar_type() != type || images_.sizes().slice(1) != sizes) return nullptr;
    return static_cast<char*>(images_.data_ptr()) + slot_bytes_ * static_cast<std::size_t>(i);
  }
  // Slot i's label (each slot is written by one worker, and read after parallel_map hands its
  // chunk over, which orders the two).
  void set_label(std::int64_t i, std::int64_t label) {
    std::call_once(labels_made_, [this] { labels_ = pool_->take({slots_}, torch::kLong); });
    labels_.data_ptr<std::int64_t>()[i] = label;
  }

  // Every slot as a batch, and slot i as an example (after slot() and set_label()).
  torch::data::Example<> batch() const { return {images_, labels_}; }
  torch::data::Example<> example(std::int64_t i) const { return {images_.select(0, i), labels_.select(0, i)}; }

 private:
  std::mutex mutex_;
  std::once_flag labels_made_;
  std::int64_t slots_;
  std::shared_ptr<buffer_pool> pool_;
  torch::Tensor images_, labels_;
  std::size_t slot_bytes_ = 0;
};

struct decode_job {
  image_file file;
  std::uint64_t seed = 0;
  std::shared_ptr<batch_slab> slab;  // with batch_in_place
  std::int64_t slot = 0;
};
// What became of one file: an example (of its own, or in a slab's slot), or why it was skipped,
// or the exception to rethrow at its place in the order. The first file of a slab whose files
// all landed in it carries the slab's whole batch.
struct decode_result {
  std::optional<torch::data::Example<>> example;
  std::shared_ptr<batch_slab> slab;  // the example is slot `slot` of it (made when first asked for)
  std::int64_t slot = 0;
  std::optional<torch::data::Example<>> whole_batch;
  std::string skipped;
  std::exception_ptr error;
  bool decoded() const noexcept { return example || slab; }
};

// Files go to the workers in chunks of consecutive ones: handing a worker one 28 x 28 image and
// taking it back (a lock, a wake-up, a context switch each way) cost more than decoding it. 32
// rather than 8: 6% more 28 x 28 images a second with one thread, about 10% with two (the
// consumer wakes a quarter as often); no change at 256 x 256. Batched in place, a chunk is
// whole batches (at least 32 files), so that one worker fills each batch and can hand it over
// whole.
inline constexpr std::size_t files_per_chunk = 32;
inline std::size_t chunk_files(std::int64_t batch) {
  if (batch <= 0) return files_per_chunk;
  const auto n = static_cast<std::size_t>(batch);
  return (files_per_chunk + n - 1) / n * n;
}
// Chunks in the workers at once: two per thread, but no more than one per thread and one
// ready once chunks are large (whole batches of big images), so that memory stays bounded.
inline std::size_t chunks_in_flight(int threads, std::size_t files) {
  const auto t = static_cast<std::size_t>(threads);
  return std::max(t + 1, 2 * t * files_per_chunk / files);
}

// The source's files in chunks, each file with its seed for the pass that begin() starts.
template <class Source>
class seeded_chunks : public ranges::view_base {
 public:
  class iterator {
   public:
    using value_type = std::vector<decode_job>;
    using difference_type = std::ptrdiff_t;
    using iterator_concept = std::input_iterator_tag;

    iterator() = default;
    iterator(ranges::iterator_t<Source> it, ranges::sentinel_t<Source> end, std::uint64_t seed, std::uint64_t pass,
             std::int64_t slab_size, std::shared_ptr<buffer_pool> pool)
        : it_(std::move(it)), end_(std::move(end)), seed_(seed), pass_(pass), slab_size_(slab_size), pool_(std::move(pool)) {
      fill();
    }
    // The chunk is moved out: only parallel_map reads this view, once per datapoint, then
    // advances (a second read would see an empty chunk).
    value_type operator*() const { return std::move(chunk_); }
    iterator& operator++() {
      fill();
      return *this;
    }
    void operator++(int) { fill(); }
    friend bool operator==(const iterator& i, ranges::default_sentinel_t) { return i.chunk_.empty(); }

   private:
    void fill() {
      const auto files = chunk_files(slab_size_);
      chunk_.clear();
      chunk_.reserve(files);  // operator* moved the last chunk out, its memory with it
      for (; chunk_.size() < files && !(it_ == end_); ++it_) {
        image_file file = *it_;
        const auto id = static_cast<std::uint64_t>(file.id);
        decode_job job{std::move(file), example_seed(seed_, pass_, id), nullptr, 0};
        if (slab_size_ > 0) {  // a new buffer every slab_size_ files, from the first one of this begin()
          if (next_slot_ == 0) slab_ = std::make_shared<batch_slab>(slab_size_, pool_);
          job.slab = slab_;
          job.slot = next_slot_;
          next_slot_ = (next_slot_ + 1) % slab_size_;
        }
        chunk_.push_back(std::move(job));
      }
    }

    ranges::iterator_t<Source> it_{};
    ranges::sentinel_t<Source> end_{};
    std::uint64_t seed_ = 0, pass_ = 0;
    std::int64_t slab_size_ = 0, next_slot_ = 0;
    std::shared_ptr<buffer_pool> pool_;
    std::shared_ptr<batch_slab> slab_;
    mutable std::vector<decode_job> chunk_;
  };

  seeded_chunks() = default;
  seeded_chunks(Source source, std::uint64_t seed) : source_(std::move(source)), seed_(seed) {}
  iterator begin() { return iterator(ranges::begin(source_), ranges::end(source_), seed_, pass_, slab_size_, pool_); }
  ranges::default_sentinel_t end() const { return {}; }
  Source& base() noexcept { return source_; }
  void set_pass(std::uint64_t pass) noexcept { pass_ = pass; }
  void set_slab_size(std::int64_t n) {
    slab_size_ = n;
    if (!pool_) pool_ = std::make_shared<buffer_pool>();
  }
  // Batches made in place go to pinned memory from now on (with pin = true).
  void set_pinned(bool pin) {
    if (!pool_ || pool_->pinned() != pin) pool_ = std::make_shared<buffer_pool>(pin);
  }

 private:
  Source source_;
  std::uint64_t seed_ = 0, pass_ = 0;
  std::int64_t slab_size_ = 0;
  std::shared_ptr<buffer_pool> pool_;  // shared by copies: buffers go back to whichever is alive
};

// What each worker thread runs (its own copy of f), on a chunk of files.
template <class F>
struct decode_worker {
  F f;
  bad_files on_bad = bad_files::fail;

  std::vector<decode_result> operator()(std::vector<decode_job> jobs) {
    std::vector<decode_result> results(jobs.size());
    for (std::size_t i = 0; i < jobs.size(); ++i) {
      try {
        decode(jobs[i], results[i]);
      } catch (const bad_file& e) {
        if (on_bad == bad_files::fail) results[i].error = std::current_exception();
        else results[i].skipped = e.what();
      } catch (...) {
        results[i].error = std::current_exception();  // a transform's own bug: always goes through
      }
    }
    // A chunk is whole batches (chunk_files): those whose every file landed in its slot go whole.
    for (std::size_t s = 0; s < jobs.size(); ++s) {
      if (!jobs[s].slab || jobs[s].slot != 0) continue;
      const auto n = static_cast<std::size_t>(jobs[s].slab->slots());
      bool whole = s + n <= jobs.size();
      for (std::size_t k = s; k < s + n && whole; ++k) whole = results[k].slab == jobs[s].slab;
      if (whole) results[s].whole_batch = jobs[s].slab->batch();
    }
    return results;
  }

 private:
  void decode(decode_job& job, decode_result& result) {
    const auto bytes = job.file.bytes.empty() ? read_file(job.file.path) : std::move(job.file.bytes);
    const std::span<const std::uint8_t> view(bytes);
    // into(sizes, type): the memory f may write its image to (returning no tensor then).
    using output = transforms::output;
    torch::Tensor image;
    if constexpr (std::is_invocable_r_v<torch::Tensor, F&, std::span<const std::uint8_t>, const std::string&, std::uint64_t, const output&>) {
      if (job.slab) {
        const output into = [&job](torch::IntArrayRef sizes, torch::ScalarType type) { return job.slab->slot(job.slot, sizes, type); };
        image = f(view, job.file.path, job.seed, into);
        if (!image.defined()) {  // in its slot
          job.slab->set_label(job.slot, job.file.label);
          result.slab = job.slab;
          result.slot = job.slot;
          return;
        }
      }
    }
    if (!image.defined()) image = f(view, job.file.path, job.seed);
    result.example.emplace(std::move(image), torch::scalar_tensor(job.file.label, torch::kLong));
  }
};

}  // namespace detail

// What `files | decode_images(f, ...)` yields: the files' examples {image, label}, decoded in
// worker threads, in the source's order.
template <class Source, class F>
class decoded_view : public ranges::view_base {
  using inner_type = parallel_mapped_view<detail::seeded_chunks<Source>, detail::decode_worker<F>>;

 public:
  class iterator {
   public:
    using value_type = torch::data::Example<>;
    using difference_type = std::ptrdiff_t;
    using iterator_concept = std::input_iterator_tag;

    iterator() = default;
    explicit iterator(decoded_view* owner) : owner_(owner), it_(owner->inner_.begin()) { settle(); }
    const value_type& operator*() const {
      auto& result = chunk_[at_];
      if (!result.example) result.example = result.slab->example(result.slot);
      return *result.example;
    }
    // When the next n examples are a batch decoded whole into one buffer (batch(n) right below,
    // no file skipped or of other sizes), that batch, and this iterator then stands on its last
    // example; nothing otherwise (batch(n) then collates them one by one).
    std::optional<value_type> whole_batch(std::int64_t n) {
      auto& result = chunk_[at_];
      if (!result.whole_batch || result.whole_batch->data.size(0) != n) return std::nullopt;
      at_ += static_cast<std::size_t>(n) - 1;
      return std::exchange(result.whole_batch, std::nullopt);
    }
    iterator& operator++() {
      ++at_;
      settle();
      return *this;
    }
    void operator++(int) { ++*this; }
    friend bool operator==(const iterator& i, ranges::default_sentinel_t) { return i.at_end_; }

   private:
    // Goes to the next example, through chunks and past skipped files; rethrows a file's error at
    // its place; at the pass's end, says what was skipped.
    void settle() {
      for (;;) {
        for (; at_ < chunk_.size(); ++at_) {
          auto& result = chunk_[at_];
          if (result.error) std::rethrow_exception(std::exchange(result.error, nullptr));
          if (result.decoded()) return;
          if (skipped_++ == 0) first_ = result.skipped;
          owner_->skipped_.fetch_add(1);
        }
        if (started_) ++it_;
        started_ = true;
        if (it_ == ranges::default_sentinel) break;
        chunk_ = it_.take();
        at_ = 0;
      }
      at_end_ = true;
      if (skipped_ > 0)
        std::cerr << "tp::data::decode_images: skipped " << skipped_ << " bad file" << (skipped_ == 1 ? "" : "s") << " in pass "
                  << owner_->pass_ + 1 << " (the first: " << first_ << ")" << std::endl;
    }

    decoded_view* owner_ = nullptr;
    ranges::iterator_t<inner_type> it_{};
    mutable std::vector<detail::decode_result> chunk_;  // mutable: an example in a slab is made when first read
    std::size_t at_ = 0;
    bool started_ = false, at_end_ = false;
    std::int64_t skipped_ = 0;  // in this pass
    std::string first_;
  };

  decoded_view() = default;
  decoded_view(Source source, F f, int threads, std::uint64_t seed, bad_files on_bad)
      : inner_(detail::seeded_chunks<Source>(std::move(source), seed), detail::decode_worker<F>{std::move(f), on_bad}, threads,
               order::keep, 2 * static_cast<std::size_t>(threads)),
        on_bad_(on_bad) {}
  decoded_view(const decoded_view& other) : inner_(other.inner_), on_bad_(other.on_bad_), passes_(other.passes_), skipped_(other.skipped()) {}
  decoded_view(decoded_view&& other) noexcept
      : inner_(std::move(other.inner_)), on_bad_(other.on_bad_), passes_(other.passes_), skipped_(other.skipped()) {}
  decoded_view& operator=(decoded_view other) noexcept {
    inner_ = std::move(other.inner_);
    on_bad_ = other.on_bad_;
    passes_ = other.passes_;
    skipped_ = other.skipped();
    return *this;
  }

  // Starts the next pass: its number seeds every example in it.
  iterator begin() {
    pass_ = passes_++;
    inner_.base().set_pass(pass_);
    return iterator(this);
  }
  ranges::default_sentinel_t end() const { return {}; }
  Source& base() noexcept { return inner_.base().base(); }

  // batch(n) right below says it takes n examples at a time: they are decoded into one buffer
  // each, so that batching them copies nothing (when f can write into given memory, as
  // transforms can, and the images of a batch have the same sizes), and a worker decodes whole
  // batches at a time.
  void batch_in_place(std::int64_t n) {
    inner_.base().set_slab_size(n);
    inner_.set_depth(detail::chunks_in_flight(inner_.threads(), detail::chunk_files(n)));
  }
  // Those batch buffers in pinned (page-locked) memory, for a CUDA tower: its copy to the GPU
  // then runs asynchronously, and nothing copies the batch into pinned memory first (QueueInput
  // asks for this when StagingInput feeds a CUDA device). Needs LibTorch with CUDA and a GPU.
  // Only the batches batch(n) makes in place are pinned here; QueueInput pins any others.
  void pin_memory(bool on) { inner_.base().set_pinned(on); }

  std::uint64_t passes() const noexcept { return passes_; }
  void set_passes(std::uint64_t passes) noexcept { passes_ = passes; }
  // Whether every file of a pass becomes one example in its place (see the top).
  bool keeps_order() const noexcept { return on_bad_ == bad_files::fail; }
  // Bad files left out so far (bad_files::skip), over all passes; safe from any thread.
  std::int64_t skipped() const noexcept { return skipped_.load(); }
  // The source's count per pass (with skipping, what a pass yields at most).
  std::optional<std::int64_t> items_per_pass() { return data::items_per_pass(base()); }

 private:
  inner_type inner_;
  bad_files on_bad_ = bad_files::fail;
  std::uint64_t passes_ = 0, pass_ = 0;
  std::atomic<std::int64_t> skipped_{0};
};

template <class F>
struct decode_images {
  F f;
  int threads;
  std::uint64_t seed;
  bad_files on_bad;

  decode_images(F fn, int thread_count, std::uint64_t s, bad_files b = bad_files::fail)
      : f(std::move(fn)), threads(thread_count), seed(s), on_bad(b) {
    static_assert(std::is_invocable_r_v<torch::Tensor, F&, std::span<const std::uint8_t>, const std::string&, std::uint64_t>,
                  "tp::data::decode_images: f must be callable as f(std::span<const std::uint8_t> bytes, const std::string& path, "
                  "std::uint64_t seed) -> torch::Tensor (tp::data::transforms is one)");
    if (thread_count <= 0)
      throw std::invalid_argument("tp::data::decode_images: the number of threads must be > 0, got " + std::to_string(thread_count));
  }

  template <class Source>
  friend auto operator|(Source&& source, decode_images d) {
    using S = std::remove_cvref_t<Source>;
    static_assert(ranges::input_range<S> && std::is_convertible_v<ranges::range_value_t<S>, image_file>,
                  "tp::data::decode_images needs a range of tp::data::image_file on its left (image_folder, list_file, tar_shards)");
    return decoded_view<S, F>(std::forward<Source>(source), std::move(d.f), d.threads, d.seed, d.on_bad);
  }
};

}  // namespace tp::data
