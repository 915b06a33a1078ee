// libFuzzer target: JPEG decoding (data/image/decode.hpp over libjpeg-turbo): the header, a
// whole decode, and a scaled one, on any bytes. A bad file is a bad_file naming it.
#include <cstddef>
#include <cstdint>
#include <span>

#include <tp/data/image/decode.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::uint8_t> bytes(data, size);
  if (!tp::data::detail::is_jpeg(bytes)) return 0;  // the other target's format
  try {
    const auto header = tp::data::read_header(bytes, "input");
    // Larger images are valid; decoding them only costs the fuzzer time and memory.
    if (header.width > 0 && header.height > (std::int64_t{1} << 24) / header.width) return 0;
    (void)tp::data::decode(bytes, "input", tp::data::color::rgb);
    (void)tp::data::decode(bytes, "input", tp::data::color::grey, {{1, 1}});
  } catch (const tp::data::bad_file&) {
  }
  return 0;
}
