// Image sources (image_folder, list_file, tar_shards) and decode_images: listings and labels,
// sharding over ranks, bitwise resumes through QueueInput, and every bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <set>

#include <tp/data/decode_images.hpp>
#include <tp/data/image/decode.hpp>
#include <tp/data/image/transforms.hpp>
#include <tp/data/image_folder.hpp>
#include <tp/data/tar_shards.hpp>
#include <tp/policies/input/dummy_input.hpp>
#include <tp/policies/input/feed_input.hpp>
#include <tp/policies/input/queue_input.hpp>
#include <tp/policies/input/staging_input.hpp>

#include "support.hpp"

namespace fs = std::filesystem;
using tp_test::TempDir;

namespace {

// Fashion-MNIST's first 24 training images as PNGs (4 tar shards of 6), written once by the
// script the example and the benchmark use.
const fs::path& images() {
  static TempDir dir("image_sources");
  static const bool written = [] {
    const auto out = tp_test::run(std::string(TP_PYTHON) + " " + tp_test::source_dir() + "/scripts/write_image_folder.py " + dir.path.string() +
                                  " --limit 24 --tar-shards 4 2>&1");
    EXPECT_TRUE(fs::exists(dir.path / "train-000003.tar")) << out;
    return true;
  }();
  (void)written;
  return dir.path;
}
std::vector<std::string> shards() { return tp::data::tar_files_in(images().string(), "train-"); }

void write(const fs::path& path, const std::string& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

using tp_test::message_of;
#define EXPECT_MESSAGE(call, text) EXPECT_NE(message_of([&] { call; }).find(text), std::string::npos) << message_of([&] { call; })

// A's augmentation, as a training run would use it (on 28 x 28 grey images).
tp::data::transforms augment() {
  return tp::data::transforms(tp::data::color::grey).random_resized_crop(20, 20).random_horizontal_flip(0.5).normalize({0.3}, {0.35});
}
// What it was given: the seed and the bytes' sum, to check seeds and ids exactly.
struct seed_and_sum {
  torch::Tensor operator()(std::span<const std::uint8_t> bytes, const std::string&, std::uint64_t seed) const {
    const auto sum = std::accumulate(bytes.begin(), bytes.end(), std::int64_t{0});
    return torch::tensor({static_cast<std::int64_t>(seed), sum});
  }
};

std::vector<torch::data::Example<>> drain(auto& input, int n) {
  std::vector<torch::data::Example<>> out;
  for (int i = 0; i < n; ++i) out.push_back(input.next_batch());
  return out;
}
void expect_same_batches(const std::vector<torch::data::Example<>>& a, const std::vector<torch::data::Example<>>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::equal(a[i].data, b[i].data)) << "batch " << i;
    EXPECT_TRUE(torch::equal(a[i].target, b[i].target)) << "batch " << i;
  }
}
// The ids of a pass's examples made by seed_and_sum with seed 7, from their seeds.
std::vector<std::int64_t> ids_of(const std::vector<torch::data::Example<>>& batches, std::uint64_t pass, std::int64_t n = 24) {
  std::map<std::int64_t, std::int64_t> id_of_seed;
  for (std::int64_t id = 0; id < n; ++id) id_of_seed[static_cast<std::int64_t>(tp::data::example_seed(7, pass, id))] = id;
  std::vector<std::int64_t> ids;
  for (const auto& b : batches)
    for (std::int64_t i = 0; i < b.data.size(0); ++i) ids.push_back(id_of_seed.at(b.data[i][0].item<std::int64_t>()));
  return ids;
}
std::vector<std::int64_t> ids_of_files(auto&& range) {
  std::vector<std::int64_t> ids;
  for (auto&& f : range) ids.push_back(f.id);
  return ids;
}

}  // namespace

// --- image_folder ----------------------------------------------------------------------------------

