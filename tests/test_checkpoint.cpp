// Checkpoints and exact resume: the file format and its checks, the trainer's state, the savers,
// the stateful callbacks (weight and scalar averages, setters), the log folder. A training
// process killed or interrupted and resumed: test_interrupt.cpp.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/wait.h>
#include <unistd.h>

#include "support.hpp"

namespace fs = std::filesystem;
using namespace tp_test;

// --- the file ------------------------------------------------------------------------------

TEST(Crc32c, MatchesTheStandardCheckValueAndExtends) {
  const std::string text = "123456789";
  EXPECT_EQ(tp::detail::crc32c(text.data(), text.size()), 0xE3069283u);  // the CRC-32C check value
  const auto whole = tp::detail::crc32c(text.data(), text.size());
  EXPECT_EQ(tp::detail::crc32c_extend(tp::detail::crc32c(text.data(), 4), text.data() + 4, 5), whole);
  std::string big(10007, '\0');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 131 + 7);
  const auto* p = reinterpret_cast<const unsigned char*>(big.data());
  EXPECT_EQ(tp::detail::crc32c(big.data(), big.size()), tp::detail::crc32c_table_extend(0xffffffffu, p, big.size()) ^ 0xffffffffu);
}

TEST(CheckpointFile, RoundTripsAndNamesWhatIsWrongWithABadFile) {
  TempDir dir("ckpt_file");
  auto trainer = mlp_trainer(1);
  trainer.train();
  const auto path = dir.path / tp::checkpoint_file_name(trainer.global_step());
  EXPECT_EQ(path.filename(), "model-0000000007.ckpt");
  const auto info = tp::save_checkpoint(trainer, path);
  EXPECT_EQ(info.global_step, 7);
  EXPECT_EQ(tp::read_checkpoint_info(path).global_step, 7);
  EXPECT_EQ(tp::read_checkpoint_info(path).epoch_num, 1);
  EXPECT_EQ(fs::file_size(path), info.payload_bytes + 120);  // torch.save's zip, and tp's trailer as its comment
  EXPECT_NO_THROW(tp::read_checkpoint_payload(path));
  EXPECT_TRUE(fs::exists(path) && !fs::exists(path.string() + ".tmp." + std::to_string(::getpid())));

  const auto bytes = read_all(path);
  auto expect_error = [&](const std::string& content, const std::string& words) {
    const auto bad = dir.path / "bad.ckpt";
    std::ofstream(bad, std::ios::binary) << content;
    try {
      tp::read_checkpoint_payload(bad);
      ADD_FAILURE() << "no error for a file that should be " << words;
    } catch (const tp::checkpoint_error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("bad.ckpt"), std::string::npos) << e.what();
    }
  };
  expect_error(bytes.substr(0, bytes.size() / 2), "is truncated, or not a tp checkpoint: it has no tp trailer at its end");
  expect_error(bytes.substr(0, 20), "is truncated, or not a tp checkpoint");
  expect_error(bytes + "more", "it has no tp trailer at its end");
  auto flipped = bytes;
  flipped[flipped.size() / 2] ^= 0x10;
  expect_error(flipped, "is corrupt: its checksum does not match");
  expect_error("{\"not\": \"a checkpoint\"} and some more bytes to pass the header size", "is not a tp checkpoint");
}

