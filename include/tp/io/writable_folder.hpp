#pragma once
// A folder that tp writes into (the log folder, a saver's folder): made if missing and checked
// for writing before the run starts, so that a bad path is one message naming the folder and
// what to do, not a filesystem_error at the first checkpoint (or a run that loses its logs).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>

namespace tp::detail {

// The first part of `folder` that exists but is not a folder ("" if none is).
inline std::filesystem::path file_in_the_way(const std::filesystem::path& folder) {
  std::filesystem::path part;
  for (const auto& name : folder) {
    part /= name;
    std::error_code ec;
    const auto status = std::filesystem::status(part, ec);
    if (ec || !std::filesystem::exists(status)) return {};
    if (!std::filesystem::is_directory(status)) return part;
  }
  return {};
}

// Makes `folder` (with its parents) and checks that files can be made in it; `what` names it
// in the message ("tp::ModelSaver: the checkpoint folder").
inline void make_writable_folder(const std::filesystem::path& folder, const std::string& what) {
  const std::string advice = "; choose another folder, or fix its permissions";
  if (const auto file = file_in_the_way(folder); !file.empty())
    throw std::runtime_error(what + " " + folder.string() + " cannot be made: " + file.string() +
                             " is a file, not a folder; choose another folder, or move the file away");
  std::error_code ec;
  std::filesystem::create_directories(folder, ec);
  if (ec) throw std::runtime_error(what + " " + folder.string() + " cannot be made (" + ec.message() + ")" + advice);
  // A file made and removed: access() says yes to root even on a folder it cannot write.
  const auto probe = folder / (".tp-write-test-" + std::to_string(::getpid()));
  if (const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600); fd >= 0) {
    ::close(fd);
    std::filesystem::remove(probe, ec);
    return;
  }
  throw std::runtime_error(what + " " + folder.string() + " cannot be written (" + std::strerror(errno) + ")" + advice);
}

}  // namespace tp::detail
