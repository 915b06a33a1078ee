// libFuzzer target: scanning a tar shard (data/tar_shards.hpp: libarchive beneath, tp's own
// checks of members, keys and labels above) on any bytes, held in a memory file.
#include <cstddef>
#include <cstdint>
#include <string>

#include <sys/mman.h>
#include <unistd.h>

#include <tp/data/tar_shards.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const int fd = memfd_create("tp-fuzz-tar", 0);
  if (fd < 0 || ftruncate(fd, 0) != 0 || pwrite(fd, data, size, 0) != static_cast<ssize_t>(size)) return 0;
  try {
    (void)tp::data::detail::scan_tar("/proc/self/fd/" + std::to_string(fd));
  } catch (const tp::data::bad_file&) {
  }
  return 0;
}
