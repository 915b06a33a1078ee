#pragma once
// TokenFile: a file of token ids, memory-mapped: little-endian uint16, one after another, the
// layout of nanoGPT's train.bin and val.bin. A file prepare.py wrote for any data set (GPT-2's
// BPE ids included) opens as it is. Copies share the mapping.
//
//   tp::data::TokenFile train("data/train.bin", /*vocab_size=*/65);
//   auto x = train.windows({0, 100}, 64);        // int64 [2, 64]: tokens 0-63 and 100-163
//
// Checked when opened, each with its own error (std::invalid_argument): a missing or empty file,
// an odd number of bytes (a truncated file, or not one of uint16), and, when the vocabulary size
// is given, an id beyond it (the file was written with another vocabulary).
//
// Views for evaluation (random-access ranges of torch::data::Example, {tokens, the same shifted
// by one}, so shard() and batch() apply):
//   tp::data::sequential_windows(file, block)        every whole window once, in file order
//   tp::data::fixed_windows(file, block, n, seed)     n windows at offsets drawn from the seed,
//                                                     the same n at every evaluation
// Training draws its windows with tp::TokenWindows (policies/input/token_windows.hpp).
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <range/v3/view/iota.hpp>
#include <range/v3/view/transform.hpp>
#include <torch/data/example.h>
#include <torch/types.h>

#include <tp/data/random.hpp>

namespace tp::data {

class TokenFile {
 public:
  explicit TokenFile(std::filesystem::path path, std::optional<std::int64_t> vocab_size = std::nullopt)
      : path_(std::move(path)), vocab_size_(vocab_size) {
    const std::string name = "tp::data::TokenFile: '" + path_.string() + "'";
    if (vocab_size_ && *vocab_size_ < 1) throw std::invalid_argument(name + ": the vocabulary size must be >= 1, not " + std::to_string(*vocab_size_));
    const int fd = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      throw std::invalid_argument(name + " cannot be opened (" + std::strerror(errno) +
                                  "); give a file of uint16 token ids, as nanoGPT's prepare.py writes train.bin");
    struct stat st{};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      throw std::invalid_argument(name + " is not a regular file");
    }
    const auto bytes = static_cast<std::int64_t>(st.st_size);
    if (bytes == 0) {
      ::close(fd);
      throw std::invalid_argument(name + " is empty: it holds no tokens");
    }
    if (bytes % 2 != 0) {
      ::close(fd);
      throw std::invalid_argument(name + " has " + std::to_string(bytes) +
                                  " bytes, an odd number: a token file holds 2 bytes (a little-endian uint16) per token, so this one is "
                                  "truncated or not a token file");
    }
    void* data = ::mmap(nullptr, static_cast<std::size_t>(bytes), PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);  // the mapping keeps the file
    if (data == MAP_FAILED) throw std::runtime_error(name + " cannot be memory-mapped: " + std::strerror(errno));
    mapping_ = std::shared_ptr<const unsigned char>(static_cast<const unsigned char*>(data), [bytes](const unsigned char* p) {
      ::munmap(const_cast<unsigned char*>(p), static_cast<std::size_t>(bytes));
    });
    size_ = bytes / 2;
    if (vocab_size_) check_ids();
  }

  // Tokens in the file.
  std::int64_t size() const noexcept { return size_; }
  const std::filesystem::path& path() const noexcept { return path_; }
  std::optional<std::int64_t> vocab_size() const noexcept { return vocab_size_; }

  std::int64_t operator[](std::int64_t i) const noexcept {
    const unsigned char* p = mapping_.get() + 2 * i;
    return static_cast<std::int64_t>(p[0] | (p[1] << 8));
  }