// A torch.save file without tp's trailer (a checkpoint Python saved again) is checked by its
// zip's CRC-32s: a byte flipped inside a tensor's record is an error, not a weight 5e-7 off.
TEST(CheckpointFile, AFlippedByteInATensorOfAnUnsealedFileIsAnError) {
  TempDir dir("unsealed");
  auto trainer = mlp_trainer(1);
  trainer.train();
  const auto sealed = dir.path / "sealed.ckpt";
  tp::save_checkpoint(trainer, sealed);
  const auto bytes = read_all(sealed);
  // The torch.save zip alone, without the comment that is tp's trailer: what Python saves again.
  auto unsealed = bytes.substr(0, tp::read_checkpoint_info(sealed).payload_bytes);
  unsealed[unsealed.size() - 2] = unsealed[unsealed.size() - 1] = 0;
  const auto path = dir.path / "unsealed.ckpt";
  std::ofstream(path, std::ios::binary) << unsealed;
  ASSERT_FALSE(tp::read_checkpoint_info(path).sealed);
  ASSERT_FALSE(tp::checkpoint_weights(path).empty());  // whole, it reads
  // The first tensor record: its local header ("PK\3\4", name length at +26, extra at +28).
  const auto name = unsealed.find("/data/0");
  ASSERT_NE(name, std::string::npos);
  const auto header = unsealed.rfind(std::string("PK\3\4", 4), name);
  const auto le16 = [&](std::size_t at) { return static_cast<unsigned char>(unsealed[at]) | (static_cast<unsigned char>(unsealed[at + 1]) << 8); };
  unsealed[header + 30 + le16(header + 26) + le16(header + 28) + 1] ^= 0x01;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << unsealed;
  for (const auto& read : std::vector<std::function<void()>>{[&] { (void)tp::checkpoint_weights(path); },
                                                             [&] { (void)tp::detail::read_torch_save(path); },
                                                             [&] { tp::load_checkpoint(trainer, path); }}) {
    try {
      read();
      ADD_FAILURE() << "a flipped byte in a tensor record went unnoticed";
    } catch (const tp::checkpoint_error& e) {
      EXPECT_NE(std::string(e.what()).find("does not match the CRC-32 its zip directory keeps"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("unsealed.ckpt"), std::string::npos) << e.what();
    }
  }
}

// --- the trainer's state --------------------------------------------------------------------

TEST(Resume, FromAnEpochEndGivesTheBitsOfAnUninterruptedRun) {
  auto reference = mlp_trainer(5);
  reference.train();

  TempDir dir("resume_epoch");
  {
    auto first = mlp_trainer(2);
    first.train();
    tp::save_checkpoint(first, dir.path / "two.ckpt");
  }
  torch::manual_seed(12345);  // a different generator state: the checkpoint must bring its own
  auto resumed = mlp_trainer(5);
  tp::load_checkpoint(resumed, dir.path / "two.ckpt");
  EXPECT_EQ(resumed.starting_epoch(), 3);
  EXPECT_EQ(resumed.global_step(), 14);
  resumed.train();
  EXPECT_EQ(resumed.global_step(), 35);
  expect_bitwise_equal(weights_of(resumed), weights_of(reference));
}

TEST(Resume, FromTheMiddleOfAnEpochStartsThatEpochAtTheNextStep) {
  auto reference = mlp_trainer(3);
  reference.train();

  TempDir dir("resume_step");
  {
    auto first = mlp_trainer(3, tp::ModelSaver(dir.path).every_n_steps(10).keep_last(100));
    first.train();
  }
  ASSERT_TRUE(fs::exists(dir.path / tp::checkpoint_file_name(10)));  // step 10: epoch 2, after its 3rd step
  tp_test::Spy spy;
  auto resumed = mlp_trainer(3, spy);
  tp::load_checkpoint(resumed, dir.path / tp::checkpoint_file_name(10));
  resumed.train();
  expect_bitwise_equal(weights_of(resumed), weights_of(reference));
  // The epoch starts again at local step 3 (its before_epoch runs), then epoch 3 runs whole.
  ASSERT_GE(spy.log->size(), 3u);
  EXPECT_EQ((*spy.log)[0], "before_train 1/3/10");
  EXPECT_EQ((*spy.log)[1], "before_epoch 2/3/10");
  EXPECT_EQ((*spy.log)[2], "before_step 2/3/10");
  EXPECT_EQ(tp_test::only(*spy.log, "after_step").size(), 11u);
}

TEST(Resume, ACheckpointOfAnotherModelIsAnErrorNamingTheTensor) {
  TempDir dir("resume_mismatch");
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(2).max_epoch(1));
  trainer.train();
  tp::save_checkpoint(trainer, dir.path / "linear.ckpt");
  auto other = mlp_trainer(1);
  const auto before = weights_of(other);
  try {
    tp::load_checkpoint(other, dir.path / "linear.ckpt");
    FAIL() << "loaded a checkpoint of another model";
  } catch (const tp::checkpoint_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("does not fit this trainer"), std::string::npos) << what;
    EXPECT_NE(what.find("missing keys: a.weight, a.bias, b.weight, b.bias; unexpected keys: bias, weight"), std::string::npos) << what;
  }
  expect_bitwise_equal(weights_of(other), before);  // nothing was changed
}

// A diverged run's checkpoint (NaN in a weight) is refused, naming the weight, before anything
// is loaded: resumed, it would train on NaN to the end and exit as if all were well.
TEST(Resume, ADivergedRunsCheckpointIsRefusedNamingTheWeight) {
  TempDir dir("resume_nan");
  auto diverged = mlp_trainer(1);
  diverged.train();
  {
    torch::NoGradGuard no_grad;
    diverged.model()->b->bias.fill_(std::numeric_limits<float>::quiet_NaN());
  }
  tp::save_checkpoint(diverged, dir.path / "nan.ckpt");
  auto other = mlp_trainer(1);
  const auto before = weights_of(other);
  const auto what = error_message_of<tp::checkpoint_error>([&] { tp::load_checkpoint(other, dir.path / "nan.ckpt"); });
  EXPECT_NE(what.find("nan.ckpt holds NaN or infinite values in 'b.bias'"), std::string::npos) << what;
  expect_bitwise_equal(weights_of(other), before);
}

// A checkpoint whose model fits but whose optimizer does not (Adam's state into SGD) is refused
// after the model has been read: the trainer keeps its own model and optimizer all the same.
TEST(Resume, AnOptimizerThatDoesNotFitLeavesTheModelAsItWas) {
  TempDir dir("resume_other_optimizer");
  auto adam_desc = tp::model_desc([] { return MlpHolder(); })
                       .tower_function([](const tp::TowerContext&, MlpHolder& m, const Batch& b) { return torch::mse_loss(m->forward(b.data), b.target); })
                       .optimizer([](MlpHolder& m) { return torch::optim::Adam(m->parameters(), torch::optim::AdamOptions(0.01)); });
  tp::Trainer adam(tp::FeedInput(tp_test::mlp_flow()), std::move(adam_desc), tp::SingleDevice(), tp::TrainOptions().steps_per_epoch(7).max_epoch(1));
  adam.train();
  tp::save_checkpoint(adam, dir.path / "adam.ckpt");
  auto sgd = mlp_trainer(1);
  const auto before = weights_of(sgd);
  try {
    tp::load_checkpoint(sgd, dir.path / "adam.ckpt");
    FAIL() << "loaded Adam's state into SGD";
  } catch (const tp::checkpoint_error& e) {
    EXPECT_NE(std::string(e.what()).find("which SGD's has: the file is another optimizer's state"), std::string::npos) << e.what();
  }
  expect_bitwise_equal(weights_of(sgd), before);
  EXPECT_EQ(sgd.global_step(), 0);
}

