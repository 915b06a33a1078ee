#pragma once
// image_file: what every image source yields (image_folder, list_file, tar_shards) and what
// decode_images takes. A source only says where an image is and what it is; decoding happens
// later, in decode_images' threads, so that a source stays cheap to copy, shuffle and shard.
//
//   path   the file, or "SHARD.tar:KEY" for a record of a tar shard (what errors name)
//   label  the class index (-1: none)
//   id     the example's index in its source's own order, the same on every run and every
//          layout: decode_images seeds each example's augmentation from it
//   bytes  the encoded image when the source has read it already (a tar shard is read
//          sequentially); empty: decode_images reads `path` in its worker thread
#include <cstdint>
#include <string>
#include <vector>

namespace tp::data {

struct image_file {
  std::string path;
  std::int64_t label = -1;
  std::int64_t id = 0;
  std::vector<std::uint8_t> bytes;
  friend bool operator==(const image_file&, const image_file&) = default;
};

}  // namespace tp::data
