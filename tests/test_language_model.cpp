// Language models from token files: TokenFile and its checks, CharacterVocabulary, the windows
// TokenWindows draws (deterministic, each rank its part, resumed exactly on any layout),
// CosineSchedule, weight_decay_groups, clipping on the device, and examples/gpt_model.hpp's GPT
// learning a text whose entropy is known, its weights round-tripped through nanoGPT's layout.
#include <cmath>
#include <fstream>
#include <map>
#include <set>

#include "support.hpp"
#include "../examples/gpt_model.hpp"

namespace {

using tp_test::TempDir;

void lm_write(const std::filesystem::path& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

std::string lm_uint16_bytes(const std::vector<std::uint16_t>& ids) {
  std::string bytes;
  for (const auto id : ids) {
    bytes += static_cast<char>(id & 0xff);
    bytes += static_cast<char>(id >> 8);
  }
  return bytes;
}


TEST(TokenFile, ReadsLittleEndianIdsAndWindows) {
  TempDir dir("token_file");
  lm_write(dir.path / "t.bin", lm_uint16_bytes({1, 258, 3, 40000, 5}));
  tp::data::TokenFile file(dir.path / "t.bin");
  EXPECT_EQ(file.size(), 5);
  EXPECT_EQ(file[1], 258);
  EXPECT_EQ(file[3], 40000);
  const auto w = file.windows({0, 2}, 3);
  EXPECT_TRUE(w.equal(torch::tensor({{1, 258, 3}, {3, 40000, 5}}, torch::kLong)));
  EXPECT_THROW(file.windows({3}, 3), std::out_of_range);
}

TEST(TokenFile, EachBadFileHasItsOwnError) {
  TempDir dir("token_file_bad");
  EXPECT_NE(tp_test::message_of([&] { tp::data::TokenFile(dir.path / "missing.bin"); }).find("cannot be opened"), std::string::npos);
  lm_write(dir.path / "empty.bin", "");
  EXPECT_NE(tp_test::message_of([&] { tp::data::TokenFile(dir.path / "empty.bin"); }).find("is empty"), std::string::npos);
  lm_write(dir.path / "odd.bin", "abc");
  EXPECT_NE(tp_test::message_of([&] { tp::data::TokenFile(dir.path / "odd.bin"); }).find("3 bytes, an odd number"), std::string::npos);
  lm_write(dir.path / "ids.bin", lm_uint16_bytes({1, 2, 70, 3}));
  EXPECT_NE(tp_test::message_of([&] { tp::data::TokenFile(dir.path / "ids.bin", 65); }).find("token 2 of"), std::string::npos);
  EXPECT_NE(tp_test::message_of([&] { tp::data::TokenFile(dir.path / "ids.bin", 65); }).find("is 70, beyond the vocabulary of 65"), std::string::npos);
  tp::data::TokenFile short_file(dir.path / "ids.bin");
  EXPECT_NE(tp_test::message_of([&] { tp::TokenWindows(short_file, tp::TokenWindowsOptions(8, 2)); }).find("holds 4 tokens, fewer than one window of 9"),
            std::string::npos);
}

TEST(CharacterVocabulary, PreparesNanoGptsSplitAndRoundTrips) {
  TempDir dir("characters");
  const std::string text = "héllo wörld\nhello again\n";  // two-byte characters too
  lm_write(dir.path / "input.txt", text);
  const auto prepared = tp::data::prepare_character_tokens(dir.path / "input.txt", dir.path / "data");
  const auto& v = prepared.vocabulary;
  EXPECT_EQ(v.size(), 15);  // \n, space, a d e g h i l n o r w, é, ö: sorted by code point
  const std::int64_t characters = 24;
  tp::data::TokenFile train(prepared.train, v.size()), val(prepared.val, v.size());
  EXPECT_EQ(train.size(), static_cast<std::int64_t>(characters * 0.9));
  EXPECT_EQ(train.size() + val.size(), characters);
  std::vector<std::int64_t> all;
  for (std::int64_t i = 0; i < train.size(); ++i) all.push_back(train[i]);
  for (std::int64_t i = 0; i < val.size(); ++i) all.push_back(val[i]);
  EXPECT_EQ(v.decode(all), text);
  const auto loaded = tp::data::CharacterVocabulary::load(prepared.vocabulary_file);
  EXPECT_EQ(loaded.decode(all), text);
  EXPECT_NE(tp_test::message_of([&] { v.encode("x"); }).find("not in the vocabulary"), std::string::npos);
  lm_write(dir.path / "latin1.txt", "caf\xe9!");
  EXPECT_NE(tp_test::message_of([&] { tp::data::prepare_character_tokens(dir.path / "latin1.txt", dir.path / "x"); }).find("not UTF-8"), std::string::npos);
  // Prepared again into the same folder: the same text keeps the files; another text is refused
  // and changes nothing (a run's vocabulary is what its checkpoints mean).
  const auto before = tp_test::read_all(prepared.vocabulary_file) + tp_test::read_all(prepared.train) + tp_test::read_all(prepared.val);
  (void)tp::data::prepare_character_tokens(dir.path / "input.txt", dir.path / "data");
  lm_write(dir.path / "other.txt", "another text, other characters: xyz\n");
  EXPECT_NE(tp_test::message_of([&] { tp::data::prepare_character_tokens(dir.path / "other.txt", dir.path / "data"); })
                .find("data holds the tokens of another text (its vocab.json is not what"),
            std::string::npos);
  EXPECT_EQ(tp_test::read_all(prepared.vocabulary_file) + tp_test::read_all(prepared.train) + tp_test::read_all(prepared.val), before);
  // A folder or a device as the text: named, before reading.
  EXPECT_NE(tp_test::message_of([&] { tp::data::prepare_character_tokens(dir.path, dir.path / "y"); }).find("is a folder, not a file"),
            std::string::npos);
  EXPECT_NE(tp_test::message_of([&] { tp::data::prepare_character_tokens("/dev/zero", dir.path / "y"); }).find("'/dev/zero' is not a regular file"),
            std::string::npos);
  lm_write(dir.path / "bad.json", "{\"vocab_size\": 2, \"chars\": [\"b\", \"a\"]}");
  EXPECT_NE(tp_test::message_of([&] { tp::data::CharacterVocabulary::load(dir.path / "bad.json"); }).find("code-point order"), std::string::npos);
}

// A file of n tokens counting 0, 1, 2, ... (mod 60000): a window's first token is its offset.
tp::data::TokenFile lm_counting_file(const TempDir& dir, std::uint16_t n) {
  std::vector<std::uint16_t> ids(n);
  for (std::uint16_t i = 0; i < n; ++i) ids[i] = i;
  lm_write(dir.path / "count.bin", lm_uint16_bytes(ids));
  return tp::data::TokenFile(dir.path / "count.bin");
}

std::vector<std::int64_t> lm_firsts(const torch::data::Example<>& b) {
  auto col = b.data.select(1, 0).contiguous();
  return {col.data_ptr<std::int64_t>(), col.data_ptr<std::int64_t>() + col.numel()};
}

TEST(TokenWindows, TargetsAreTheWindowsShiftedByOne) {
  TempDir dir("windows_shift");
  tp::TokenWindows input(lm_counting_file(dir, 1000), tp::TokenWindowsOptions(16, 4).seed(3));
  const auto b = input.next_batch();
  ASSERT_EQ(b.data.sizes(), torch::IntArrayRef({4, 16}));
  EXPECT_TRUE(b.target.equal(b.data + 1));
  EXPECT_LE(b.data.max().item<std::int64_t>() + 1, 999);  // a whole window of 17 lies within the file
}

TEST(TokenWindows, RanksDrawDisjointPartsOfOneGlobalBatch) {
  TempDir dir("windows_ranks");
  const auto file = lm_counting_file(dir, 50000);
  // One rank with 4 micro-batches of 3 against 2 ranks with 2 each, and 4 ranks with 1 each.
  const auto steps_of = [&](int world, int micro, int steps) {
    std::vector<std::multiset<std::int64_t>> per_step(static_cast<std::size_t>(steps));
    for (int r = 0; r < world; ++r) {
      tp::TokenWindows input(file, tp::TokenWindowsOptions(8, 3).seed(11).rank(r).world_size(world).micro_batches(micro));
      for (int s = 0; s < steps; ++s)
        for (int m = 0; m < micro; ++m)
          for (const auto x : lm_firsts(input.next_batch())) per_step[static_cast<std::size_t>(s)].insert(x);
    }
    return per_step;
  };
  const auto one = steps_of(1, 4, 3);
  EXPECT_EQ(one, steps_of(2, 2, 3));
  EXPECT_EQ(one, steps_of(4, 1, 3));
  EXPECT_NE(one[0], one[1]);  // each step its own windows
  tp::TokenWindows other_seed(file, tp::TokenWindowsOptions(8, 12).seed(12));
  const auto x = lm_firsts(other_seed.next_batch());
  EXPECT_NE(std::multiset<std::int64_t>(x.begin(), x.end()), one[0]);
}

TEST(TokenWindows, ResumesExactlyOnAnotherLayout) {
  TempDir dir("windows_resume");
  const auto file = lm_counting_file(dir, 50000);
  // Two ranks of 2 micro-batches run 5 steps; rank 0's position resumes one rank of 4.
  tp::TokenWindows rank0(file, tp::TokenWindowsOptions(8, 3).seed(5).world_size(2).rank(0).micro_batches(2));
  for (int i = 0; i < 10; ++i) rank0.next_batch();
  tp::TokenWindows resumed(file, tp::TokenWindowsOptions(8, 3).seed(5).micro_batches(4));
  resumed.restore(rank0.position());
  EXPECT_EQ(resumed.steps(), 5);
  tp::TokenWindows uninterrupted(file, tp::TokenWindowsOptions(8, 3).seed(5).micro_batches(4));
  for (int i = 0; i < 20; ++i) uninterrupted.next_batch();
  for (int i = 0; i < 8; ++i) EXPECT_EQ(lm_firsts(resumed.next_batch()), lm_firsts(uninterrupted.next_batch())) << "batch " << i;
  EXPECT_THROW(resumed.restore(tp::data::position{{}, 3, 7, 2, 3}), std::invalid_argument);  // another input's
}

TEST(TokenWindows, FixedAndSequentialWindowsForEvaluation) {
  TempDir dir("windows_eval");
  const auto file = lm_counting_file(dir, 1000);
  std::vector<std::int64_t> seq;
  for (const auto& e : tp::data::sequential_windows(file, 100)) seq.push_back(e.data[0].item<std::int64_t>());
  EXPECT_EQ(seq, (std::vector<std::int64_t>{0, 100, 200, 300, 400, 500, 600, 700, 800}));  // the last whole window of 101 starts at 800
  std::vector<std::int64_t> a, b;
  for (const auto& e : tp::data::fixed_windows(file, 10, 5, 9)) a.push_back(e.data[0].item<std::int64_t>());
  for (const auto& e : tp::data::fixed_windows(file, 10, 5, 9)) b.push_back(e.data[0].item<std::int64_t>());
  EXPECT_EQ(a, b);
  EXPECT_EQ(std::set<std::int64_t>(a.begin(), a.end()).size(), 5u);
}

TEST(CosineSchedule, NanoGptsLearningRate) {
  tp::CosineSchedule schedule(tp::learning_rate(), 1e-3, 1e-4, 100, 2000);
  EXPECT_DOUBLE_EQ(schedule.value_at(0), 1e-3 / 101);
  EXPECT_DOUBLE_EQ(schedule.value_at(99), 1e-3 * 100 / 101);
  EXPECT_DOUBLE_EQ(schedule.value_at(100), 1e-3);
  EXPECT_NEAR(schedule.value_at(1050), 5.5e-4, 1e-12);  // halfway down
  EXPECT_DOUBLE_EQ(schedule.value_at(2000), 1e-4);
  EXPECT_DOUBLE_EQ(schedule.value_at(5000), 1e-4);
  EXPECT_THROW(tp::CosineSchedule(tp::learning_rate(), 1e-3, 1e-2, 10, 100), std::invalid_argument);
  EXPECT_THROW(tp::CosineSchedule(tp::learning_rate(), 1e-3, 1e-4, 100, 100), std::invalid_argument);
}

TEST(GradientProcessing, ClippingOnTheDeviceGivesTheHostsValues) {
  // clip_global_norm alone stays on the device; recording the norm takes the host's path.
  for (const double scale : {0.1, 10.0}) {
    torch::manual_seed(2);
    std::vector<torch::Tensor> a{torch::randn({7, 5}) * scale, torch::randn({3}) * scale};
    std::vector<torch::Tensor> b{a[0].clone(), a[1].clone()};
    tp::GradientProcessing().clip_global_norm(1.0).apply(a);
    tp::GradientProcessing().clip_global_norm(1.0).record_norm().apply(b);
    EXPECT_TRUE(a[0].equal(b[0]) && a[1].equal(b[1])) << "scale " << scale;
  }
  std::vector<torch::Tensor> inf{torch::tensor({1.0f, std::numeric_limits<float>::infinity()})};
  tp::GradientProcessing().clip_global_norm(1.0).apply(inf);  // a non-finite norm is left alone, as on the host
  EXPECT_EQ(inf[0][0].item<float>(), 1.0f);
}

TEST(GPT, WeightDecayGroupsAndNanoGptsNames) {
  gpt::GPT model(gpt::Config{.block_size = 8, .vocab_size = 11, .n_layer = 2, .n_head = 2, .n_embd = 8, .bias = true});
  torch::optim::AdamWOptions options(1e-3);
  const auto groups = tp::optim::weight_decay_groups(model->parameters(), options, 0.1);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].params().size(), 2u + 2 * 4);      // wte, wpe, and 4 matrices a block
  EXPECT_EQ(groups[1].params().size(), 2u * 8 + 2);      // a block's 4 biases and 2 norms' weights and biases; ln_f's
  EXPECT_EQ(static_cast<const torch::optim::AdamWOptions&>(groups[1].options()).weight_decay(), 0.0);
  const auto dict = gpt::nanogpt_state_dict(model);
  for (const char* name : {"transformer.wte.weight", "transformer.wpe.weight", "transformer.h.1.attn.c_attn.weight", "transformer.h.0.mlp.c_proj.bias",
                           "transformer.h.0.ln_2.weight", "transformer.ln_f.bias", "lm_head.weight"})
    EXPECT_TRUE(dict.contains(name)) << name;
}