  // The `length` tokens from each offset, as int64 [offsets, length] (pinned: in page-locked
  // memory, for an asynchronous copy to a GPU). Each window must lie within the file.
  torch::Tensor windows(const std::vector<std::int64_t>& offsets, std::int64_t length, bool pinned = false) const {
    auto out = torch::empty({static_cast<std::int64_t>(offsets.size()), length}, torch::TensorOptions(torch::kLong).pinned_memory(pinned));
    std::int64_t* row = out.data_ptr<std::int64_t>();
    for (const auto offset : offsets) {
      if (offset < 0 || offset + length > size_)
        throw std::out_of_range("tp::data::TokenFile: the window of " + std::to_string(length) + " tokens at " + std::to_string(offset) +
                                " lies beyond the " + std::to_string(size_) + " tokens of '" + path_.string() + "'");
      for (std::int64_t t = 0; t < length; ++t) row[t] = (*this)[offset + t];
      row += length;
    }
    return out;
  }

  // Says why the file cannot give windows of `length` tokens, naming `who` and the flag.
  void require_window(std::int64_t length, const std::string& who) const {
    if (length < 2) throw std::invalid_argument(who + ": a window must hold at least 2 tokens (block_size >= 1)");
    if (size_ < length)
      throw std::invalid_argument(who + ": '" + path_.string() + "' holds " + std::to_string(size_) + " tokens, fewer than one window of " +
                                  std::to_string(length) + " (block_size + 1); use a smaller block_size or a longer file");
  }

 private:
  void check_ids() const {
    for (std::int64_t i = 0; i < size_; ++i)
      if ((*this)[i] >= *vocab_size_)
        throw std::invalid_argument("tp::data::TokenFile: token " + std::to_string(i) + " of '" + path_.string() + "' is " +
                                    std::to_string((*this)[i]) + ", beyond the vocabulary of " + std::to_string(*vocab_size_) +
                                    " ids (0 to " + std::to_string(*vocab_size_ - 1) + "): the file was written with another vocabulary");
  }

  std::filesystem::path path_;
  std::optional<std::int64_t> vocab_size_;
  std::shared_ptr<const unsigned char> mapping_;
  std::int64_t size_ = 0;
};

// Where the random window `index` of draw `draw` (a training step, or 0 for a fixed set)
// starts in a file of `tokens` tokens, for windows of `length` tokens: uniform over every
// offset where a whole window fits, as nanoGPT's get_batch draws, and a pure function of its
// arguments, so that any rank can draw any window and a resumed run draws the same ones.
inline std::int64_t window_offset(std::uint64_t seed, std::int64_t draw, std::int64_t index, std::int64_t tokens, std::int64_t length) {
  std::uint64_t state = detail::pass_state(seed, static_cast<std::uint64_t>(draw));
  state ^= 0x9fb21c651e98df25ULL * static_cast<std::uint64_t>(index + 1);
  detail::splitmix64(state);  // mixes the index in before the draw
  return detail::uniform_below(state, tokens - length + 1);
}

namespace detail {
// Example{x, y} for the window at `offset`: block_size tokens and the same shifted by one.
inline torch::data::Example<> window_example(const TokenFile& file, std::int64_t offset, std::int64_t block_size) {
  auto both = file.windows({offset}, block_size + 1)[0];
  return {both.slice(0, 0, block_size), both.slice(0, 1, block_size + 1)};
}
}  // namespace detail

// Every whole window of block_size + 1 tokens once, windows starting block_size apart.
inline auto sequential_windows(TokenFile file, std::int64_t block_size) {
  file.require_window(block_size + 1, "tp::data::sequential_windows");
  const std::int64_t count = (file.size() - 1) / block_size;
  return ranges::views::iota(std::int64_t{0}, count) |
         ranges::views::transform([file, block_size](std::int64_t i) { return detail::window_example(file, i * block_size, block_size); });
}

// `count` windows at offsets drawn from `seed`: the same windows each pass.
inline auto fixed_windows(TokenFile file, std::int64_t block_size, std::int64_t count, std::uint64_t seed) {
  file.require_window(block_size + 1, "tp::data::fixed_windows");
  if (count < 1) throw std::invalid_argument("tp::data::fixed_windows: count must be >= 1, not " + std::to_string(count));
  return ranges::views::iota(std::int64_t{0}, count) | ranges::views::transform([file, block_size, seed](std::int64_t i) {
           return detail::window_example(file, window_offset(seed, 0, i, file.size(), block_size + 1), block_size);
         });
}

}  // namespace tp::data
