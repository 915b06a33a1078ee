#pragma once
// Writes a whole file so that a reader (or a crash) sees the old content or the new one, never
// a mix: the text goes to a temporary file in the same folder, is flushed to disk, and is
// renamed over the target (rename is atomic within a file system).
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>

#include <fcntl.h>
#include <unistd.h>

namespace tp::detail {

inline void write_file_atomically(const std::filesystem::path& path, std::string_view text) {
  const auto temporary = path.string() + ".tmp." + std::to_string(::getpid());  // two writers never share one
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("tp: cannot write " + temporary + ": " + std::strerror(errno));
  std::size_t written = 0;
  while (written < text.size()) {
    const auto n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      throw std::runtime_error("tp: writing " + temporary + " failed: " + why);
    }
    written += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0)
    throw std::runtime_error("tp: cannot flush " + temporary + " to disk: " + std::strerror(errno));
  std::filesystem::rename(temporary, path);
}

}  // namespace tp::detail
