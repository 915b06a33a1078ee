#pragma once
// CharacterVocabulary: every distinct character of a UTF-8 text is a token, in code-point order
// (nanoGPT's shakespeare_char: 65 of them in tiny Shakespeare). prepare_character_tokens turns a
// text file into token files (data/token_file.hpp) with the vocabulary beside them:
//
//   auto prepared = tp::data::prepare_character_tokens("input.txt", "data/shakespeare_char");
//   // data/shakespeare_char/train.bin: the first 90% of the characters, val.bin: the rest,
//   // vocab.json: {"vocab_size": 65, "chars": ["\n", " ", "!", ...]}
//   tp::data::TokenFile train(prepared.train, prepared.vocabulary.size());
//   std::cout << prepared.vocabulary.decode({20, 43, 50});
//
// Text that is not UTF-8, an empty text, a text with more than 65,536 distinct characters (ids
// are uint16) and a vocab.json that is not one this wrote are refused, each saying so.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include <tp/io/atomic_file.hpp>
#include <tp/io/whole_file.hpp>

namespace tp::data {

namespace detail {
// The code points of UTF-8 text; throws at the first byte that does not decode.
inline std::vector<char32_t> code_points(std::string_view text, const std::string& source) {
  std::vector<char32_t> out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const auto b = static_cast<unsigned char>(text[i]);
    const int extra = b < 0x80 ? 0 : (b >> 5) == 0x6 ? 1 : (b >> 4) == 0xe ? 2 : (b >> 3) == 0x1e ? 3 : -1;
    if (extra < 0 || text.size() - i <= static_cast<std::size_t>(extra))  // a lead byte, or one cut short
      throw std::invalid_argument("tp::data: " + source + " is not UTF-8 text (byte " + std::to_string(i) + ")");
    char32_t c = extra == 0 ? b : b & (0x3f >> extra);
    for (int k = 1; k <= extra; ++k) {
      const auto next = static_cast<unsigned char>(text[i + static_cast<std::size_t>(k)]);
      if ((next >> 6) != 0x2) throw std::invalid_argument("tp::data: " + source + " is not UTF-8 text (byte " + std::to_string(i + k) + ")");
      c = (c << 6) | (next & 0x3f);
    }
    out.push_back(c);
    i += static_cast<std::size_t>(extra) + 1;
  }
  return out;
}

inline void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xc0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3f));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xe0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (c & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (c & 0x3f));
  }
}

}  // namespace detail

class CharacterVocabulary {
 public:
  // The distinct characters of a text, in code-point order.
  static CharacterVocabulary of_text(std::string_view utf8, const std::string& source = "the text") {
    auto chars = detail::code_points(utf8, source);
    if (chars.empty()) throw std::invalid_argument("tp::data::CharacterVocabulary: " + source + " is empty: it has no characters");
    std::sort(chars.begin(), chars.end());
    chars.erase(std::unique(chars.begin(), chars.end()), chars.end());
    return CharacterVocabulary(std::move(chars));
  }

  // What save() wrote.
  static CharacterVocabulary load(const std::filesystem::path& path) {
    const std::string who = "tp::data::CharacterVocabulary: '" + path.string() + "'";
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(tp::detail::read_whole_file<std::invalid_argument>(path, who));
    } catch (const nlohmann::json::exception& e) {
      throw std::invalid_argument(who + " is not JSON: " + e.what());
    }
    if (!j.is_object() || !j.contains("chars") || !j["chars"].is_array() || !j.contains("vocab_size") ||
        !j["vocab_size"].is_number_integer() || j["vocab_size"].get<std::size_t>() != j["chars"].size())
      throw std::invalid_argument(who + " is not a character vocabulary: it needs \"chars\", a list of one-character strings, and "
                                  "\"vocab_size\", their number");
    std::vector<char32_t> chars;
    for (const auto& c : j["chars"]) {
      const auto points = c.is_string() ? detail::code_points(c.get<std::string>(), who) : std::vector<char32_t>{};
      if (points.size() != 1) throw std::invalid_argument(who + ": entry " + std::to_string(chars.size()) + " is not one character");
      chars.push_back(points[0]);
    }
    if (chars.empty() || !std::is_sorted(chars.begin(), chars.end()) || std::adjacent_find(chars.begin(), chars.end()) != chars.end())
      throw std::invalid_argument(who + ": the characters must be distinct and in code-point order, as CharacterVocabulary::save writes them");
    return CharacterVocabulary(std::move(chars));
  }

  void save(const std::filesystem::path& path) const { tp::detail::write_file_atomically(path, json()); }
  // What save writes.
  std::string json() const {
    nlohmann::json chars = nlohmann::json::array();
    for (const auto c : chars_) chars.push_back(decode_one(c));
    return nlohmann::json{{"vocab_size", size()}, {"chars", chars}}.dump() + "\n";
  }

  std::int64_t size() const noexcept { return static_cast<std::int64_t>(chars_.size()); }

  // The ids of a text's characters; throws at a character outside the vocabulary.
  std::vector<std::uint16_t> encode(std::string_view utf8) const {
    std::vector<std::uint16_t> ids;
    const auto points = detail::code_points(utf8, "the text to encode");
    ids.reserve(points.size());
    for (const auto c : points) {
      const auto it = std::lower_bound(chars_.begin(), chars_.end(), c);
      if (it == chars_.end() || *it != c)
        throw std::invalid_argument("tp::data::CharacterVocabulary::encode: character U+" + hex(c) + " is not in the vocabulary of " +
                                    std::to_string(size()) + " characters");
      ids.push_back(static_cast<std::uint16_t>(it - chars_.begin()));
    }
    return ids;
  }

  // The text of a sequence of ids; throws at an id outside the vocabulary.
  std::string decode(const std::vector<std::int64_t>& ids) const {
    std::string out;
    for (const auto id : ids) {
      if (id < 0 || id >= size())
        throw std::invalid_argument("tp::data::CharacterVocabulary::decode: id " + std::to_string(id) + " is not in [0, " +
                                    std::to_string(size()) + ")");
      detail::append_utf8(out, chars_[static_cast<std::size_t>(id)]);
    }
    return out;
  }

 private:
  explicit CharacterVocabulary(std::vector<char32_t> chars) : chars_(std::move(chars)) {
    if (chars_.size() > 65536)
      throw std::invalid_argument("tp::data::CharacterVocabulary: " + std::to_string(chars_.size()) +
                                  " distinct characters, more than the 65,536 ids a uint16 token file holds");
  }
  static std::string decode_one(char32_t c) {
    std::string s;
    detail::append_utf8(s, c);
    return s;
  }
  static std::string hex(char32_t c) {
    std::ostringstream out;
    out << std::hex << std::uppercase << static_cast<std::uint32_t>(c);
    return out.str();
  }
  std::vector<char32_t> chars_;  // sorted: the id of a character is its place
};