TEST(ImageFolder, ListsAsTorchvisionsImageFolderDoes) {
  TempDir dir("image_folder_listing");
  for (const auto* name : {"b/x.png", "b/A.JPG", "b/sub/c.jpeg", "b/sub-z/d.Png", "b/notes.txt", "a/1.png", "a/0.jpg", "c d/e.png"})
    write(dir.path / name, "not read");
  const auto listed = tp::data::image_folder(dir.path.string());
  EXPECT_EQ(listed.classes(), (std::vector<std::string>{"a", "b", "c d"}));
  std::ostringstream mine;
  for (std::size_t i = 0; i < listed.size(); ++i) {
    EXPECT_EQ(listed[i].id, static_cast<std::int64_t>(i));
    mine << listed[i].path << " " << listed[i].label << "\n";
  }
  const auto theirs = tp_test::run(std::string(TP_PYTHON) + " -c \"import torchvision.datasets as d\n"
                                   "for p, l in d.ImageFolder('" + dir.path.string() + "', loader=lambda p: p).samples: print(p, l)\"");
  EXPECT_EQ(mine.str(), theirs);
}

TEST(ImageFolder, ShuffledAndShardedOverTwoRanksReadsEachExampleOncePerPass) {
  auto folder = tp::data::image_folder((images() / "train").string());
  ASSERT_EQ(folder.size(), 24u);
  EXPECT_EQ(fs::path(folder[0].path).parent_path().filename().string(), folder.classes()[static_cast<std::size_t>(folder[0].label)]);
  auto rank0 = folder | tp::data::shuffle(3) | tp::data::shard(0, 2);
  auto rank1 = folder | tp::data::shuffle(3) | tp::data::shard(1, 2);
  EXPECT_EQ(tp::data::items_per_pass(rank0), 12);
  std::vector<std::int64_t> first_pass;
  for (int pass = 0; pass < 2; ++pass) {
    auto ids = ids_of_files(rank0);
    const auto other = ids_of_files(rank1);
    ids.insert(ids.end(), other.begin(), other.end());
    std::set<std::int64_t> distinct(ids.begin(), ids.end());
    EXPECT_EQ(ids.size(), 24u);
    EXPECT_EQ(distinct.size(), 24u);
    if (pass == 0) first_pass = ids;
    else EXPECT_NE(ids, first_pass);  // a new order every pass
  }
}

TEST(ImageFolder, RefusesAMissingFolderNoClassesAndAnEmptyClass) {
  TempDir dir("image_folder_bad");
  const auto root = dir.path.string();
  EXPECT_MESSAGE(tp::data::image_folder(root + "/nowhere"), root + "/nowhere: no such folder");
  EXPECT_MESSAGE(tp::data::image_folder(root), root + ": holds no class folder");
  write(dir.path / "cat/1.png", "x");
  write(dir.path / "dog/readme.txt", "x");
  EXPECT_MESSAGE(tp::data::image_folder(root), root + "/dog: class folder 'dog' holds no .jpg, .jpeg or .png file");
  try {
    tp::data::image_folder(root);
  } catch (const tp::data::bad_file& e) {
    EXPECT_EQ(e.path(), root + "/dog");
  }
}

// --- list_file -------------------------------------------------------------------------------------

TEST(ListFile, ReadsPathsAndLabelsSkippingCommentsAndBlankLines) {
  TempDir dir("list_file");
  write(dir.path / "img/a.png", "a");
  write(dir.path / "img/b c.png", "b");
  write(dir.path / "list.txt", "# path label\n\nimg/a.png 3\r\n  img/b c.png\t0  \n");
  const auto listed = tp::data::list_file((dir.path / "list.txt").string());
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed[0], (tp::data::image_file{(dir.path / "img/a.png").string(), 3, 0, {}}));
  EXPECT_EQ(listed[1], (tp::data::image_file{(dir.path / "img/b c.png").string(), 0, 1, {}}));
  write(dir.path / "elsewhere.txt", "a.png 1\n");
  EXPECT_EQ(tp::data::list_file((dir.path / "elsewhere.txt").string(), (dir.path / "img").string())[0].path, (dir.path / "img/a.png").string());
}

