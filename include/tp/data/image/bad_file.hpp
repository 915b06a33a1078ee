#pragma once
// bad_file: the one error of the image layer. A file that cannot be read, is not an image tp
// decodes, or is corrupt or cut short. what() starts with the path (or "SHARD.tar:KEY" for a
// shard's record), then says what is wrong and, where it helps, what to do:
//
//   throw tp::data::bad_file(path, "truncated JPEG (libjpeg-turbo: Premature end of JPEG file)");
//   // what(): "/data/train/3/17.jpg: truncated JPEG (libjpeg-turbo: Premature end of JPEG file)"
//
// It is a std::runtime_error so that code which does not care about images still reports it;
// code that does (decode_images' skipping of bad files) catches it by type and reads path().
#include <stdexcept>
#include <string>
#include <utility>

namespace tp::data {

struct bad_file : std::runtime_error {
  bad_file(std::string path, const std::string& problem)
      : std::runtime_error(path + ": " + problem), path_(std::move(path)) {}

  const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
};

}  // namespace tp::data