// The input's position is a count of this layout's batches: a checkpoint of two towers is
// refused by one, naming both layouts, before anything is loaded.
namespace {
struct LoadInStep {
  void after_step(auto& trainer) { trainer.load_state_dict(trainer.state_dict()); }
};
}  // namespace

TEST(Resume, LoadStateWhileTrainingIsRefused) {
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(1).max_epoch(1), LoadInStep{});
  EXPECT_THROW(trainer.train(), std::logic_error);
}

// --- callback state keyed by name ---------------------------------------------------------------

namespace {
// A stateful callback: counts its steps, and keeps the count in checkpoints.
struct Counter {
  std::string key;  // empty: the type's name
  std::int64_t steps = 0;
  void after_step(auto&) { ++steps; }
  void save_state(auto&, tp::state_tree& out) const { out.put("steps", steps); }
  void load_state(auto&, const tp::state_tree& in) { steps = in.integer("steps"); }
};
struct Tally : Counter {};
struct Named : Counter {
  std::string state_key() const { return key; }
};

template <class... Callbacks>
c10::IValue saved_by(std::int64_t steps, Callbacks... callbacks) {
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(steps), std::move(callbacks)...);
  trainer.train();
  return tp::state_tree::deep_copy(trainer.state_dict());
}
template <class Trainer>
void load_into(Trainer& trainer, const c10::IValue& saved) {
  trainer.load_state_dict(saved);
}
std::string load_error(auto& trainer, const c10::IValue& saved) {
  try {
    load_into(trainer, saved);
  } catch (const tp::checkpoint_error& e) {
    return e.what();
  }
  return "loaded";
}
}  // namespace

TEST(CallbackState, IsKeptByNameSoThatCallbacksMayBeReorderedOrAdded) {
  // Saved with a Counter at 3 steps, then a Tally that has seen 3 too, set apart below.
  Counter counter;
  Tally tally;
  tally.steps = 100;
  const auto bytes = saved_by(3, counter, tally);  // Counter: 3, Tally: 103
  // Reordered, with a stateless callback in front: each still gets its own state.
  auto reordered = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(3), tp_test::Spy{}, Tally{}, Counter{});
  load_into(reordered, bytes);
  EXPECT_EQ(reordered.callback<Tally>().steps, 103);
  EXPECT_EQ(reordered.callback<Counter>().steps, 3);
  // Callbacks that choose their key: their order does not matter either.
  const auto named = saved_by(2, Named{{"warmup", 10}}, Named{{"decay", 20}});
  auto swapped = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(2), Named{{"decay", 0}}, Named{{"warmup", 0}});
  load_into(swapped, named);
  EXPECT_EQ(swapped.callback<0>().steps, 22);
  EXPECT_EQ(swapped.callback<1>().steps, 12);
}

TEST(CallbackState, AMissingOrUnknownCallbackIsAnErrorNamingIt) {
  const auto bytes = saved_by(3, Counter{}, Tally{});
  auto without_tally = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(3), Counter{});
  const auto unknown = load_error(without_tally, bytes);
  EXPECT_NE(unknown.find("it holds state for Tally, which this trainer does not have"), std::string::npos) << unknown;
  auto with_named = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(3), Counter{}, Tally{}, Named{{"third", 0}});
  const auto missing = load_error(with_named, bytes);
  EXPECT_NE(missing.find("this trainer's third has no state in it"), std::string::npos) << missing;
  EXPECT_EQ(with_named.callback<0>().steps, 0);  // checked before any callback's state is loaded
}

TEST(CallbackState, TwoCallbacksUnderOneKeyAreRefused) {
  // They would take each other's state when they swap places.
  try {
    tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(3), Counter{}, Tally{}, Counter{});
    FAIL() << "two Counters were taken";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("callbacks 1 and 3 both keep their checkpoint state under the key 'Counter'"), std::string::npos) << e.what();
  }
  // tp's own stateful callbacks name what they watch: two of a kind are fine.
  EXPECT_NO_THROW(tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(3), tp::EarlyStopping("a", 2), tp::EarlyStopping("b", 2),
                                        tp::MinSaver(std::filesystem::temp_directory_path(), "a"),
                                        tp::MaxSaver(std::filesystem::temp_directory_path(), "a")));
}

// --- ModelSaver -----------------------------------------------------------------------------