TEST(ListFile, RefusesBadLinesAndMissingFilesNamingFileAndLine) {
  TempDir dir("list_file_bad");
  const auto list = (dir.path / "list.txt").string();
  write(dir.path / "a.png", "a");
  EXPECT_MESSAGE(tp::data::list_file(list), list + ": list file missing");
  write(list, "a.png 1\n\na.png\n");
  EXPECT_MESSAGE(tp::data::list_file(list), list + ": line 3: expected `relative/path label`, got 'a.png'");
  write(list, "a.png cat\n");
  EXPECT_MESSAGE(tp::data::list_file(list), list + ": line 1: the label 'cat' is not a class index");
  write(list, "a.png -1\n");
  EXPECT_MESSAGE(tp::data::list_file(list), "the label '-1' is not a class index");
  write(list, "# nothing\n");
  EXPECT_MESSAGE(tp::data::list_file(list), list + ": names no image");
  write(list, "a.png 0\ngone.png 1\n");
  EXPECT_MESSAGE(tp::data::list_file(list), (dir.path / "gone.png").string() + ": missing (named by " + list + ", line 2)");
}

// --- tar_shards ------------------------------------------------------------------------------------

TEST(TarShards, ScansSamplesWithTheirIdsLabelsAndBytes) {
  tp::data::tar_shards source(shards());
  EXPECT_EQ(source.total(), 24);
  EXPECT_EQ(tp::data::items_per_pass(source), 24);
  const auto folder = tp::data::image_folder((images() / "train").string());
  std::map<std::string, tp::data::image_file> by_name;  // the folder's files by their index
  for (const auto& f : folder) by_name[fs::path(f.path).stem().string()] = f;
  std::int64_t expected_id = 0;
  for (int pass = 0; pass < 2; ++pass, expected_id = 0)
    for (const auto& sample : source) {
      EXPECT_EQ(sample.id, expected_id++);
      const auto key = sample.path.substr(sample.path.rfind(':') + 1);
      EXPECT_EQ(sample.path, shards()[static_cast<std::size_t>(sample.id / 6)] + ":" + key);
      const auto& file = by_name.at(key.substr(1));  // keys have 6 digits, file names 5
      EXPECT_EQ(sample.label, file.label);
      EXPECT_EQ(sample.bytes, tp::data::read_file(file.path));
    }
  EXPECT_EQ(expected_id, 0);
  EXPECT_EQ(source.passes(), 2u);
}

TEST(TarShards, RanksReadWholeShardsAndYieldTheSameCountEachPass) {
  TempDir dir("tar_shares");
  auto files = shards();
  files.pop_back();  // 3 shards: rank 0 of 2 holds 12 samples, rank 1 holds 6: both yield 6
  for (std::uint64_t seed : {0, 5}) {
    const auto shuffle = seed ? std::optional(seed) : std::nullopt;
    tp::data::tar_shards rank0(files, 0, 2, shuffle), rank1(files, 1, 2, shuffle);
    EXPECT_EQ(tp::data::items_per_pass(rank0), 6);
    std::set<std::vector<std::int64_t>> orders;
    for (int pass = 0; pass < 6; ++pass) {
      const auto mine = ids_of_files(rank0), theirs = ids_of_files(rank1);
      EXPECT_EQ(mine.size(), 6u);
      EXPECT_EQ(theirs, (std::vector<std::int64_t>{6, 7, 8, 9, 10, 11}));  // shard 1
      for (auto id : mine) EXPECT_TRUE(id < 6 || id >= 12) << id;       // shards 0 and 2
      orders.insert(mine);
    }
    EXPECT_EQ(orders.size(), seed ? 2u : 1u);  // shuffle_seed: shard 0 or shard 2 first
  }
  EXPECT_MESSAGE(tp::data::tar_shards(files, 0, 4), "3 shard files for 4 ranks; every rank reads whole shards");
}

