#pragma once
// Writes a whole file so that a reader (or a crash) sees the old content or the new one, never
// a mix: the bytes go to a temporary file in the same folder, are flushed to disk, and the file
// is renamed over the target (rename is atomic within a file system). A write that fails or is
// abandoned removes its temporary file; one killed midway leaves `<target>.tmp.<pid>`, which no
// reader takes for the target.
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

// Whether NAME is an atomic write's temporary file, `<target>.tmp.<pid>`.
inline bool is_temporary_file_name(std::string_view name) {
  const auto at = name.rfind(".tmp.");
  if (at == std::string_view::npos || at == 0 || at + 5 == name.size()) return false;
  return name.find_first_not_of("0123456789", at + 5) == std::string_view::npos;
}

// Removes what writes killed midway left in FOLDER (their temporary files: of checkpoints, of
// their index, of a MinSaver's copy). Called by the folder's owner before it writes there, when
// no write of this run can be under way.
inline void remove_abandoned_temporaries(const std::filesystem::path& folder) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(folder, ec)) {
    std::error_code ignored;
    if (entry.is_regular_file(ignored) && is_temporary_file_name(entry.path().filename().string()))
      std::filesystem::remove(entry.path(), ignored);
  }
}

class atomic_file_writer {
 public:
  explicit atomic_file_writer(std::filesystem::path path)
      : path_(std::move(path)), temporary_(path_.string() + ".tmp." + std::to_string(::getpid())) {  // two writers never share one
    fd_ = ::open(temporary_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd_ < 0) throw std::runtime_error("tp: cannot write " + temporary_ + ": " + std::strerror(errno));
  }
  atomic_file_writer(const atomic_file_writer&) = delete;
  atomic_file_writer& operator=(const atomic_file_writer&) = delete;
  ~atomic_file_writer() {
    if (fd_ >= 0) {
      ::close(fd_);
      ::unlink(temporary_.c_str());
    }
  }

  void write(const void* data, std::size_t size) {
    const auto* p = static_cast<const char*>(data);
    while (size > 0) {
      const auto n = ::write(fd_, p, size);
      if (n < 0) {
        if (errno == EINTR) continue;
        throw std::runtime_error("tp: writing " + temporary_ + " failed: " + std::strerror(errno));
      }
      p += n;
      size -= static_cast<std::size_t>(n);
    }
  }
  // Overwrites bytes already written (a header whose checksum is known only at the end).
  void write_at(std::size_t offset, const void* data, std::size_t size) {
    if (::pwrite(fd_, data, size, static_cast<off_t>(offset)) != static_cast<ssize_t>(size))
      throw std::runtime_error("tp: writing " + temporary_ + " failed: " + std::strerror(errno));
  }
  // Flushes to disk and renames over the target.
  void commit() {
    const bool synced = ::fsync(fd_) == 0;
    const int saved_errno = errno;
    const bool closed = ::close(fd_) == 0;
    fd_ = -1;
    if (!synced || !closed) {
      ::unlink(temporary_.c_str());
      throw std::runtime_error("tp: cannot flush " + temporary_ + " to disk: " + std::strerror(synced ? errno : saved_errno));
    }
    std::error_code renamed;
    std::filesystem::rename(temporary_, path_, renamed);
    if (renamed) {
      ::unlink(temporary_.c_str());
      throw std::runtime_error("tp: cannot rename " + temporary_ + " to " + path_.string() + ": " + renamed.message());
    }
  }

 private:
  std::filesystem::path path_;
  std::string temporary_;
  int fd_ = -1;
};

inline void write_file_atomically(const std::filesystem::path& path, std::string_view text) {
  atomic_file_writer file(path);
  file.write(text.data(), text.size());
  file.commit();
}

}  // namespace tp::detail