TEST(ModelSaver, KeepsTheNewestAndWritesAnIndex) {
  TempDir dir("saver_keep");
  auto trainer = mlp_trainer(5, tp::ModelSaver(dir.path).keep_last(2).keep_every_hours(0));
  trainer.train();
  const auto files = tp::list_checkpoints(dir.path);
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[0].first, 28);
  EXPECT_EQ(files[1].first, 35);
  const auto index = read_all(dir.path / "checkpoints.json");
  EXPECT_NE(index.find("\"latest\": \"model-0000000035.ckpt\""), std::string::npos) << index;
  EXPECT_NE(index.find("\"file\": \"model-0000000028.ckpt\", \"global_step\": 28, \"epoch_num\": 4"), std::string::npos) << index;
  EXPECT_EQ(index.find("model-0000000021"), std::string::npos) << index;
}

// Whether two state trees hold the same values, tensors bit for bit.
bool same_tree(const c10::IValue& a, const c10::IValue& b) {
  if (a.isTensor() || b.isTensor()) {
    if (!a.isTensor() || !b.isTensor()) return false;
    const auto x = a.toTensor().contiguous(), y = b.toTensor().contiguous();
    return x.sizes() == y.sizes() && x.scalar_type() == y.scalar_type() && std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
  }
  if (a.isGenericDict() || b.isGenericDict()) {
    if (!a.isGenericDict() || !b.isGenericDict() || a.toGenericDict().size() != b.toGenericDict().size()) return false;
    auto other = b.toGenericDict();
    for (const auto& entry : a.toGenericDict())
      if (!other.contains(entry.key()) || !same_tree(entry.value(), other.at(entry.key()))) return false;
    return true;
  }
  if (a.isList() || b.isList() || a.isTuple() || b.isTuple()) {
    const auto items = [](const c10::IValue& v) { return v.isList() ? v.toListRef().vec() : v.toTupleRef().elements().vec(); };
    if ((!a.isList() && !a.isTuple()) || (!b.isList() && !b.isTuple())) return false;
    const auto x = items(a), y = items(b);
    if (x.size() != y.size()) return false;
    for (std::size_t i = 0; i < x.size(); ++i)
      if (!same_tree(x[i], y[i])) return false;
    return true;
  }
  return a == b;
}

// Written in the background or in the step, a checkpoint holds the same state.
TEST(ModelSaver, WritesTheSameCheckpointInTheBackgroundAsInTheStep) {
  TempDir background("saver_background"), inline_("saver_inline");
  auto first = mlp_trainer(3, tp::ModelSaver(background.path));
  first.train();
  auto second = mlp_trainer(3, tp::ModelSaver(inline_.path).background(false));
  second.train();
  for (const auto* file : {"model-0000000007.ckpt", "model-0000000021.ckpt"}) {
    const auto read = [&](const fs::path& p) { return tp::detail::to_ivalue(tp::detail::read_torch_save(p), p.string()); };
    EXPECT_TRUE(same_tree(read(background.path / file), read(inline_.path / file))) << file;
  }
}

// A write that fails (here: a folder stands where the file goes) leaves no checkpoint and no
// temporary file, and stops training with its message: at the next save when in the background,
// at once when in the step.
TEST(ModelSaver, AWriteThatFailsStopsTrainingWithItsMessage) {
  for (const bool background : {true, false}) {
    SCOPED_TRACE(background ? "background" : "in the step");
    TempDir dir("saver_fails");
    // A folder where the temporary file of step 7's checkpoint goes (this process writes it).
    const auto obstacle = dir.path / (tp::checkpoint_file_name(7) + ".tmp." + std::to_string(::getpid()));
    fs::create_directories(obstacle);
    std::ostringstream log;
    auto trainer = mlp_trainer(3, tp::ModelSaver(dir.path).background(background).log_to(log));
    try {
      trainer.train();
      ADD_FAILURE() << "a checkpoint that could not be written went unreported";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("model-0000000007.ckpt.tmp." + std::to_string(::getpid()) + ": Is a directory"), std::string::npos)
          << e.what();
    }
    EXPECT_EQ(trainer.global_step(), background ? 14 : 7);  // in the background, the next save reports it
    EXPECT_TRUE(tp::list_checkpoints(dir.path).empty());
    for (const auto& entry : fs::directory_iterator(dir.path))
      if (entry.path() != obstacle) {
        EXPECT_EQ(entry.path().filename().string().find(".tmp."), std::string::npos) << entry.path();
      }
  }
}