TEST(TarShards, RefusesMissingCutShortAndIncompleteShardsNamingThem) {
  TempDir dir("tar_bad");
  const auto good = shards()[0];
  const auto missing = (dir.path / "gone.tar").string();
  EXPECT_MESSAGE(tp::data::tar_shards({good, missing}), missing + ": missing");

  const auto bytes = tp_test::read_all(good);
  for (std::size_t cut : {std::size_t{700}, std::size_t{1000}, std::size_t{2560}, bytes.size() / 2}) {  // 2560: between samples
    const auto shard = (dir.path / ("cut" + std::to_string(cut) + ".tar")).string();
    write(shard, bytes.substr(0, cut));
    const auto message = message_of([&] { tp::data::tar_shards{{shard}}; });
    EXPECT_EQ(message.find(shard + ": cut short"), 0u) << message;
    EXPECT_NE(message.find("not fully written or copied"), std::string::npos) << message;
  }
  write(dir.path / "junk.tar", std::string(2000, 'x'));
  EXPECT_MESSAGE(tp::data::tar_shards({(dir.path / "junk.tar").string()}), (dir.path / "junk.tar").string() + ": is not a tar file");
  write(dir.path / "empty.tar", "");
  EXPECT_MESSAGE(tp::data::tar_shards({(dir.path / "empty.tar").string()}), "empty.tar: is empty");

  const auto tar = [&](const std::string& name, const std::string& members) {
    const auto folder = dir.path / name;
    tp_test::run("mkdir -p " + folder.string() + " && cd " + folder.string() + " && " + members + " && tar cf ../" + name + ".tar *");
    return (dir.path / (name + ".tar")).string();
  };
  const auto no_label = tar("no_label", "echo 1 > a.cls && echo x > a.png && echo x > b.png");
  EXPECT_MESSAGE(tp::data::tar_shards({no_label}), no_label + ":b: sample without a label (no b.cls member)");
  const auto no_image = tar("no_image", "echo 1 > a.cls && echo x > a.txt");
  EXPECT_MESSAGE(tp::data::tar_shards({no_image}), no_image + ":a: sample without an image");
  const auto bad_label = tar("bad_label", "echo seven > a.cls && echo x > a.jpg");
  EXPECT_MESSAGE(tp::data::tar_shards({bad_label}), bad_label + ":a: the label member a.cls is not a class index");
}

// --- decode_images -----------------------------------------------------------------------------------

TEST(DecodeImages, SeedsEachExampleByPassAndIdAndKeepsTheOrderOnAnyThreadCount) {
  const auto folder = tp::data::image_folder((images() / "train").string());
  for (int threads : {1, 3}) {
    auto flow = folder | tp::data::shuffle(2) | tp::data::decode_images(seed_and_sum{}, threads, 7);
    for (std::uint64_t pass = 0; pass < 2; ++pass) {
      const auto order = tp::data::detail::permutation(24, 2, pass);
      std::size_t i = 0;
      for (const auto& example : flow) {
        const auto& file = folder[static_cast<std::size_t>(order[i++])];
        EXPECT_EQ(example.data[0].item<std::int64_t>(), static_cast<std::int64_t>(tp::data::example_seed(7, pass, static_cast<std::uint64_t>(file.id))));
        const auto bytes = tp::data::read_file(file.path);
        EXPECT_EQ(example.data[1].item<std::int64_t>(), std::accumulate(bytes.begin(), bytes.end(), std::int64_t{0}));
        EXPECT_EQ(example.target.dim(), 0);
        EXPECT_EQ(example.target.scalar_type(), torch::kLong);
        EXPECT_EQ(example.target.item<std::int64_t>(), file.label);
      }
      EXPECT_EQ(i, 24u);
    }
    EXPECT_EQ(tp::data::save_state(flow), (tp::data::dataflow_state{2, 2}));
  }
}

TEST(DecodeImages, GivesWhatTheTransformsMakeOfEachFileWithItsSeed) {
  const auto folder = tp::data::image_folder((images() / "train").string());
  auto flow = folder | tp::data::decode_images(augment(), 2, 7);
  for (std::uint64_t pass = 0; pass < 2; ++pass) {
    std::size_t i = 0;
    for (const auto& example : flow) {
      const auto& file = folder[i++];
      const auto bytes = tp::data::read_file(file.path);
      const auto expected = augment()(bytes, file.path, tp::data::example_seed(7, pass, static_cast<std::uint64_t>(file.id)));
      EXPECT_TRUE(torch::equal(example.data, expected)) << file.path;
      EXPECT_EQ(example.data.sizes(), (std::vector<std::int64_t>{1, 20, 20}));
    }
  }
}

// Saved after 7 batches of 5 (inside pass 2) and after 5 (at pass 1's end): the resumed input
// gives bitwise the batches the uninterrupted one gave.
template <class MakeFlow>
void expect_bitwise_resume(MakeFlow make_flow) {
  for (int threads : {1, 2})
    for (int drained : {7, 5}) {
      SCOPED_TRACE(std::to_string(threads) + " threads, after " + std::to_string(drained) + " batches");
      tp::QueueInput first(make_flow(threads), 3);
      drain(first, drained);
      const auto where = first.position();
      const auto expected = drain(first, 8);
      tp::QueueInput resumed(make_flow(threads), 3);
      resumed.restore(where);
      EXPECT_EQ(resumed.position(), where);
      expect_same_batches(drain(resumed, 8), expected);
    }
}