TEST(GPT, WeightsRoundTripThroughNanoGptsCheckpoint) {
  TempDir dir("gpt_ckpt");
  const gpt::Config c{.block_size = 8, .vocab_size = 11, .n_layer = 1, .n_head = 2, .n_embd = 8};
  torch::manual_seed(4);
  gpt::GPT saved(c), loaded(c);
  c10::impl::GenericDict ckpt(c10::StringType::get(), c10::AnyType::get());
  ckpt.insert("model", gpt::nanogpt_state_dict(saved));
  tp::detail::write_torch_save(dir.path / "ckpt.pt", ckpt);
  gpt::load_nanogpt_weights(loaded, dir.path / "ckpt.pt");
  const auto x = torch::randint(0, 11, {2, 8});
  EXPECT_TRUE(saved->forward(x).equal(loaded->forward(x)));
  // An untied head, and a checkpoint of another model, are refused.
  auto untied = gpt::nanogpt_state_dict(saved);
  untied.insert_or_assign("lm_head.weight", torch::zeros({11, 8}));
  ckpt.insert_or_assign("model", untied);
  tp::detail::write_torch_save(dir.path / "untied.pt", ckpt);
  EXPECT_NE(tp_test::message_of([&] { gpt::load_nanogpt_weights(loaded, dir.path / "untied.pt"); }).find("differs from transformer.wte.weight"), std::string::npos);
  gpt::GPT bigger(gpt::Config{.block_size = 8, .vocab_size = 11, .n_layer = 2, .n_head = 2, .n_embd = 8});
  EXPECT_NE(tp_test::message_of([&] { gpt::load_nanogpt_weights(bigger, dir.path / "ckpt.pt"); }).find("missing transformer.h.1"), std::string::npos);
}