// A folder where a checkpoint goes is refused before training: skipped, it let the run train
// on and lose those steps when their checkpoint could not take its place.
TEST(ModelSaver, AFolderInPlaceOfACheckpointIsRefusedBeforeTraining) {
  TempDir dir("saver_folder");
  {
    auto first = mlp_trainer(2, tp::ModelSaver(dir.path));
    first.train();
  }
  const auto newest = dir.path / tp::checkpoint_file_name(14);
  fs::rename(newest, dir.path / "set_aside");
  fs::create_directories(newest);
  auto second = mlp_trainer(3, tp::ModelSaver(dir.path));
  try {
    second.train();
    ADD_FAILURE() << "a folder in place of the newest checkpoint went unreported";
  } catch (const tp::checkpoint_error& e) {
    EXPECT_NE(std::string(e.what()).find("model-0000000014.ckpt is a folder, where tp keeps the checkpoint of step 14"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(second.global_step(), 0);
  EXPECT_TRUE(fs::is_directory(newest));
}

// What writes killed midway left (a checkpoint's, the index's, a MinSaver's temporary file) is
// removed when a saver takes the folder again; nothing else is.
TEST(ModelSaver, RemovesTheTemporaryFilesOfKilledWrites) {
  TempDir dir("saver_litter");
  const std::vector<std::string> litter{"checkpoints.json.tmp.4242", "min-val_loss.ckpt.tmp.77", "model-0000000007.ckpt.tmp.123456"};
  for (const auto& name : litter) std::ofstream(dir.path / name) << "half written";
  std::ofstream(dir.path / "notes.tmp.txt") << "the user's";
  auto trainer = mlp_trainer(1, tp::ModelSaver(dir.path));
  trainer.train();
  for (const auto& name : litter) EXPECT_FALSE(fs::exists(dir.path / name)) << name;
  EXPECT_TRUE(fs::exists(dir.path / "notes.tmp.txt"));
}

TEST(ModelSaver, KeepsOneCheckpointEveryHOursOfTheOlderOnes) {
  std::vector<tp::checkpoint_info> all;
  const std::int64_t hour = 3600'000;
  for (std::int64_t t : {0L, hour / 2, hour, hour + 1, 2 * hour + 5, 2 * hour + 6, 2 * hour + 7}) all.push_back({"", 0, 0, t, 0, 0});
  EXPECT_EQ(tp::detail::checkpoints_to_keep(all, 2, hour), (std::vector<bool>{true, false, true, false, true, true, true}));
  EXPECT_EQ(tp::detail::checkpoints_to_keep(all, 3, 0), (std::vector<bool>{false, false, false, false, true, true, true}));
}

TEST(ModelSaver, RunningAgainResumesAndMatchesAnUninterruptedRun) {
  auto reference = mlp_trainer(4);
  reference.train();
  TempDir dir("saver_resume");
  std::ostringstream log;
  {
    auto first = mlp_trainer(2, tp::ModelSaver(dir.path).log_to(log));
    first.train();
    EXPECT_FALSE(first.callback<tp::ModelSaver>().resumed_from());
  }
  auto second = mlp_trainer(4, tp::ModelSaver(dir.path).log_to(log));
  second.train();
  ASSERT_TRUE(second.callback<tp::ModelSaver>().resumed_from());
  EXPECT_EQ(second.callback<tp::ModelSaver>().resumed_from()->global_step, 14);
  EXPECT_NE(log.str().find("resumed from"), std::string::npos);
  EXPECT_NE(log.str().find("training goes on at epoch 3"), std::string::npos) << log.str();
  expect_bitwise_equal(weights_of(second), weights_of(reference));
  // Once more: the run has nothing left to train, and says so.
  std::ostringstream again_log;
  auto again = mlp_trainer(4, tp::ModelSaver(dir.path).log_to(again_log));
  again.train();
  EXPECT_EQ(again.global_step(), 28);
  EXPECT_NE(again_log.str().find("the run already finished its 4 epochs: nothing is left to train"), std::string::npos) << again_log.str();
}

TEST(ModelSaver, ACorruptLatestCheckpointFallsBackToThePreviousAndIsKept) {
  auto reference = mlp_trainer(4);
  reference.train();
  TempDir dir("saver_corrupt");
  {
    auto first = mlp_trainer(3, tp::ModelSaver(dir.path));
    first.train();
  }
  // The newest (epoch 3) is cut short, as by a full disk or a copy that did not finish.
  const auto latest = dir.path / tp::checkpoint_file_name(21);
  const auto bytes = read_all(latest);
  std::ofstream(latest, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() - 1000);
  std::ostringstream log;
  auto second = mlp_trainer(4, tp::ModelSaver(dir.path).log_to(log));
  second.train();
  EXPECT_NE(log.str().find("model-0000000021.ckpt is truncated"), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("renamed it to model-0000000021.ckpt.corrupt"), std::string::npos) << log.str();
  EXPECT_NE(log.str().find("trying the one before it"), std::string::npos) << log.str();
  EXPECT_EQ(second.callback<tp::ModelSaver>().resumed_from()->global_step, 14);
  EXPECT_TRUE(fs::exists(latest.string() + ".corrupt"));  // kept, for whoever wants to look
  EXPECT_EQ(fs::file_size(latest.string() + ".corrupt"), bytes.size() - 1000);
  expect_bitwise_equal(weights_of(second), weights_of(reference));
}

TEST(ModelSaver, WithResumeOffStartsAfresh) {
  TempDir dir("saver_noresume");
  {
    auto first = mlp_trainer(1, tp::ModelSaver(dir.path));
    first.train();
  }
  auto second = mlp_trainer(1, tp::ModelSaver(dir.path).resume(false));
  second.train();
  EXPECT_FALSE(second.callback<tp::ModelSaver>().resumed_from());
  EXPECT_EQ(second.global_step(), 7);
}

TEST(ModelSaver, RejectsBadOptions) {
  EXPECT_THROW(tp::ModelSaver("x").keep_last(0), std::invalid_argument);
  EXPECT_THROW(tp::ModelSaver("x").keep_every_hours(-1), std::invalid_argument);
  EXPECT_THROW(tp::ModelSaver("x").every_n_steps(-3), std::invalid_argument);
}

namespace {
// Puts one value of "val/error" per epoch, from a list.
struct PutSequence {
  std::vector<double> values;
  void after_epoch(auto& trainer) { trainer.put_scalar("val/error", values.at(static_cast<std::size_t>(trainer.epoch_num() - 1))); }
};
// Records, at each hook, the order in which callbacks ran.
struct OrderLog {
  std::shared_ptr<std::vector<std::string>> log;
  std::string name;
  void after_epoch(auto&) { log->push_back(name); }
};
struct OrderMonitor : OrderLog {
  void on_scalar(auto&, std::string_view, double) {}
};
struct OrderWriter : OrderLog {
  static constexpr bool writes_checkpoint = true;
};
}  // namespace

TEST(MinSaver, KeepsTheCheckpointOfTheBestEpoch) {
  TempDir dir("minsaver");
  auto trainer = mlp_trainer(5, PutSequence{{0.5, 0.3, 0.4, 0.2, 0.25}}, tp::MinSaver(dir.path, "val/error"),
                             tp::MaxSaver(dir.path, "val/error"));
  trainer.train();
  const auto& min = trainer.callback<tp::MinSaver>();
  EXPECT_EQ(min.saves(), 3);  // epochs 1, 2 and 4 improved
  EXPECT_EQ(*min.best(), 0.2);
  EXPECT_EQ(min.path().filename(), "min-val_error.ckpt");
  EXPECT_EQ(tp::read_checkpoint_info(min.path()).epoch_num, 4);
  EXPECT_EQ(tp::read_checkpoint_info(dir.path / "max-val_error.ckpt").epoch_num, 1);
  // The model in it is the model at the end of epoch 4.
  auto model = MlpHolder();
  tp::load_model(min.path(), *model);
}

TEST(CheckpointWriter, RunsAfterPlainCallbacksAndMonitors) {
  auto log = std::make_shared<std::vector<std::string>>();
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(1).max_epoch(1), OrderWriter{{log, "writer"}},
                                       OrderMonitor{{log, "monitor"}}, OrderLog{log, "plain"});
  trainer.train();
  EXPECT_EQ(*log, (std::vector<std::string>{"plain", "monitor", "writer"}));
  // Wrapped in a trigger, it is still one.
  static_assert(tp::checkpoint_writer<decltype(tp::every_n_epochs(2, OrderWriter{}))>);
  static_assert(tp::checkpoint_writer<tp::ModelSaver> && !tp::chief_only_callback<tp::ModelSaver>);
  static_assert(tp::checkpoint_writer<tp::MinSaver> && !tp::chief_only_callback<tp::MinSaver>);  // every process follows the chief
}

// --- stateful callbacks ---------------------------------------------------------------------

TEST(WeightEMA, AveragesTheWeightsAndSwapsThemInForValidation) {
  auto checked = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(3).max_epoch(1), tp::WeightEMA(0.5));
  std::vector<torch::Tensor> average;
  for (const auto& p : checked.model()->parameters()) average.push_back(p.detach().clone());
  checked.train([&](auto& t) {
    auto cost = t.replicas().run_step(t.tower(), t.input());
    auto params = t.model()->parameters();
    for (std::size_t i = 0; i < params.size(); ++i) average[i] = 0.5 * average[i] + 0.5 * params[i].detach();
    return cost;
  });
  const auto& got = checked.callback<tp::WeightEMA>().averages();
  for (std::size_t i = 0; i < average.size(); ++i) EXPECT_TRUE(torch::allclose(got[i], average[i], 1e-6, 1e-7)) << i;

  const auto trained = weights_of(checked);
  checked.callback<tp::WeightEMA>().swap(checked);
  for (std::size_t i = 0; i < average.size(); ++i) EXPECT_TRUE(torch::allclose(checked.model()->parameters()[i], average[i], 1e-6, 1e-7));
  checked.callback<tp::WeightEMA>().swap(checked);
  expect_bitwise_equal(weights_of(checked), trained);
}

namespace {
// Records the model's first weight when its after_epoch runs.
struct SeeWeight {
  std::shared_ptr<std::vector<double>> seen = std::make_shared<std::vector<double>>();
  void after_epoch(auto& trainer) { seen->push_back(trainer.model()->parameters()[0].view(-1)[0].template item<double>()); }
};
}  // namespace

TEST(WeightEMA, WithEMAWeightsRunsTheCallbackOnTheAverages) {
  SeeWeight see;
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(4).max_epoch(1), tp::WeightEMA(0.9), tp::with_ema_weights(see));
  trainer.train();
  const double averaged = trainer.callback<tp::WeightEMA>().averages()[0].view(-1)[0].item<double>();
  const double trained = trainer.model()->parameters()[0].view(-1)[0].item<double>();
  ASSERT_EQ(see.seen->size(), 1u);
  EXPECT_EQ((*see.seen)[0], averaged);
  EXPECT_NE(averaged, trained);  // and the trained weights are back
}