TEST(DecodeImages, ResumeFromAFolderIsBitwise) {
  const auto folder = tp::data::image_folder((images() / "train").string());
  expect_bitwise_resume([&](int threads) {
    return folder | tp::data::shuffle(3) | tp::data::shard(0, 1) | tp::data::decode_images(augment(), threads, 7) | tp::data::batch(5);
  });
}

TEST(DecodeImages, ResumeFromTarShardsIsBitwise) {
  expect_bitwise_resume([](int threads) {  // the shard's own skip: no view counts passes above it but decode_images
    return tp::data::tar_shards(shards(), 0, 1, 4) | tp::data::decode_images(augment(), threads, 7) | tp::data::batch(5);
  });
  expect_bitwise_resume([](int threads) {  // the input replays the pass: shuffle_buffer's order is per rank
    return tp::data::tar_shards(shards(), 0, 1, 4) | tp::data::shuffle_buffer(6, 9) | tp::data::decode_images(augment(), threads, 7) |
           tp::data::batch(5);
  });
}

TEST(DecodeImages, AFolderPositionFromTwoRanksGoesOnOnOne) {
  const auto folder = tp::data::image_folder((images() / "train").string());
  auto flow = [&](int rank, int world) {
    return folder | tp::data::shuffle(3) | tp::data::shard(rank, world) | tp::data::decode_images(seed_and_sum{}, 2, 7) | tp::data::batch(2);
  };
  tp::QueueInput rank0(flow(0, 2)), rank1(flow(1, 2)), whole(flow(0, 1));
  auto read = drain(rank0, 3);
  const auto other = drain(rank1, 3);
  read.insert(read.end(), other.begin(), other.end());
  const auto where = rank0.position();
  EXPECT_EQ(where.datapoints, 12);
  const auto all = ids_of(drain(whole, 12), 0);  // the pass's global order

  tp::QueueInput resumed(flow(0, 1));
  resumed.restore(where);
  auto rest = ids_of(drain(resumed, 6), 0);
  auto seen = ids_of(read, 0);
  std::sort(seen.begin(), seen.end());
  std::vector<std::int64_t> first(all.begin(), all.begin() + 12);
  std::sort(first.begin(), first.end());
  EXPECT_EQ(seen, first);
  EXPECT_EQ(rest, std::vector<std::int64_t>(all.begin() + 12, all.end()));
}

TEST(DecodeImages, ATarPositionMidPassRefusesAnotherWorldSizeAndChangesNothing) {
  auto flow = [](int rank, int world) {
    return tp::data::tar_shards(shards(), rank, world) | tp::data::decode_images(seed_and_sum{}, 2, 7) | tp::data::batch(3);
  };
  tp::QueueInput two(flow(0, 2));
  drain(two, 2);
  tp::QueueInput one(flow(0, 1));
  const auto before = drain(one, 1);
  const auto message = message_of([&] { one.restore(two.position()); });
  EXPECT_NE(message.find("tp::data::tar_shards: the position was saved on 2 ranks, 12 datapoints into a pass"), std::string::npos) << message;
  EXPECT_NE(message.find("Resume on 2 ranks, or from a checkpoint taken at the end of a pass"), std::string::npos) << message;
  EXPECT_EQ(ids_of(drain(one, 1), 0), (std::vector<std::int64_t>{3, 4, 5}));  // went on where it was
  EXPECT_EQ(ids_of(before, 0), (std::vector<std::int64_t>{0, 1, 2}));

  drain(two, 2);  // the end of the pass: 4 batches of 3 on each rank
  tp::QueueInput resumed(flow(0, 1));
  resumed.restore(two.position());
  EXPECT_EQ(ids_of(drain(resumed, 2), 1), (std::vector<std::int64_t>{0, 1, 2, 3, 4, 5}));  // the next pass, whole
}

