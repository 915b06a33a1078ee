#pragma once
// CRC-32C (Castagnoli): TFRecord files (TensorBoard's event files) checksum their records with
// it, and tp's checkpoints their payload. On x86-64 with SSE4.2 it runs on the CPU's crc32
// instruction (about 20x the table's speed: checkpoints are megabytes); elsewhere a table.
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

namespace tp::detail {

inline std::uint32_t crc32c_table_extend(std::uint32_t crc, const unsigned char* p, std::size_t size) {
  static const auto table = [] {
    std::array<std::uint32_t, 256> t{};
    for (std::uint32_t i = 0; i < 256; ++i) {
      std::uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  for (std::size_t i = 0; i < size; ++i) crc = table[(crc ^ p[i]) & 0xffu] ^ (crc >> 8);
  return crc;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
__attribute__((target("sse4.2"))) inline std::uint32_t crc32c_hardware_extend(std::uint32_t crc, const unsigned char* p,
                                                                               std::size_t size) {
  std::uint64_t c = crc;
  for (; size >= 8; size -= 8, p += 8) {
    std::uint64_t word;
    std::memcpy(&word, p, 8);
    c = __builtin_ia32_crc32di(c, word);
  }
  auto c32 = static_cast<std::uint32_t>(c);
  for (; size > 0; --size, ++p) c32 = __builtin_ia32_crc32qi(c32, *p);
  return c32;
}
#endif

// Continues a CRC-32C over more data: crc32c_extend(crc32c(a), b) == crc32c(a + b).
inline std::uint32_t crc32c_extend(std::uint32_t crc, const void* data, std::size_t size) {
  const auto* p = static_cast<const unsigned char*>(data);
  crc ^= 0xffffffffu;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  static const bool hardware = __builtin_cpu_supports("sse4.2");
  crc = hardware ? crc32c_hardware_extend(crc, p, size) : crc32c_table_extend(crc, p, size);
#else
  crc = crc32c_table_extend(crc, p, size);
#endif
  return crc ^ 0xffffffffu;
}

inline std::uint32_t crc32c(const void* data, std::size_t size) { return crc32c_extend(0, data, size); }

// TFRecord's masked CRC: a CRC of data that itself holds CRCs must not look like one.
inline std::uint32_t masked_crc32c(const void* data, std::size_t size) {
  const std::uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

}  // namespace tp::detail