TEST(MovingAverage, IsTheExponentialAverageOfTheStepCostsAndIsPut) {
  std::vector<double> costs{4, 2, 8, 1};
  std::size_t k = 0;
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(4).max_epoch(1), tp::MovingAverage("cost", 0.5),
                                       tp::JSONWriter(fs::temp_directory_path() / ("tp_ma_" + std::to_string(::getpid()))));
  trainer.train([&](auto&) { return torch::tensor(costs[k++]); });
  // 4, then 0.5*4 + 0.5*2 = 3, then 5.5, then 3.25
  EXPECT_EQ(trainer.callback<tp::MovingAverage<>>().average().item<double>(), 3.25);
  const auto stats = tp::JSONWriter::read(fs::temp_directory_path() / ("tp_ma_" + std::to_string(::getpid())) / "stats.json");
  fs::remove_all(fs::temp_directory_path() / ("tp_ma_" + std::to_string(::getpid())));
  ASSERT_EQ(stats.size(), 1u);
  EXPECT_EQ(stats[0].scalars.at("cost"), 3.25);
  EXPECT_THROW(tp::MovingAverage("cost", 1.0), std::invalid_argument);
}

TEST(Warmup, KeepsItsTargetAcrossAResume) {
  TempDir dir("warmup");
  auto lr_after = [](auto& trainer) { return tp::learning_rate().get(trainer); };
  auto reference = mlp_trainer(2, tp::Warmup(tp::learning_rate(), 10, 0.0));
  reference.train();
  {
    auto first = mlp_trainer(1, tp::Warmup(tp::learning_rate(), 10, 0.0));
    first.train();
    EXPECT_NEAR(lr_after(first), 0.02 * 7 / 10, 1e-12);  // mid-warmup
    tp::save_checkpoint(first, dir.path / "w.ckpt");
  }
  auto resumed = mlp_trainer(2, tp::Warmup(tp::learning_rate(), 10, 0.0));
  tp::load_checkpoint(resumed, dir.path / "w.ckpt");
  resumed.train();
  EXPECT_EQ(lr_after(resumed), 0.02);  // reached the original target, not 0.014
  expect_bitwise_equal(weights_of(resumed), weights_of(reference));
}