// Tensors that lie one after the other in memory made to be batched in place (decode_images'
// batches) are batched as a view of it; any others are stacked into new memory, so that a
// batch never aliases a user's data. The values are the same either way.
TEST(DecodeImages, CollatingAdjacentTensorsOfABatchBufferCopiesNothing) {
  const auto pool = std::make_shared<tp::data::detail::buffer_pool>();
  auto buffer = pool->take({4, 2, 3}, torch::kFloat);
  buffer.copy_(torch::arange(24, torch::kFloat).view({4, 2, 3}));
  const tp::data::collate_fn collate;
  auto in_place = collate({buffer[0], buffer[1], buffer[2]});
  EXPECT_EQ(in_place.data_ptr(), buffer.data_ptr());
  EXPECT_TRUE(torch::equal(in_place, buffer.slice(0, 0, 3)));
  EXPECT_TRUE(in_place.is_contiguous());
  const auto users = buffer.clone();  // the same values in a user's tensor
  for (const auto& items : {std::vector<torch::Tensor>{buffer[1], buffer[0]}, std::vector<torch::Tensor>{buffer[0], buffer[2]},
                            std::vector<torch::Tensor>{buffer[0], buffer[1].clone()}, std::vector<torch::Tensor>{users[0], users[1]}}) {
    const auto stacked = collate(items);
    EXPECT_TRUE(torch::equal(stacked, torch::stack(items)));
    EXPECT_NE(stacked.data_ptr(), items[0].data_ptr());
  }
  // The memory goes back to the pool when the last view of it goes, and serves the next buffer.
  const auto* memory = buffer.data_ptr();
  buffer = torch::Tensor();
  EXPECT_NE(pool->take({4, 2, 3}, torch::kFloat).data_ptr(), memory);  // in_place still holds it
  const auto* held = in_place.data_ptr();
  in_place = torch::Tensor();
  EXPECT_EQ(pool->take({24}, torch::kFloat).data_ptr(), held);
}

// The pool keeps as many free buffers as were in use at once: at a pass's end every batch and
// its labels come back before the next pass takes one, and none may go back to the kernel (to be
// faulted in again, page by page). Sizes no longer asked for go first when it is full.
TEST(DecodeImages, BatchBuffersOutliveAPassEndAndUnusedSizesAgeOut) {
  const auto pool = std::make_shared<tp::data::detail::buffer_pool>();
  std::vector<torch::Tensor> batches;
  for (int i = 0; i < 12; ++i) batches.push_back(pool->take({4, 3, 8, 8}, torch::kFloat)), batches.push_back(pool->take({4}, torch::kLong));
  std::set<const void*> memory;
  for (const auto& b : batches) memory.insert(b.data_ptr());
  batches.clear();
  EXPECT_EQ(pool->free_buffers(), 24u);
  for (int i = 0; i < 12; ++i) batches.push_back(pool->take({4, 3, 8, 8}, torch::kFloat)), batches.push_back(pool->take({4}, torch::kLong));
  for (const auto& b : batches) EXPECT_TRUE(memory.contains(b.data_ptr())) << "a buffer was made anew";
  EXPECT_EQ(pool->free_buffers(), 0u);
  batches.clear();
  // Another size: the pool holds at most 24 free, and the new ones push out the longest free.
  for (int i = 0; i < 24; ++i) batches.push_back(pool->take({2, 50}, torch::kFloat));
  std::set<const void*> resized;
  for (const auto& b : batches) resized.insert(b.data_ptr());
  batches.clear();
  EXPECT_EQ(pool->free_buffers(), 24u);
  for (int i = 0; i < 24; ++i) batches.push_back(pool->take({2, 50}, torch::kFloat));
  for (const auto& b : batches) EXPECT_TRUE(resized.contains(b.data_ptr())) << "a buffer was made anew";
  EXPECT_EQ(pool->free_buffers(), 0u);  // the first size's buffers were the ones given back
}

