// Dataflows, FeedInput and the Fashion-MNIST reader.
#include <gtest/gtest.h>

#include <zlib.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>

#include "support.hpp"

namespace fs = std::filesystem;

namespace {

std::vector<std::int64_t> targets_of(auto&& range) {
  std::vector<std::int64_t> out;
  for (auto&& example : range) {
    auto t = example.target.reshape({-1});
    for (std::int64_t i = 0; i < t.size(0); ++i) out.push_back(t[i].template item<std::int64_t>());
  }
  return out;
}

auto numbered(std::int64_t n) {
  return tp::data::examples(torch::arange(n, torch::kFloat).unsqueeze(1), torch::arange(n, torch::kLong));
}

}  // namespace

TEST(Dataflow, ExamplesPairRowsAndRejectMismatchedTensors) {
  auto flow = numbered(5);
  EXPECT_EQ(targets_of(flow), (std::vector<std::int64_t>{0, 1, 2, 3, 4}));
  try {
    tp::data::examples(torch::zeros({5, 2}), torch::zeros({4}));
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("data [5, 2] and target [4]"), std::string::npos) << e.what();
  }
}

TEST(Dataflow, ShuffleIsASeededPermutationWithANewOrderEveryPass) {
  auto flow = numbered(50) | tp::data::shuffle(3);
  const auto first = targets_of(flow);
  const auto second = targets_of(flow);
  auto sorted = first;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, targets_of(numbered(50)));
  EXPECT_NE(first, second);
  EXPECT_NE(first, targets_of(numbered(50)));
  EXPECT_EQ(flow.passes(), 2u);

  auto again = numbered(50) | tp::data::shuffle(3);
  EXPECT_EQ(targets_of(again), first);
  EXPECT_EQ(targets_of(again), second);
  auto other = numbered(50) | tp::data::shuffle(4);
  EXPECT_NE(targets_of(other), first);
}

TEST(Dataflow, ShuffleOrderIsPinnedAcrossPlatforms) {
  // Our own generator and Fisher-Yates: these values must never change, or old runs would not
  // replay (and resumes would see other data).
  EXPECT_EQ(tp::data::detail::permutation(8, 42, 0), (std::vector<std::int64_t>{5, 3, 4, 2, 0, 7, 1, 6}));
}

TEST(Dataflow, BatchKeepsOrDropsTheRemainder) {
  auto keep = numbered(10) | tp::data::batch(4);
  std::vector<std::int64_t> sizes;
  for (auto&& b : keep) sizes.push_back(b.data.size(0));
  EXPECT_EQ(sizes, (std::vector<std::int64_t>{4, 4, 2}));
  EXPECT_EQ(targets_of(keep), targets_of(numbered(10)));

  auto drop = numbered(10) | tp::data::batch(4, tp::data::remainder::drop);
  sizes.clear();
  for (auto&& b : drop) {
    sizes.push_back(b.data.size(0));
    EXPECT_EQ(b.data.sizes(), (std::vector<std::int64_t>{4, 1}));
  }
  EXPECT_EQ(sizes, (std::vector<std::int64_t>{4, 4}));
  EXPECT_THROW(tp::data::batch(0), std::invalid_argument);
}

TEST(Dataflow, ComposesWithRangeV3Views) {
  auto flow = numbered(6) |
              ranges::views::transform([](torch::data::Example<> e) { return torch::data::Example<>{e.data * 2, e.target}; }) |
              tp::data::shuffle(1) | tp::data::batch(3);
  for (auto&& b : flow) EXPECT_TRUE(torch::equal(b.data.squeeze(1), b.target.to(torch::kFloat) * 2));
}

TEST(FeedInput, StartsANewPassWhenTheDataflowEnds) {
  tp::FeedInput input(numbered(5) | tp::data::shuffle(9) | tp::data::batch(2));
  std::multiset<std::int64_t> seen;
  std::vector<std::int64_t> sizes;
  for (int i = 0; i < 6; ++i) {
    auto b = input.next_batch();
    sizes.push_back(b.data.size(0));
    for (auto v : targets_of(std::vector{b})) seen.insert(v);
  }
  EXPECT_EQ(sizes, (std::vector<std::int64_t>{2, 2, 1, 2, 2, 1}));
  EXPECT_EQ(input.passes(), 2);
  for (std::int64_t v = 0; v < 5; ++v) EXPECT_EQ(seen.count(v), 2u);
}

TEST(FeedInput, AnEmptyDataflowIsAClearError) {
  tp::FeedInput input(numbered(3) | tp::data::batch(4, tp::data::remainder::drop));
  try {
    input.next_batch();
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("the dataflow gave no datapoint in pass 1"), std::string::npos) << e.what();
  }
}

TEST(FeedInput, TrainsThroughTheTrainer) {
  auto batch = tp_test::regression_batch(64);
  tp::Trainer trainer(tp::FeedInput(tp::data::examples(batch.data, batch.target) | tp::data::shuffle(0) |
                                    tp::data::batch(16)),
                      tp_test::linear_desc(0.05), tp::SingleDevice(), tp::TrainOptions().steps_per_epoch(10).max_epoch(20));
  trainer.train();
  EXPECT_LT(trainer.last_cost().item<double>(), 1e-3);
  EXPECT_EQ(trainer.input().passes(), 50);
}

// --- the Fashion-MNIST reader ------------------------------------------------------------------------

class IdxFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("tp_idx_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes bytes gzip-compressed.
  fs::path write(const std::string& name, const std::vector<std::uint8_t>& bytes) {
    const auto path = dir_ / name;
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
    gzclose(f);
    return path;
  }
  static std::vector<std::uint8_t> idx(std::vector<std::uint32_t> dims, std::size_t data_bytes, std::uint8_t fill = 3) {
    std::vector<std::uint8_t> b = {0, 0, 0x08, static_cast<std::uint8_t>(dims.size())};
    for (auto d : dims)
      for (int shift : {24, 16, 8, 0}) b.push_back(static_cast<std::uint8_t>(d >> shift));
    b.insert(b.end(), data_bytes, fill);
    return b;
  }
  std::string error_of(auto&& f) {
    try {
      f();
    } catch (const std::exception& e) {
      return e.what();
    }
    return "no error";
  }
  fs::path dir_;
};

TEST_F(IdxFiles, ReadsAValidFile) {
  auto path = write("x.gz", idx({2, 3}, 6, 9));
  auto t = tp::data::read_idx_ubyte(path, 2);
  EXPECT_EQ(t.sizes(), (std::vector<std::int64_t>{2, 3}));
  EXPECT_EQ(t.sum().item<int>(), 54);
}

TEST_F(IdxFiles, ReportsTruncatedBadAndMissingFilesByPath) {
  auto truncated = write("t.gz", idx({2, 3}, 5));
  EXPECT_NE(error_of([&] { tp::data::read_idx_ubyte(truncated, 2); })
                .find(truncated.string() + " is not a valid IDX file: the header announces 6 bytes of data but the file holds 5"),
            std::string::npos);
  auto bad_magic = write("m.gz", {1, 2, 3, 4, 5});
  EXPECT_NE(error_of([&] { tp::data::read_idx_ubyte(bad_magic, 1); }).find("magic number"), std::string::npos);
  auto wrong_dims = write("d.gz", idx({6}, 6));
  EXPECT_NE(error_of([&] { tp::data::read_idx_ubyte(wrong_dims, 3); }).find("it has 1 dimensions, 3 were expected"),
            std::string::npos);
  const auto missing = error_of([&] { tp::data::read_idx_ubyte(dir_ / "nope.gz", 1); });
  EXPECT_NE(missing.find((dir_ / "nope.gz").string() + " does not exist"), std::string::npos) << missing;
  EXPECT_NE(missing.find("apt-get install dataset-fashion-mnist"), std::string::npos) << missing;
  std::ofstream(dir_ / "garbage.gz") << "\x1f\x8b\x08 not really gzip";
  EXPECT_NE(error_of([&] { tp::data::read_idx_ubyte(dir_ / "garbage.gz", 1); }).find("garbage.gz"), std::string::npos);
}

TEST_F(IdxFiles, ChecksThatImagesAndLabelsAgree) {
  write("t10k-images-idx3-ubyte.gz", idx({3, 28, 28}, 3 * 28 * 28));
  write("t10k-labels-idx1-ubyte.gz", idx({2}, 2, 1));
  EXPECT_NE(error_of([&] { tp::data::fashion_mnist(tp::data::split::test, dir_); }).find("holds 3 images but"),
            std::string::npos);
  write("t10k-labels-idx1-ubyte.gz", idx({3}, 3, 12));
  EXPECT_NE(error_of([&] { tp::data::fashion_mnist(tp::data::split::test, dir_); }).find("a label above 9"),
            std::string::npos);
  write("t10k-labels-idx1-ubyte.gz", idx({3}, 3, 7));
  auto ok = tp::data::fashion_mnist(tp::data::split::test, dir_);
  EXPECT_EQ(ok.images.sizes(), (std::vector<std::int64_t>{3, 1, 28, 28}));
  EXPECT_EQ(ok.labels.dtype(), torch::kLong);
}

TEST_F(IdxFiles, ABadEnvironmentVariableIsNamed) {
  ::setenv("TP_FASHION_MNIST_DIR", (dir_ / "missing").c_str(), 1);
  const auto what = error_of([] { tp::data::fashion_mnist_dir(); });
  ::unsetenv("TP_FASHION_MNIST_DIR");
  EXPECT_NE(what.find("TP_FASHION_MNIST_DIR is set to '" + (dir_ / "missing").string() + "', which is not a folder"),
            std::string::npos) << what;
  ::setenv("TP_FASHION_MNIST_DIR", dir_.c_str(), 1);
  EXPECT_EQ(tp::data::fashion_mnist_dir(), dir_);
  ::unsetenv("TP_FASHION_MNIST_DIR");
}

TEST(FashionMnist, ReadsDebiansDataset) {
  auto test = tp::data::fashion_mnist(tp::data::split::test);
  EXPECT_EQ(test.images.sizes(), (std::vector<std::int64_t>{10000, 1, 28, 28}));
  EXPECT_EQ(test.images.dtype(), torch::kUInt8);
  EXPECT_EQ(std::get<0>(torch::_unique(test.labels)).numel(), 10);
  EXPECT_EQ(test.labels.bincount().min().item<std::int64_t>(), 1000);  // balanced classes
}

// --- batches ------------------------------------------------------------------------------------------

TEST(Batch, DescribesShapesOfAnyNesting) {
  EXPECT_EQ(tp::describe_shapes(torch::zeros({2, 3})), "[2, 3]");
  EXPECT_EQ(tp::describe_shapes(std::make_tuple(torch::zeros({1}), torch::data::Example<>{torch::zeros({4}), torch::zeros({})})),
            "([1], (data [4], target []))");
  EXPECT_EQ(tp::describe_shapes(std::vector{torch::zeros({5})}), "{[5]}");
}

TEST(Batch, MovingToTheDeviceItIsOnIsFree) {
  auto t = torch::ones({3});
  auto same = tp::to_device(t, torch::kCPU);
  EXPECT_TRUE(same.is_same(t));
}