TEST(EarlyStopping, CarriesItsPatienceAcrossAResume) {
  TempDir dir("early");
  auto values = std::vector<double>{0.5, 0.6, 0.7, 0.8, 0.9, 1.0};
  {
    auto first = mlp_trainer(2, PutSequence{values}, tp::EarlyStopping("val/error", 3));
    first.train();
    tp::save_checkpoint(first, dir.path / "e.ckpt");
  }
  auto resumed = mlp_trainer(6, PutSequence{values}, tp::EarlyStopping("val/error", 3));
  tp::load_checkpoint(resumed, dir.path / "e.ckpt");
  resumed.train();
  // Epoch 1 was the best; 2, 3 and 4 did not improve: it stops at 4, as without the resume.
  EXPECT_EQ(resumed.callback<tp::EarlyStopping>().stopped_at_epoch(), 4);
}

// --- the log folder -------------------------------------------------------------------------

TEST(LogDir, KeepsBacksUpMakesNewOrRemovesAnEarlierRun) {
  TempDir dir("logdir");
  const auto run = dir.path / "run";
  std::ostringstream log;
  EXPECT_EQ(tp::log_dir(run, tp::if_exists::keep, log), run);
  std::ofstream(run / "stats.json") << "[]";
  EXPECT_EQ(tp::log_dir(run, tp::if_exists::keep, log), run);
  EXPECT_TRUE(fs::exists(run / "stats.json"));
  EXPECT_EQ(tp::log_dir(run, tp::if_exists::ask, log), run);  // no terminal in a test: kept
  EXPECT_NE(log.str().find("no terminal to ask on, so it is kept"), std::string::npos);

  const auto fresh = tp::log_dir(run, tp::if_exists::new_dir, log);
  EXPECT_NE(fresh, run);
  EXPECT_TRUE(fs::is_directory(fresh) && fs::is_empty(fresh));
  EXPECT_TRUE(fs::exists(run / "stats.json"));

  EXPECT_EQ(tp::log_dir(run, tp::if_exists::backup, log), run);
  EXPECT_TRUE(fs::is_empty(run));
  int backups = 0;
  for (const auto& e : fs::directory_iterator(dir.path))
    if (e.path().filename().string().starts_with("run-backup-")) backups += fs::exists(e.path() / "stats.json");
  EXPECT_EQ(backups, 1);

  std::ofstream(run / "stats.json") << "[]";
  EXPECT_EQ(tp::log_dir(run, tp::if_exists::remove, log), run);
  EXPECT_TRUE(fs::is_empty(run));
}