// Text from a Markov chain over 12 letters: letter c is followed by c + 1, c + 5 or c + 8 (mod
// 12), with probabilities 0.7, 0.2 and 0.1. Its entropy rate is H = 0.80 nats a character, and a model that
// knows only the letters' frequencies pays ln 12 = 2.48.
std::string lm_markov_text(std::size_t n, std::uint64_t seed) {
  std::string text;
  std::uint64_t state = seed;
  int c = 0;
  for (std::size_t i = 0; i < n; ++i) {
    text += static_cast<char>('a' + c);
    const auto u = static_cast<double>(tp::data::detail::splitmix64(state) >> 11) / 9007199254740992.0;
    c = (c + (u < 0.7 ? 1 : u < 0.9 ? 5 : 8)) % 12;
  }
  return text;
}

struct lm_scalars {
  std::map<std::string, double> values;
  template <class T>
  void on_scalar(T&, std::string_view name, double value) {
    values[std::string(name)] = value;
  }
};

// Learns the chain to within a third of the way from H to ln 12 (0.80 + (2.48 - 0.80) / 3 =
// 1.36 nats) in 400 steps of a one-block GPT: the bound a model that has learned which letters
// follow which clears, and one that has not (ln 12 and above) does not.
TEST(GPT, LearnsATextOfKnownEntropy) {
  TempDir dir("gpt_learns");
  lm_write(dir.path / "markov.txt", lm_markov_text(60000, 1));
  const auto data = tp::data::prepare_character_tokens(dir.path / "markov.txt", dir.path / "data");
  const std::int64_t vocab = data.vocabulary.size(), block = 16, batch = 16;
  torch::manual_seed(1337);
  auto desc = tp::model_desc([vocab] { return gpt::GPT(gpt::Config{.block_size = 16, .vocab_size = vocab, .n_layer = 1, .n_head = 2, .n_embd = 32}); })
                  .tower_function([](const tp::TowerContext&, gpt::GPT& m, const torch::data::Example<>& b) { return gpt::loss(m->forward(b.data), b.target); })
                  .optimizer([](gpt::GPT& m) {
                    auto o = torch::optim::AdamWOptions(3e-3).betas({0.9, 0.99});
                    return torch::optim::AdamW(tp::optim::weight_decay_groups(m->parameters(), o, 0.1), o);
                  });
  auto val = tp::data::fixed_windows(tp::data::TokenFile(data.val, vocab), block, 20 * batch, 1) | tp::data::batch(batch);
  auto loss = [](gpt::GPT& m, const torch::data::Example<>& b) { return tp::outputs{{"loss", gpt::loss(m->forward(b.data), b.target)}}; };
  tp::Trainer trainer(tp::TokenWindows(tp::data::TokenFile(data.train, vocab), tp::TokenWindowsOptions(block, batch).seed(1)), std::move(desc),
                      tp::SingleDevice().gradients(tp::GradientProcessing().clip_global_norm(1.0)),
                      tp::TrainOptions().steps_per_epoch(200).max_epoch(2).model_summary(false),
                      tp::CosineSchedule(tp::learning_rate(), 3e-3, 3e-4, 20, 400), tp::InferenceRunner(std::move(val), loss, tp::ScalarStats({"loss"}, "val_")),
                      lm_scalars{});
  trainer.train();
  const double val_loss = trainer.callback<lm_scalars>().values.at("val_loss");
  EXPECT_LT(val_loss, 0.80 + (std::log(12.0) - 0.80) / 3) << "the chain's entropy rate is 0.80 nats";
  EXPECT_GT(val_loss, 0.75);  // below the entropy rate would be a bug in the loss or the data
}

}  // namespace
