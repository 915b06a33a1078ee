// One rank of the image sources' multi-process test: under tp-run -n W, reads two passes of an
// image source as a training run would (files | shard | decode_images | batch in a QueueInput),
// and writes the index of every image it got, one per line with its pass, to OUT.<rank>. The
// driver (test_multi_process.cpp) checks that every example was read by exactly one rank in
// each pass.
//
//   read_pass folder DIR OUT        image_folder(DIR) | shuffle(42) | shard(rank, world_size)
//   read_pass shards DIR OUT        tar_shards(DIR/train-*.tar, rank, world_size) | shuffle_buffer(8, 42)
//
// The image's index is in its file name (scripts/write_image_folder.py: NNNNN.png, or the tar
// record's key), so the "decoder" here returns it instead of pixels: what is checked is which
// files each rank reads, not how they decode.
#include <cctype>
#include <fstream>
#include <iostream>
#include <span>
#include <string>

#include <tp/data/batch.hpp>
#include <tp/data/decode_images.hpp>
#include <tp/data/image_folder.hpp>
#include <tp/data/shard.hpp>
#include <tp/data/shuffle.hpp>
#include <tp/data/tar_shards.hpp>
#include <tp/distributed/environment.hpp>
#include <tp/policies/input/queue_input.hpp>

namespace {

// The number in the file's or record's name: ".../7/00042.png" or "train-000001.tar:000042".
std::int64_t index_in(const std::string& path) {
  const auto end = path.find_last_of("0123456789");
  auto begin = end;
  while (begin > 0 && std::isdigit(static_cast<unsigned char>(path[begin - 1]))) --begin;
  return std::stoll(path.substr(begin, end - begin + 1));
}

template <class Flow>
void read_two_passes(Flow flow, const std::string& out, std::int64_t batches_per_pass) {
  tp::QueueInput input(std::move(flow));
  input.start();
  std::ofstream file(out);
  for (int pass = 0; pass < 2; ++pass)
    for (std::int64_t b = 0; b < batches_per_pass; ++b) {
      const auto batch = input.next_batch();
      for (std::int64_t i = 0; i < batch.data.size(0); ++i) file << pass << ' ' << batch.data[i].template item<std::int64_t>() << '\n';
    }
  input.stop();
}

}  // namespace

int main(int argc, char** argv) try {
  if (argc != 4) throw std::invalid_argument("usage: read_pass folder|shards DIR OUT");
  const std::string kind = argv[1], dir = argv[2];
  const auto env = tp::read_process_environment();
  const std::string out = std::string(argv[3]) + "." + std::to_string(env.rank);
  const auto index = [](std::span<const std::uint8_t>, const std::string& path, std::uint64_t) { return torch::tensor(index_in(path)); };
  if (kind == "folder") {
    auto flow = tp::data::image_folder(dir + "/train") | tp::data::shuffle(42) | tp::data::shard(env.rank, env.world_size) |
                tp::data::decode_images(index, 2, 7) | tp::data::batch(4, tp::data::remainder::keep);
    const auto batches = *tp::data::items_per_pass(flow);
    read_two_passes(std::move(flow), out, batches);
  } else if (kind == "shards") {
    auto flow = tp::data::tar_shards(tp::data::tar_files_in(dir, "train-"), env.rank, env.world_size) | tp::data::shuffle_buffer(8, 42) |
                tp::data::decode_images(index, 2, 7) | tp::data::batch(4, tp::data::remainder::keep);
    const auto batches = *tp::data::items_per_pass(flow);
    read_two_passes(std::move(flow), out, batches);
  } else {
    throw std::invalid_argument("read_pass: the source must be folder or shards, not " + kind);
  }
  return 0;
} catch (const std::exception& e) {
  std::cerr << "read_pass: " << e.what() << "\n";
  return 1;
}