// batch(n) right after decode_images: each batch's images are decoded into one buffer. Batches
// kept hold what the transforms made of their files while later ones are made, share no memory
// with one another, and the last, shorter batch of a pass is right too.
TEST(DecodeImages, BatchesDecodedInPlaceHoldTheirOwnImages) {
  const auto folder = tp::data::image_folder((images() / "train").string());
  for (int threads : {1, 2}) {
    auto flow = folder | tp::data::decode_images(augment(), threads, 7) | tp::data::batch(5);
    for (std::uint64_t pass = 0; pass < 2; ++pass) {
      std::vector<torch::data::Example<>> held;
      for (const auto& b : flow) held.push_back(b);
      ASSERT_EQ(held.size(), 5u);
      EXPECT_EQ(held.back().data.size(0), 4);
      held[0].data.fill_(-100);  // a batch is its own: the others do not change
      std::size_t i = 5;
      for (std::size_t k = 1; k < held.size(); ++k)
        for (std::int64_t j = 0; j < held[k].data.size(0); ++j, ++i) {
          const auto& file = folder[i];
          const auto expected = augment()(tp::data::read_file(file.path), file.path, tp::data::example_seed(7, pass, std::uint64_t(file.id)));
          EXPECT_TRUE(torch::equal(held[k].data[j], expected)) << file.path << " pass " << pass;
          EXPECT_EQ(held[k].target[j].item<std::int64_t>(), file.label);
        }
      EXPECT_EQ(i, 24u);
    }
  }
}

TEST(DecodeImages, ABadFileIsAnErrorNamingItOrASkipCountedEachPass) {
  TempDir dir("decode_bad");
  fs::copy(images() / "train", dir.path, fs::copy_options::recursive);
  const auto folder0 = tp::data::image_folder(dir.path.string());
  const auto truncated = folder0[3].path, not_png = folder0[10].path;
  const auto bytes = tp_test::read_all(truncated);
  write(truncated, bytes.substr(0, bytes.size() / 2));
  write(not_png, "this is not a PNG file at all");
  const auto folder = tp::data::image_folder(dir.path.string());
  for (int threads : {1, 2}) {
    auto failing = folder | tp::data::decode_images(augment(), threads, 7) | tp::data::batch(4);
    tp::QueueInput input(failing);
    try {
      drain(input, 6);
      FAIL() << "no error";
    } catch (const tp::data::bad_file& e) {
      EXPECT_EQ(e.path(), truncated) << e.what();
    }
    EXPECT_THROW(input.next_batch(), tp::data::bad_file);  // and again: nothing waits

    auto skipping = folder | tp::data::decode_images(augment(), threads, 7, tp::data::bad_files::skip) | tp::data::batch(4);
    testing::internal::CaptureStderr();
    std::int64_t n = 0;
    for (int pass = 0; pass < 2; ++pass)
      for (const auto& b : skipping) n += b.data.size(0);
    const auto said = testing::internal::GetCapturedStderr();
    EXPECT_EQ(n, 2 * 22);
    const auto& decoded = skipping.base();
    EXPECT_EQ(decoded.skipped(), 4);
    EXPECT_EQ(decoded.passes(), 2u);
    EXPECT_FALSE(decoded.keeps_order());
    EXPECT_NE(said.find("tp::data::decode_images: skipped 2 bad files in pass 1 (the first: " + truncated + ": "), std::string::npos) << said;
    EXPECT_NE(said.find("skipped 2 bad files in pass 2"), std::string::npos) << said;
  }
}

TEST(DecodeImages, SaysHowManyBatchesAPassHolds) {
  const auto folder = tp::data::image_folder((images() / "train").string());
  tp::QueueInput from_folder(folder | tp::data::shuffle(1) | tp::data::shard(1, 2) | tp::data::decode_images(augment(), 1, 7) |
                             tp::data::batch(5));
  EXPECT_EQ(from_folder.batches_per_pass(), 3);  // 12 examples
  tp::QueueInput from_shards(tp::data::tar_shards(shards(), 1, 2) | tp::data::shuffle_buffer(4, 1) |
                             tp::data::decode_images(augment(), 1, 7) | tp::data::batch(5));
  EXPECT_EQ(from_shards.batches_per_pass(), 3);
}

// --- batches for a GPU -----------------------------------------------------------------------------