// What prepare_character_tokens wrote: the train and validation token files, the vocabulary file,
// and the vocabulary.
struct prepared_tokens {
  std::filesystem::path train, val, vocabulary_file;
  CharacterVocabulary vocabulary;
};

namespace detail {
inline std::string token_bytes(const std::vector<std::uint16_t>& ids, std::size_t first, std::size_t last) {
  std::string bytes;
  bytes.reserve(2 * (last - first));
  for (std::size_t i = first; i < last; ++i) {
    bytes += static_cast<char>(ids[i] & 0xff);  // little-endian, whatever the machine
    bytes += static_cast<char>(ids[i] >> 8);
  }
  return bytes;
}
}  // namespace detail

// Encodes a UTF-8 text file with its own character vocabulary into `dir` (made if missing):
// train.bin holds the first train_fraction of its characters, val.bin the rest (nanoGPT's
// prepare.py for shakespeare_char: 0.9), vocab.json the vocabulary. Files already there are
// kept when they hold what this text gives (a run started again); when one holds another
// text's, nothing is written and the error says which (a run's vocabulary is what its
// checkpoints' token ids mean).
inline prepared_tokens prepare_character_tokens(const std::filesystem::path& text, const std::filesystem::path& dir,
                                                double train_fraction = 0.9) {
  if (!(train_fraction > 0 && train_fraction < 1))
    throw std::invalid_argument("tp::data::prepare_character_tokens: train_fraction must be in (0, 1), not " + std::to_string(train_fraction));
  const auto content = tp::detail::read_whole_file<std::invalid_argument>(text, "tp::data::prepare_character_tokens: '" + text.string() + "'");
  auto vocabulary = CharacterVocabulary::of_text(content, "'" + text.string() + "'");
  const auto ids = vocabulary.encode(content);
  const auto split = static_cast<std::size_t>(static_cast<double>(ids.size()) * train_fraction);
  if (split == 0 || split == ids.size())
    throw std::invalid_argument("tp::data::prepare_character_tokens: '" + text.string() + "' has " + std::to_string(ids.size()) +
                                " characters, too few to split into training and validation text");
  prepared_tokens out{dir / "train.bin", dir / "val.bin", dir / "vocab.json", std::move(vocabulary)};
  const std::pair<std::filesystem::path, std::string> files[] = {
      {out.vocabulary_file, out.vocabulary.json()}, {out.train, detail::token_bytes(ids, 0, split)}, {out.val, detail::token_bytes(ids, split, ids.size())}};
  for (const auto& [path, bytes] : files) {
    std::error_code ec;
    if (std::filesystem::exists(path, ec) &&
        tp::detail::read_whole_file<std::invalid_argument>(path, "tp::data::prepare_character_tokens: '" + path.string() + "'") != bytes)
      throw std::invalid_argument("tp::data::prepare_character_tokens: " + dir.string() + " holds the tokens of another text (its " +
                                  path.filename().string() + " is not what '" + text.string() +
                                  "' gives), which its checkpoints were trained on: prepare this text in another folder, or remove " +
                                  dir.string() + " if that run is no longer needed");
  }
  std::filesystem::create_directories(dir);
  for (const auto& [path, bytes] : files) {
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) tp::detail::write_file_atomically(path, bytes);
  }
  return out;
}

}  // namespace tp::data
