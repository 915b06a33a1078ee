#pragma once
// The records of a zip as torch.save writes it (archive/data.pkl, archive/data/0, ...: stored,
// not compressed), each checked against the CRC-32 its central directory keeps. tp reads
// torch.save files with it rather than LibTorch's PyTorchStreamReader, which checks no CRC (its
// miniz is built with MINIZ_DISABLE_ZIP_READER_CRC32_CHECKS: a byte flipped inside a tensor of a
// file Python saved again loaded as a silently different weight) and leaks miniz's state when
// its constructor throws on a damaged file (LeakSanitizer, fuzz/). tp's own checkpoints are
// sealed by a CRC-32C besides.
//
// The bytes are untrusted: every offset is bounds-checked. A directory that cannot be followed
// throws std::invalid_argument saying what is wrong; a record whose bytes do not match its
// CRC-32 throws std::runtime_error naming it.
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace tp::detail {

inline std::uint64_t zip_le(std::string_view b, std::uint64_t at, int bytes) {
  if (at > b.size() || b.size() - at < static_cast<std::uint64_t>(bytes)) throw std::out_of_range("past the end");
  std::uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(b[at + static_cast<std::uint64_t>(i)]);
  return v;
}

inline std::uint32_t zip_crc32(std::string_view data) {
  uLong crc = ::crc32(0L, Z_NULL, 0);
  constexpr std::size_t chunk = std::size_t{1} << 30;  // zlib takes 32-bit lengths
  for (std::size_t at = 0; at < data.size(); at += chunk) {
    const auto n = std::min(chunk, data.size() - at);
    crc = ::crc32(crc, reinterpret_cast<const Bytef*>(data.data() + at), static_cast<uInt>(n));
  }
  return static_cast<std::uint32_t>(crc);
}

class zip_records {
 public:
  // Reads the directory and checks every record; the records are views of `bytes`, which must
  // outlive this.
  explicit zip_records(std::string_view bytes) : b_(bytes) {
    const auto [entries, directory] = end_record();
    std::uint64_t at = directory;
    for (std::uint64_t e = 0; e < entries; ++e) {
      std::string name;
      std::string_view data;
      std::uint32_t expected = 0;
      try {
        at = entry(at, e, name, data, expected);
      } catch (const std::out_of_range&) {
        throw damaged("its directory entry " + std::to_string(e) + " runs past the end of the file");
      }
      if (zip_crc32(data) != expected)
        throw std::runtime_error("its record " + name + " does not match the CRC-32 its zip directory keeps: the file changed after " +
                                 "it was written (a damaged disk or copy)");
      // torch.save's records are all in one folder (archive/, or the file's own name); the
      // first one's names it, as PyTorch's reader takes it.
      const auto slash = name.find('/');
      if (slash == std::string::npos) throw damaged("its record " + name + " is not in a folder, as torch.save's records are");
      if (e == 0) prefix_ = name.substr(0, slash + 1);
      if (name.starts_with(prefix_)) records_.insert_or_assign(name.substr(prefix_.size()), data);
    }
  }

  // A record by its name inside the archive's folder ("data.pkl", "data/0"), or nothing.
  std::optional<std::string_view> find(const std::string& name) const {
    const auto found = records_.find(name);
    if (found == records_.end()) return std::nullopt;
    return found->second;
  }

 private:
  static std::invalid_argument damaged(const std::string& what) { return std::invalid_argument(what); }

  // The number of records and where the directory starts (zip64's end record where the 32-bit
  // one says so).
  std::pair<std::uint64_t, std::uint64_t> end_record() const {
    // The end record is the last "PK\5\6" (its comment, at most 64 KiB, follows it).
    const std::uint64_t eocd = b_.rfind(std::string_view("PK\5\6", 4));
    if (eocd == std::string_view::npos || b_.size() - eocd > 65557) throw damaged("it has no end-of-directory record");
    try {
      std::uint64_t entries = zip_le(b_, eocd + 10, 2), directory = zip_le(b_, eocd + 16, 4);
      if ((entries == 0xffff || directory == 0xffffffffu) && eocd >= 20 && b_.compare(eocd - 20, 4, std::string_view("PK\6\7", 4)) == 0) {
        const auto zip64 = zip_le(b_, eocd - 20 + 8, 8);
        if (zip64 > b_.size() || b_.compare(zip64, 4, std::string_view("PK\6\6", 4)) != 0)
          throw damaged("its zip64 end record is not where its locator says");
        entries = zip_le(b_, zip64 + 32, 8);
        directory = zip_le(b_, zip64 + 48, 8);
      }
      if (entries == 0) throw damaged("it holds no record");
      return {entries, directory};
    } catch (const std::out_of_range&) {
      throw damaged("its end-of-directory record is cut short");
    }
  }

  // Reads the directory entry at `at` (number e) and its record; returns where the next starts.
  std::uint64_t entry(std::uint64_t at, std::uint64_t e, std::string& name, std::string_view& data, std::uint32_t& expected) const {
    if (at > b_.size() || b_.compare(at, 4, std::string_view("PK\1\2", 4)) != 0)
      throw damaged("its directory entry " + std::to_string(e) + " is not where the directory says");
    const auto method = zip_le(b_, at + 10, 2);
    expected = static_cast<std::uint32_t>(zip_le(b_, at + 16, 4));
    auto size = zip_le(b_, at + 20, 4), plain = zip_le(b_, at + 24, 4), local = zip_le(b_, at + 42, 4);
    const auto name_length = zip_le(b_, at + 28, 2), extra_length = zip_le(b_, at + 30, 2), comment_length = zip_le(b_, at + 32, 2);
    if (b_.size() - (at + 46) < name_length) throw std::out_of_range("name");  // at + 46 is in: the local offset was read
    name = std::string(b_.substr(at + 46, name_length));
    // The zip64 extra field holds, in this order, whichever 32-bit field is 0xffffffff.
    const auto extra_end = at + 46 + name_length + extra_length;
    for (std::uint64_t x = at + 46 + name_length; x + 4 <= extra_end;) {
      const auto id = zip_le(b_, x, 2), length = zip_le(b_, x + 2, 2);
      if (id == 1) {
        std::uint64_t field = x + 4;
        if (plain == 0xffffffffu) plain = zip_le(b_, field, 8), field += 8;
        if (size == 0xffffffffu) size = zip_le(b_, field, 8), field += 8;
        if (local == 0xffffffffu) local = zip_le(b_, field, 8);
      }
      x += 4 + length;
    }
    if (method != 0 || size != plain)
      throw damaged("its record " + name + " is compressed (method " + std::to_string(method) + "), which torch.save never does");
    if (local > b_.size() || b_.compare(local, 4, std::string_view("PK\3\4", 4)) != 0)
      throw damaged("its record " + name + " is not where its directory entry says");
    const auto start = local + 30 + zip_le(b_, local + 26, 2) + zip_le(b_, local + 28, 2);
    if (start > b_.size() || b_.size() - start < size) throw damaged("its record " + name + " runs past the end of the file");
    data = b_.substr(start, size);
    return extra_end + comment_length;
  }

  std::string_view b_;
  std::string prefix_;
  std::map<std::string, std::string_view> records_;
};

}  // namespace tp::detail