// StagingInput keeps its inner input's place (on a GPU: the staged batch's): a run resumed
// through it gives bitwise the batches the uninterrupted one gave (the image_folder example's
// input). On the CPU it passes batches through; where there is a GPU, this runs there.
TEST(DecodeImages, ResumeThroughStagingInputIsBitwise) {
  const auto folder = tp::data::image_folder((images() / "train").string());
  const auto flow = [&] { return folder | tp::data::shuffle(3) | tp::data::decode_images(augment(), 2, 7) | tp::data::batch(5); };
  const auto device = torch::cuda::is_available() ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  for (int drained : {7, 5}) {
    SCOPED_TRACE("after " + std::to_string(drained) + " batches");
    tp::StagingInput first(tp::QueueInput(flow(), 3), device);
    drain(first, drained);
    const auto where = first.position();
    const auto expected = drain(first, 8);
    tp::StagingInput resumed(tp::QueueInput(flow(), 3), device);
    resumed.restore(where);
    EXPECT_EQ(resumed.position(), where);
    const auto got = drain(resumed, 8);
    for (const auto& b : got) EXPECT_EQ(b.data.device(), device);
    expect_same_batches(got, expected);
  }
}

// For a CUDA device the images are decoded straight into pinned memory (nothing copies a batch
// there), and the GPU gets exactly the batches the CPU makes, pass after pass: a pinned buffer
// goes back to its pool, to be written again, only once its copy to the GPU is done.
TEST(DecodeImages, OnAGpuBatchesAreDecodedIntoPinnedMemoryAndStagedExactly) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs LibTorch with CUDA and a GPU (checked on the H100 run, bench/README)";
  const auto folder = tp::data::image_folder((images() / "train").string());
  const auto flow = [&] { return folder | tp::data::shuffle(3) | tp::data::decode_images(augment(), 2, 7) | tp::data::batch(5); };
  tp::QueueInput pinned(flow(), 3);
  pinned.pin_memory(true);
  const auto first = pinned.next_batch();
  EXPECT_TRUE(first.data.is_pinned());
  EXPECT_TRUE(first.target.is_pinned());
  EXPECT_EQ(first.data.storage().data_ptr().get_deleter(), &tp::data::detail::free_batch_memory);  // decoded there, not copied

  tp::FeedInput fed(flow());
  fed.pin_memory(true);
  EXPECT_EQ(fed.next_batch().data.storage().data_ptr().get_deleter(), &tp::data::detail::free_batch_memory);
  tp::DummyInput dummy(torch::ones({2, 3}));
  dummy.pin_memory(true);
  EXPECT_TRUE(dummy.next_batch().is_pinned());

  tp::StagingInput staged(tp::QueueInput(flow(), 3), torch::Device(torch::kCUDA, 0));
  tp::QueueInput on_cpu(flow(), 3);
  for (int i = 0; i < 15; ++i) {  // 3 passes of 5 batches
    const auto gpu = staged.next_batch();
    const auto cpu = on_cpu.next_batch();
    ASSERT_TRUE(gpu.data.is_cuda());
    EXPECT_TRUE(torch::equal(gpu.data.cpu(), cpu.data)) << "batch " << i;
    EXPECT_TRUE(torch::equal(gpu.target.cpu(), cpu.target)) << "batch " << i;
  }
}

TEST(DecodeImages, PinnedMemoryWithoutAGpuIsAClearErrorThatChangesNothing) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "this process has a GPU";
  const auto folder = tp::data::image_folder((images() / "train").string());
  tp::QueueInput input(folder | tp::data::decode_images(augment(), 1, 7) | tp::data::batch(5));
  EXPECT_MESSAGE(input.pin_memory(true), "tp::QueueInput::pin_memory: pinned memory (for copies to a CUDA device) needs LibTorch with CUDA");
  const auto batch = input.next_batch();  // unpinned, as before
  EXPECT_EQ(batch.data.size(0), 5);
  EXPECT_FALSE(batch.data.is_pinned());
  tp::FeedInput fed(folder | tp::data::decode_images(augment(), 1, 7) | tp::data::batch(5));
  EXPECT_MESSAGE(fed.pin_memory(true), "tp::FeedInput::pin_memory: pinned memory (for copies to a CUDA device) needs LibTorch with CUDA");
  EXPECT_EQ(fed.next_batch().data.size(0), 5);
  tp::DummyInput dummy(torch::ones({2, 3}));
  EXPECT_MESSAGE(dummy.pin_memory(true), "tp::DummyInput::pin_memory: pinned memory (for copies to a CUDA device) needs LibTorch with CUDA");
  EXPECT_TRUE(torch::equal(dummy.next_batch(), torch::ones({2, 3})));
}
