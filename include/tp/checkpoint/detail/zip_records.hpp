#pragma once
// Checks every record of a zip (what torch.save writes) against the CRC-32 its central directory
// keeps. LibTorch's zip reader (miniz, built with MINIZ_DISABLE_ZIP_READER_CRC32_CHECKS) does not,
// so a byte flipped inside a tensor of a file without tp's trailer (one Python saved again) would
// load as a silently different weight. tp's own checkpoints are sealed by a CRC-32C besides.
//
// The bytes are untrusted: every offset is bounds-checked, and what is not a well-formed zip is
// left to the zip reader's own errors (this check only adds the records' checksums).
#include <zlib.h>

#include <algorithm>
#include <cstdint>
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

// Throws std::runtime_error naming the first record whose bytes do not match its CRC-32. A zip
// whose directory cannot be followed passes: the zip reader then says what is wrong with it.
inline void check_zip_records(std::string_view b) {
  // The end record is the last "PK\5\6" (its comment, at most 64 KiB, follows it).
  const std::uint64_t eocd = b.rfind(std::string_view("PK\5\6", 4));
  if (eocd == std::string_view::npos || b.size() - eocd > 65557) return;
  std::uint64_t entries = 0, directory = 0;
  try {
    entries = zip_le(b, eocd + 10, 2);
    directory = zip_le(b, eocd + 16, 4);
    if ((entries == 0xffff || directory == 0xffffffffu) && eocd >= 20 && b.compare(eocd - 20, 4, std::string_view("PK\6\7", 4)) == 0) {
      const auto zip64 = zip_le(b, eocd - 20 + 8, 8);  // the zip64 end record
      if (b.compare(zip64, 4, std::string_view("PK\6\6", 4)) != 0) return;
      entries = zip_le(b, zip64 + 32, 8);
      directory = zip_le(b, zip64 + 48, 8);
    }
  } catch (const std::out_of_range&) {
    return;
  }
  std::uint64_t at = directory;
  for (std::uint64_t e = 0; e < entries; ++e) {
    std::string name;
    std::uint64_t data = 0, size = 0;
    std::uint32_t expected = 0;
    try {
      if (b.compare(at, 4, std::string_view("PK\1\2", 4)) != 0) return;
      const auto method = zip_le(b, at + 10, 2);
      expected = static_cast<std::uint32_t>(zip_le(b, at + 16, 4));
      size = zip_le(b, at + 20, 4);
      auto plain = zip_le(b, at + 24, 4);
      const auto name_length = zip_le(b, at + 28, 2), extra_length = zip_le(b, at + 30, 2), comment_length = zip_le(b, at + 32, 2);
      auto local = zip_le(b, at + 42, 4);
      name = std::string(b.substr(at + 46, name_length));
      // The zip64 extra field holds, in this order, whichever 32-bit field is 0xffffffff.
      for (std::uint64_t x = at + 46 + name_length; x + 4 <= at + 46 + name_length + extra_length;) {
        const auto id = zip_le(b, x, 2), length = zip_le(b, x + 2, 2);
        if (id == 1) {
          std::uint64_t field = x + 4;
          if (plain == 0xffffffffu) plain = zip_le(b, field, 8), field += 8;
          if (size == 0xffffffffu) size = zip_le(b, field, 8), field += 8;
          if (local == 0xffffffffu) local = zip_le(b, field, 8);
        }
        x += 4 + length;
      }
      at += 46 + name_length + extra_length + comment_length;
      if (method != 0 || size != plain) continue;  // compressed: torch.save never does; the zip reader checks it
      if (b.compare(local, 4, std::string_view("PK\3\4", 4)) != 0) return;
      data = local + 30 + zip_le(b, local + 26, 2) + zip_le(b, local + 28, 2);
      if (data > b.size() || b.size() - data < size) return;
    } catch (const std::out_of_range&) {
      return;
    }
    if (zip_crc32(b.substr(data, size)) != expected)
      throw std::runtime_error("its record " + name + " does not match the CRC-32 its zip directory keeps: the file changed after it was " +
                               "written (a damaged disk or copy)");
  }
}

}  // namespace tp::detail