// Under several processes only rank 0 acts on the folder: another rank neither makes it nor
// writes into it (a probe file it made there raced with rank 0's remove_all, which then failed),
// and leaves an earlier run to rank 0's choice.
TEST(LogDir, OnlyRankZeroActsOnTheFolder) {
  TempDir dir("logdir_ranks");
  const auto missing = dir.path / "missing", run = dir.path / "run";
  fs::create_directories(run);
  std::ofstream(run / "stats.json") << "[]";
  std::ostringstream log;
  const std::pair<const char*, const char*> rank_one[] = {
      {"RANK", "1"}, {"WORLD_SIZE", "2"}, {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}};
  for (const auto& [name, value] : rank_one) ::setenv(name, value, 1);
  EXPECT_EQ(tp::log_dir(missing, tp::if_exists::keep, log), missing);
  EXPECT_EQ(tp::log_dir(run, tp::if_exists::remove, log), run);
  for (const auto& [name, value] : rank_one) ::unsetenv(name);
  EXPECT_FALSE(fs::exists(missing));
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(run)) names.push_back(e.path().filename().string());
  EXPECT_EQ(names, std::vector<std::string>{"stats.json"});
}

TEST(LogDir, TheEnvironmentChoosesAndABadValueIsAnError) {
  TempDir dir("logdir_env");
  const auto run = dir.path / "run";
  fs::create_directories(run);
  std::ofstream(run / "stats.json") << "[]";
  std::ostringstream log;
  ::setenv("TP_LOGDIR_ACTION", "new_dir", 1);
  EXPECT_NE(tp::log_dir(run, tp::if_exists::keep, log), run);
  ::setenv("TP_LOGDIR_ACTION", "erase", 1);
  try {
    tp::log_dir(run, tp::if_exists::keep, log);
    ADD_FAILURE() << "accepted TP_LOGDIR_ACTION=erase";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("TP_LOGDIR_ACTION is 'erase'; use keep, backup, remove or new_dir"), std::string::npos) << e.what();
  }
  ::unsetenv("TP_LOGDIR_ACTION");
  EXPECT_TRUE(fs::exists(run / "stats.json"));
}

// A folder that cannot be made or written is named, with what is in the way, before the run
// starts: by log_dir, and by the savers and monitors given such a folder directly.
TEST(LogDir, AFolderThatCannotBeMadeOrWrittenIsNamed) {
  TempDir dir("logdir_bad");
  const auto file = dir.path / "a_file";
  std::ofstream(file) << "not a folder";
  auto message = [](auto&& make) { return error_message_of<std::runtime_error>(make); };
  std::ostringstream log;
  EXPECT_EQ(message([&] { tp::log_dir(file / "run", tp::if_exists::keep, log); }),
            "tp::log_dir: the log folder " + (file / "run").string() + " cannot be made: " + file.string() +
                " is a file, not a folder; choose another folder, or move the file away");
  EXPECT_TRUE(fs::is_regular_file(file));
  auto trainer_with = [](auto callback) { return tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(1), std::move(callback)); };
  EXPECT_NE(message([&] { trainer_with(tp::ModelSaver(file / "ckpt")).train(); }).find("tp::ModelSaver: the checkpoint folder"),
            std::string::npos);
  EXPECT_NE(message([&] { trainer_with(tp::JSONWriter(file / "logs")).train(); }).find("tp::JSONWriter: the log folder"), std::string::npos);
  EXPECT_NE(message([&] { trainer_with(tp::TensorBoardWriter(file / "logs")).train(); }).find("tp::TensorBoardWriter: the log folder"),
            std::string::npos);
  EXPECT_NE(message([&] { trainer_with(tp::MinSaver(file / "best", "loss")).train(); }).find("tp::MinSaver/MaxSaver: the checkpoint folder"),
            std::string::npos);
  if (!fs::is_directory("/sys/kernel")) GTEST_SKIP() << "no /sys here: a folder nobody may write into is not at hand";
  // sysfs refuses new folders and files even to root, for whom permission bits do not count.
  EXPECT_NE(message([&] { tp::log_dir("/sys/tp_logs/run", tp::if_exists::keep, log); }).find("/sys/tp_logs/run cannot be made ("),
            std::string::npos);
  EXPECT_NE(message([&] { tp::log_dir("/sys/kernel", tp::if_exists::keep, log); }).find("/sys/kernel cannot be written ("),
            std::string::npos);
}

TEST(TensorBoardWriter, AResumedRunTellsTensorBoardToDropTheEventsItRedoes) {
  TempDir dir("tb_resume");
  {
    auto first = mlp_trainer(2);
    first.train();
    tp::save_checkpoint(first, dir.path / "c.ckpt");
  }
  auto resumed = mlp_trainer(3, tp::TensorBoardWriter(dir.path / "tb"));
  tp::load_checkpoint(resumed, dir.path / "c.ckpt");
  resumed.train();
  const auto bytes = read_all(resumed.callback<tp::TensorBoardWriter>().path());
  // The second record: Event { wall_time; step: 14; session_log { status: START } }, after the
  // version record (12 bytes of framing + its data + 4).
  std::uint64_t first_length;
  std::memcpy(&first_length, bytes.data(), 8);
  const auto second = bytes.substr(12 + first_length + 4 + 12);
  EXPECT_EQ(second.substr(9, 2), std::string("\x10\x0e", 2));          // field 2 (step) = 14
  EXPECT_EQ(second.substr(11, 4), std::string("\x3a\x02\x08\x01", 4));  // field 7 { field 1 = START }
}
