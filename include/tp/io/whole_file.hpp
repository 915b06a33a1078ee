#pragma once
// read_whole_file: a file's bytes, or an error of the caller's type that names it. A folder
// opens as a stream whose size is -1 (an allocation failure, or the stream library's own words),
// and a device such as /dev/zero never ends: both are refused before a byte is read.
//
//   auto bytes = tp::detail::read_whole_file<checkpoint_error>(path, path.string(), "a torch.save file");
//   // "<path> is a folder, not a torch.save file; name a file in it"
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

namespace tp::detail {

// `subject` begins each message (the path, or the caller and the path); `kind` says what the
// file should have been.
template <class Error>
std::string read_whole_file(const std::filesystem::path& path, const std::string& subject, std::string_view kind = "a file") {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (std::filesystem::is_directory(status))
    throw Error(subject + " is a folder, not " + std::string(kind) + "; name a file in it");
  if (std::filesystem::exists(status) && !std::filesystem::is_regular_file(status))
    throw Error(subject + " is not a regular file (a device, a pipe or a socket); name " + std::string(kind));
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) throw Error(subject + " cannot be opened");
  std::string bytes(static_cast<std::size_t>(in.tellg()), '\0');
  in.seekg(0);
  if (!in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()))) throw Error(subject + " cannot be read");
  return bytes;
}

}  // namespace tp::detail
