// Triggers, the progress bar and the console monitor: what each one shows or gates.
#include <csignal>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <sstream>
#include <thread>

#include "support.hpp"

using tp_test::only;
using tp_test::Spy;

TEST(Trigger, EveryNStepsGatesStepHooksByGlobalStep) {
  Spy spy;
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(4).max_epoch(3),
                                       tp::every_n_steps(5, spy));
  trainer.train();
  EXPECT_EQ(only(*spy.log, "after_step"), (std::vector<std::string>{"after_step 2/0/5", "after_step 3/1/10"}));
  EXPECT_EQ(only(*spy.log, "before_step"), (std::vector<std::string>{"before_step 2/0/4", "before_step 3/1/9"}));
  // Lifecycle and epoch hooks pass through.
  EXPECT_EQ(only(*spy.log, "before_train").size(), 1u);
  EXPECT_EQ(only(*spy.log, "after_epoch").size(), 3u);
  EXPECT_EQ(only(*spy.log, "after_train").size(), 1u);
}

TEST(Trigger, EveryNEpochsGatesEpochHooks) {
  Spy spy;
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(2).max_epoch(5),
                                       tp::every_n_epochs(2, spy));
  trainer.train();
  EXPECT_EQ(only(*spy.log, "after_epoch"), (std::vector<std::string>{"after_epoch 2/1/4", "after_epoch 4/1/8"}));
  EXPECT_EQ(only(*spy.log, "before_epoch"), (std::vector<std::string>{"before_epoch 2/0/2", "before_epoch 4/0/6"}));
  EXPECT_EQ(only(*spy.log, "after_step").size(), 10u);
}

TEST(Trigger, OnceAtStepFiresOnce) {
  Spy spy;
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(3).max_epoch(3), tp::once_at_step(7, spy));
  trainer.train();
  EXPECT_EQ(only(*spy.log, "after_step"), (std::vector<std::string>{"after_step 3/0/7"}));
  EXPECT_EQ(only(*spy.log, "before_step"), (std::vector<std::string>{"before_step 3/0/6"}));
}

namespace {
struct OnlyAfterStep {
  void after_step(auto&) {}
};
}  // namespace

namespace {
struct ValueMonitor {
  std::vector<double> values;
  void on_scalar(auto&, std::string_view, double v) { values.push_back(v); }
  void after_epoch(auto&) {}
};
}  // namespace

TEST(Trigger, ExposesOnlyTheHooksOfWhatItWraps) {
  using T = decltype(tp::every_n_steps(2, OnlyAfterStep{}));
  static_assert(tp::detail::names_after_step<T>);
  static_assert(!tp::detail::names_before_step<T> && !tp::detail::names_before_train<T> &&
                !tp::detail::names_on_scalar<T>);
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(1), tp::every_n_epochs(3, ValueMonitor{}));
  trainer.put_scalar("x", 1.5);
  EXPECT_EQ(trainer.callback<0>().inner().values, std::vector<double>{1.5});
}

TEST(Trigger, RejectsAPeriodBelowOne) {
  EXPECT_THROW(tp::every_n_steps(0, Spy{}), std::invalid_argument);
  EXPECT_THROW(tp::every_n_epochs(-1, Spy{}), std::invalid_argument);
  EXPECT_THROW(tp::once_at_step(0, Spy{}), std::invalid_argument);
}

// --- progress bar ------------------------------------------------------------------------------------

TEST(ProgressBar, PrintsOneLinePerEpochWhenNotATerminal) {
  std::ostringstream out;
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(3).max_epoch(2), tp::ProgressBar(out, false));
  // Costs 1, 2, 3 then 4, 5, 6: the epoch means are 2 and 5.
  trainer.train([](auto& t) { return torch::tensor(double(t.global_step() + 1)); });
  const auto text = out.str();
  EXPECT_EQ(text.find('\r'), std::string::npos);
  std::istringstream lines(text);
  std::string first, second, none;
  std::getline(lines, first);
  std::getline(lines, second);
  EXPECT_FALSE(std::getline(lines, none));
  EXPECT_TRUE(first.starts_with("epoch 1/2 3/3 ")) << first;
  EXPECT_NE(first.find("it/s in 0:00 loss 2.0000"), std::string::npos) << first;
  EXPECT_TRUE(second.starts_with("epoch 2/2 3/3 ")) << second;
  EXPECT_NE(second.find("loss 5.0000"), std::string::npos) << second;
}

// An epoch resumed after its third step (a stop signal in the step leaves the epoch open): its
// rate and mean cost are over the four steps this run took, and the line says so.
struct SignalInStepThree {
  void before_step(auto& t) {
    if (t.global_step() == 2) std::raise(SIGTERM);
  }
};
TEST(ProgressBar, CountsAResumedEpochOverTheStepsThisRunTook) {
  auto first = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(7), SignalInStepThree{});
  first.train();
  ASSERT_EQ(first.global_step(), 3);
  std::ostringstream out;
  auto second = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(7), tp::ProgressBar(out, false));
  second.load_state_dict(first.state_dict());
  // Costs 4 to 7 in the resumed steps: their mean is 5.5.
  second.train([](auto& t) { return torch::tensor(double(t.global_step() + 1)); });
  const auto text = out.str();
  EXPECT_TRUE(text.starts_with("epoch 1/1 7/7 ")) << text;
  EXPECT_NE(text.find("loss 5.5000 (resumed at step 3: 4 steps)"), std::string::npos) << text;
}

TEST(ProgressBar, RedrawsInPlaceOnATerminal) {
  std::ostringstream out;
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(4), tp::ProgressBar(out, true, 0.0));
  trainer.train();
  const auto text = out.str();
  for (const char* part : {"\repoch 1/1  25% [######..................] 1/4 ", "\repoch 1/1  50%", "ETA ",
                           "\repoch 1/1 100% [########################] 4/4 "})
    EXPECT_NE(text.find(part), std::string::npos) << part << " not in " << text;
  EXPECT_EQ(text.back(), '\n');
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1);
}

TEST(ProgressBar, EndsAnOpenLineWhenTrainingFails) {
  std::ostringstream out;
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(4), tp::ProgressBar(out, true, 0.0));
  EXPECT_THROW(trainer.train([](auto& t) {
    if (t.global_step() == 2) throw std::runtime_error("x");
  }),
               std::runtime_error);
  EXPECT_EQ(out.str().back(), '\n');
  EXPECT_NE(out.str().find("2/4"), std::string::npos);
}

TEST(ProgressBar, ShowsNoLossForStepsWithoutCost) {
  std::ostringstream out;
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(2), tp::ProgressBar(out, false));
  trainer.train([](auto&) {});
  EXPECT_EQ(out.str().find("loss"), std::string::npos) << out.str();
}

// --- console monitor ------------------------------------------------------------------------------

struct PutsScalars {
  void after_epoch(auto& t) {
    t.put_scalar("val/accuracy", 0.5 + t.epoch_num());
    t.put_scalar("train/loss", 0.25);
    t.put_scalar("lr", 0.125);
  }
};

TEST(ScalarPrinter, PrintsTheEpochsScalarsSortedByName) {
  std::ostringstream out;
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(1).max_epoch(2), tp::ScalarPrinter(out),
                                       PutsScalars{});
  trainer.train();
  EXPECT_EQ(out.str(),
            "[epoch 1] lr: 0.125\n[epoch 1] train/loss: 0.25\n[epoch 1] val/accuracy: 1.5\n"
            "[epoch 2] lr: 0.125\n[epoch 2] train/loss: 0.25\n[epoch 2] val/accuracy: 2.5\n");
}

TEST(ScalarPrinter, FiltersNamesAndCanPrintEachPut) {
  std::ostringstream out;
  auto printer = tp::ScalarPrinter(out);
  printer.include("val/.*").include("train/.*").exclude(".*loss").print_each_put(true);
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(1), printer, PutsScalars{});
  trainer.train();
  EXPECT_EQ(out.str(), "[step 1] val/accuracy: 1.5\n[epoch 1] val/accuracy: 1.5\n");
}

TEST(ScalarPrinter, RejectsABadPattern) {
  tp::ScalarPrinter printer;
  try {
    printer.include("(unclosed");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'(unclosed' is not a valid regular expression"), std::string::npos);
  }
}

// --- file monitors ----------------------------------------------------------------------------------

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace {

namespace fs = std::filesystem;

struct TempFolder {
  fs::path path = fs::temp_directory_path() /
                  ("tp_monitors_" + std::to_string(::getpid()) + "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
  TempFolder() { fs::remove_all(path); }
  ~TempFolder() { fs::remove_all(path); }
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

using tp_test::run;
using tp_test::bitwise_masked_crc32c;

struct PutsNaN {
  void after_epoch(auto& t) { t.put_scalar("broken", std::nan("")); }
};

}  // namespace

TEST(JSONWriter, WritesOneObjectPerEpochThatJsonToolsRead) {
  TempFolder folder;
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(3).max_epoch(2), PutsScalars{}, PutsNaN{},
                                       tp::JSONWriter(folder.path));
  trainer.train();
  const auto file = folder.path / "stats.json";
  EXPECT_EQ(slurp(file),
            "[\n"
            "  {\"epoch_num\": 1, \"global_step\": 3, \"broken\": null, \"lr\": 0.125, \"train/loss\": 0.25, \"val/accuracy\": 1.5},\n"
            "  {\"epoch_num\": 2, \"global_step\": 6, \"broken\": null, \"lr\": 0.125, \"train/loss\": 0.25, \"val/accuracy\": 2.5}\n"
            "]\n");
  EXPECT_EQ(run("python3 -c \"import json,sys; d=json.load(open(sys.argv[1])); print(len(d), d[1]['val/accuracy'])\" " + file.string()),
            "2 2.5\n");
  for (const auto& entry : fs::directory_iterator(folder.path)) EXPECT_EQ(entry.path().filename(), "stats.json");  // no temporary left
}

TEST(JSONWriter, ContinuesTheFileOfAnEarlierRun) {
  TempFolder folder;
  auto first = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(1).max_epoch(3), PutsScalars{}, tp::JSONWriter(folder.path));
  first.train();
  // Resumed from the end of epoch 1: epochs 2 and 3 are written again, epoch 1 is kept.
  auto resumed = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(1).starting_epoch(2).max_epoch(4), PutsScalars{},
                                       tp::JSONWriter(folder.path));
  resumed.train();
  const auto epochs = tp::JSONWriter::read(folder.path / "stats.json");
  ASSERT_EQ(epochs.size(), 4u);
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(epochs[i].epoch_num, static_cast<std::int64_t>(i + 1));
  EXPECT_EQ(epochs[0].global_step, 1);  // from the first run
  EXPECT_EQ(epochs[3].global_step, 3);  // the resumed run counts its own steps here
  EXPECT_EQ(epochs[3].scalars.at("val/accuracy"), 4.5);
}

// A file that a script or another tool wrote: keys in another order, escapes, numbers in
// exponent form, fields tp does not know. Its epochs are read and kept as they were.
TEST(JSONWriter, ContinuesAFileAnotherToolWrote) {
  TempFolder folder;
  fs::create_directories(folder.path);
  std::ofstream(folder.path / "stats.json")
      << R"([ {"global_step": 1E1, "note": "tab\there \"quoted\" \u00e9", "val\"acc\u00e9": 2.5e-1, "epoch_num": 1,)"
         R"( "tags": ["a", {"b": null}], "ok": true, "missing": null},)"
         "\n"
         R"(  {"epoch_num": 2, "global_step": 20, "dropped": "this run writes epoch 2 again"}])";
  auto resumed = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(1).starting_epoch(2).max_epoch(2), PutsScalars{},
                                       tp::JSONWriter(folder.path));
  resumed.train();
  const auto file = folder.path / "stats.json";
  EXPECT_EQ(slurp(file),
            "[\n"
            R"(  {"global_step": 10.0, "note": "tab\there \"quoted\" é", "val\"accé": 0.25, "epoch_num": 1, )"
            R"("tags": ["a",{"b":null}], "ok": true, "missing": null},)"
            "\n"
            R"(  {"epoch_num": 2, "global_step": 1, "lr": 0.125, "train/loss": 0.25, "val/accuracy": 2.5})"
            "\n]\n");
  const auto epochs = tp::JSONWriter::read(file);
  ASSERT_EQ(epochs.size(), 2u);
  EXPECT_EQ(epochs[0].epoch_num, 1);
  EXPECT_EQ(epochs[0].global_step, 10);
  EXPECT_EQ(epochs[0].scalars.at("val\"acc\xc3\xa9"), 0.25);
  EXPECT_TRUE(std::isnan(epochs[0].scalars.at("missing")));
  EXPECT_EQ(epochs[0].scalars.count("note") + epochs[0].scalars.count("tags") + epochs[0].scalars.count("ok"), 0u);  // not numbers
  EXPECT_EQ(epochs[1].scalars.at("val/accuracy"), 2.5);
  EXPECT_EQ(run("python3 -c \"import json,sys; d=json.load(open(sys.argv[1])); print(d[0]['note'], d[0]['tags'], d[1]['epoch_num'])\" " +
                file.string()),
            "tab\there \"quoted\" \xc3\xa9 ['a', {'b': None}] 2\n");
}

// A file tp cannot continue stops the run before anything is written, names the file and what
// is wrong, and stays as it was.
TEST(JSONWriter, AFileItCannotContinueIsReportedAndKept) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"[{\"epoch_num\": 1, \"global_st", "parse error at line 1, column 29"},
      {"", "it is empty"},
      {"{\"epoch_num\": 1, \"global_step\": 1}", "it is not a list"},
      {"[{\"epoch_num\": 1, \"global_step\": 1}, 3]", "entry 1 is not an object"},
      {"[{\"global_step\": 1}]", "entry 0 has no whole number epoch_num"},
      {"[{\"epoch_num\": \"1\", \"global_step\": 1}]", "entry 0 has no whole number epoch_num"},
      {"[{\"epoch_num\": 1, \"global_step\": 1.5}]", "entry 0 has no whole number global_step"},
  };
  for (const auto& [content, why] : cases) {
    TempFolder folder;
    fs::create_directories(folder.path);
    std::ofstream(folder.path / "stats.json") << content;
    auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(1), PutsScalars{}, tp::JSONWriter(folder.path));
    try {
      trainer.train();
      ADD_FAILURE() << "no error for " << content;
    } catch (const std::runtime_error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find((folder.path / "stats.json").string() + " is not a stats file tp can continue ("), std::string::npos) << what;
      EXPECT_NE(what.find(why), std::string::npos) << what;
      EXPECT_NE(what.find("move it away, or use another log folder"), std::string::npos) << what;
    }
    EXPECT_EQ(slurp(folder.path / "stats.json"), content);  // nothing the user had is lost
    for (const auto& entry : fs::directory_iterator(folder.path)) EXPECT_EQ(entry.path().filename(), "stats.json");
  }
}

TEST(TensorBoardWriter, WritesRecordsThatAnIndependentDecoderReads) {
  TempFolder folder;
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(2).max_epoch(2), PutsScalars{}, tp::TensorBoardWriter(folder.path));
  trainer.train();
  const auto path = trainer.callback<tp::TensorBoardWriter>().path();
  EXPECT_TRUE(path.filename().string().starts_with("events.out.tfevents."));
  const auto decoded = tp_test::decode_tensorboard_records(path, folder.path);
  ASSERT_EQ(decoded.size(), 7u);  // the version event, then 3 scalars in each of 2 epochs
  EXPECT_NE(decoded[0].find("3: \"brain.Event:2\""), std::string::npos) << decoded[0];
  // val/accuracy = 1.5 (float 0x3fc00000) at global step 2, in a Summary (field 5) Value (field 1)
  EXPECT_NE(decoded[1].find("2: 2\n5 {\n  1 {\n    1: \"val/accuracy\"\n    2: 0x3fc00000\n  }\n}"), std::string::npos) << decoded[1];
  EXPECT_NE(decoded[6].find("2: 4\n"), std::string::npos) << decoded[6];
  EXPECT_NE(decoded[6].find("1: \"lr\"\n    2: 0x3e000000"), std::string::npos) << decoded[6];  // 0.125
}

// --- chief-only callbacks ---------------------------------------------------------------------------

namespace {
// A single-device run that says this process is rank 1 of two, as a multi-process run would
// (the many-processes capability is all or nothing: concepts/distribution.hpp).
struct NotChief : tp::SingleDevice {
  template <class Tower>
  struct Replicas : tp::SingleDevice::Replicas<Tower> {
    using tp::SingleDevice::Replicas<Tower>::Replicas;
    bool is_chief() const { return false; }
    int world_size() const { return 2; }
    int agree_on_stop(int code, bool) { return code; }
    void sum_across_processes(std::vector<double>& values) {  // the other rank has the same values
      for (auto& v : values) v *= 2;
    }
  };
  template <class Tower>
  Replicas<Tower> build(Tower& tower) {
    return Replicas<Tower>(tower, *this);
  }
};
}  // namespace

TEST(ChiefOnly, OnlyTheChiefRunsThem) {
  TempFolder folder;
  Spy everyone, chief;
  chief.name = "chief.";
  tp::Trainer trainer(tp::DummyInput(tp_test::regression_batch()), tp_test::linear_desc(), NotChief(), tp::TrainOptions().steps_per_epoch(2),
                      everyone, tp::chief_only(chief), PutsScalars{}, tp::JSONWriter(folder.path));
  static_assert(tp::chief_only_callback<tp::JSONWriter> && tp::chief_only_callback<tp::TensorBoardWriter>);
  static_assert(tp::chief_only_callback<tp::ChiefOnly<Spy>> && !tp::chief_only_callback<Spy>);
  EXPECT_FALSE(trainer.is_chief());
  trainer.train();
  EXPECT_EQ(everyone.log->size(), 8u);
  EXPECT_TRUE(chief.log->empty());
  EXPECT_FALSE(fs::exists(folder.path / "stats.json"));

  auto single = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(2), tp::chief_only(chief));
  EXPECT_TRUE(single.is_chief());
  single.train();
  EXPECT_EQ(chief.log->size(), 8u);
}

// --- enable_if, early stopping, throughput ------------------------------------------------------------

TEST(Trigger, EnableIfGatesEpochAndStepHooksByAPredicate) {
  Spy spy;
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(2).max_epoch(3),
                                       tp::enable_if([](const auto& t) { return t.epoch_num() % 2 == 1; }, spy));
  trainer.train();
  EXPECT_EQ(only(*spy.log, "before_epoch"), (std::vector<std::string>{"before_epoch 1/0/0", "before_epoch 3/0/4"}));
  EXPECT_EQ(only(*spy.log, "after_step").size(), 4u);
  EXPECT_EQ(only(*spy.log, "before_train").size(), 1u);
  EXPECT_EQ(only(*spy.log, "after_train").size(), 1u);
}

namespace {
// Puts the scalar "val/error" from a script, one value per epoch (NaN: not put that epoch).
struct Scripted {
  std::vector<double> values;
  void after_epoch(auto& t) {
    const double v = values.at(static_cast<std::size_t>(t.epoch_num() - 1));
    if (!std::isnan(v)) t.put_scalar("val/error", v);
  }
};
}  // namespace

TEST(EarlyStopping, StopsAfterPatienceEpochsWithoutImprovement) {
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(1).max_epoch(10), Scripted{{1.0, 0.8, 0.85, 0.9, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1}},
                                       tp::EarlyStopping("val/error", 2));
  trainer.train();
  const auto& stopper = trainer.callback<tp::EarlyStopping>();
  EXPECT_EQ(trainer.epoch_num(), 4);
  EXPECT_EQ(stopper.stopped_at_epoch(), 4);
  EXPECT_EQ(stopper.best(), 0.8);
  EXPECT_EQ(stopper.best_epoch(), 2);
}

TEST(EarlyStopping, CountsOnlyEpochsThatPutTheScalarAndHonoursMinDeltaAndGoal) {
  const double none = std::nan("");
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(1).max_epoch(8),
                                       Scripted{{0.5, none, 0.4, none, 0.6, none, 0.45, 0.3}},
                                       tp::EarlyStopping("val/error", 2, tp::EarlyStopping::minimize, /*min_delta=*/0.01));
  trainer.train();
  // Epochs 5 (0.6) and 7 (0.45) do not improve on 0.4; epochs 2, 4, 6 do not count.
  EXPECT_EQ(trainer.callback<tp::EarlyStopping>().stopped_at_epoch(), 7);
  auto maximizing = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(1).max_epoch(5), Scripted{{0.1, 0.2, 0.3, 0.4, 0.5}},
                                          tp::EarlyStopping("val/error", 1, tp::EarlyStopping::maximize));
  maximizing.train();
  EXPECT_FALSE(maximizing.callback<tp::EarlyStopping>().stopped_at_epoch().has_value());
  EXPECT_EQ(maximizing.epoch_num(), 5);
  EXPECT_THROW(tp::EarlyStopping("x", 0), std::invalid_argument);
  EXPECT_THROW(tp::EarlyStopping("x", 1, tp::EarlyStopping::minimize, -1), std::invalid_argument);
}

TEST(EarlyStopping, ANaNScalarDoesNotImprove) {
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(1).max_epoch(5), Scripted{{1.0, 0.5, 0.5, 0.5, 0.5}}, PutsNaN{},
                                       tp::EarlyStopping("broken", 1));
  trainer.train();
  EXPECT_EQ(trainer.callback<tp::EarlyStopping>().stopped_at_epoch(), 1);  // NaN from the first epoch on
  EXPECT_FALSE(trainer.callback<tp::EarlyStopping>().best().has_value());
}

namespace {
struct ScalarRecorder {
  std::vector<std::pair<std::string, double>> seen;
  void on_scalar(auto&, std::string_view name, double value) { seen.emplace_back(name, value); }
};
}  // namespace

TEST(Throughput, PutsSamplesPerSecondAndTheTimeLeft) {
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(20).max_epoch(3), tp::Throughput(8), ScalarRecorder{});
  trainer.train();
  const auto& seen = trainer.callback<ScalarRecorder>().seen;
  ASSERT_EQ(seen.size(), 6u);
  for (int epoch = 0; epoch < 3; ++epoch) {
    EXPECT_EQ(seen[2 * epoch].first, "throughput");
    EXPECT_GT(seen[2 * epoch].second, 0.0);
    EXPECT_EQ(seen[2 * epoch + 1].first, "seconds_left");
  }
  EXPECT_GT(seen[1].second, 0.0);   // two epochs to go
  EXPECT_EQ(seen[5].second, 0.0);   // none
  // 160 samples of a tiny linear model take well under 0.16 s even on a loaded machine.
  EXPECT_GT(seen[0].second, 1000.0);
  EXPECT_THROW(tp::Throughput(0), std::invalid_argument);
}

namespace {
// Holds up the loop for 60 ms before one step: the stall StepTimes must show.
struct StallBefore {
  std::int64_t step;
  void before_step(auto& trainer) {
    if (trainer.global_step() + 1 == step) std::this_thread::sleep_for(std::chrono::milliseconds(60));
  }
};
}  // namespace

TEST(StepTimes, PutsEachStepsTimeSoThatAStallShows) {
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(5).max_epoch(2), StallBefore{3}, tp::StepTimes(), ScalarRecorder{});
  trainer.train();
  const auto& seen = trainer.callback<ScalarRecorder>().seen;
  ASSERT_EQ(seen.size(), 14u);  // 5 steps and 2 figures, in each of 2 epochs
  std::vector<double> steps;
  for (const auto& [name, value] : seen)
    if (name == "step_ms") steps.push_back(value);
  ASSERT_EQ(steps.size(), 10u);
  EXPECT_GE(steps[2], 60.0);  // the third step held the stall
  EXPECT_EQ(seen[5].first, "step_ms_median");
  EXPECT_LT(seen[5].second, 60.0);
  EXPECT_EQ(seen[6].first, "step_ms_max");
  EXPECT_EQ(seen[6].second, steps[2]);
  EXPECT_LT(seen[13].second, 60.0);  // the second epoch had no stall

  auto sparse = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(6).max_epoch(1), tp::StepTimes(3), ScalarRecorder{});
  sparse.train();
  EXPECT_EQ(sparse.callback<ScalarRecorder>().seen.size(), 4u);  // after steps 3 and 6, then the epoch's two
  EXPECT_THROW(tp::StepTimes(0), std::invalid_argument);
}

// --- hyperparameters -----------------------------------------------------------------------------------

namespace {
// The learning rate each step ran with.
struct LearningRates {
  std::vector<double> seen;
  void before_step(auto&) {}
  void after_step(auto& t) { seen.push_back(tp::learning_rate().get(t)); }
};
std::vector<double> repeat(std::initializer_list<std::pair<double, int>> runs) {
  std::vector<double> out;
  for (auto [value, times] : runs) out.insert(out.end(), static_cast<std::size_t>(times), value);
  return out;
}
}  // namespace

TEST(HyperParams, ScheduledPiecewiseAndInterpolated) {
  auto piecewise = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(2).max_epoch(4),
                                         tp::ScheduledHyperParamSetter(tp::learning_rate(), {{1, 0.1}, {3, 0.01}}), LearningRates{});
  piecewise.train();
  EXPECT_EQ(piecewise.callback<LearningRates>().seen, repeat({{0.1, 4}, {0.01, 4}}));

  auto interpolated = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(1).max_epoch(6),
                                            tp::ScheduledHyperParamSetter(tp::learning_rate(), {{2, 1.0}, {4, 0.0}}, true),
                                            LearningRates{});
  interpolated.train();
  // Epoch 1 is before the first point: the optimizer's own 0.05 stays.
  EXPECT_EQ(interpolated.callback<LearningRates>().seen, (std::vector<double>{0.05, 1.0, 0.5, 0.0, 0.0, 0.0}));

  auto by_step = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(3).max_epoch(2),
                                       tp::ScheduledHyperParamSetter(tp::learning_rate(), {{1, 0.2}, {5, 0.02}}, false, tp::schedule_unit::step),
                                       LearningRates{});
  by_step.train();
  EXPECT_EQ(by_step.callback<LearningRates>().seen, repeat({{0.2, 4}, {0.02, 2}}));

  EXPECT_THROW(tp::ScheduledHyperParamSetter(tp::learning_rate(), {{3, 0.1}, {2, 0.01}}), std::invalid_argument);
  EXPECT_THROW(tp::ScheduledHyperParamSetter(tp::learning_rate(), {}), std::invalid_argument);
}

TEST(HyperParams, TheLearningRateReachesEveryTowersOptimizerAndIsPut) {
  auto trainer = tp::Trainer(tp::DummyInput(tp_test::regression_batch()), tp_test::linear_desc(), tp::Replicated<>::cpu(3),
                             tp::TrainOptions().steps_per_epoch(1).max_epoch(2),
                             tp::ScheduledHyperParamSetter(tp::learning_rate(), {{2, 0.5}}), ScalarRecorder{});
  trainer.train();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(trainer.replicas().optimizer(i).param_groups()[0].options().get_lr(), 0.5);
  EXPECT_EQ(trainer.callback<ScalarRecorder>().seen,
            (std::vector<std::pair<std::string, double>>{{"learning_rate", 0.05}, {"learning_rate", 0.5}}));
}

TEST(HyperParams, FunctionWarmupAndReduceOnPlateau) {
  auto halving = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(1).max_epoch(3),
                                       tp::HyperParamSetterWithFunc(tp::learning_rate(), [](int epoch, double lr) { return epoch == 1 ? 0.4 : lr / 2; }),
                                       LearningRates{});
  halving.train();
  EXPECT_EQ(halving.callback<LearningRates>().seen, (std::vector<double>{0.4, 0.2, 0.1}));

  auto warm = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(3).max_epoch(2), tp::Warmup(tp::learning_rate(), 4, 0.0),
                                    LearningRates{});
  warm.train();
  const std::vector<double> expected{0.0125, 0.025, 0.0375, 0.05, 0.05, 0.05};  // towards the optimizer's 0.05
  for (std::size_t i = 0; i < expected.size(); ++i) EXPECT_DOUBLE_EQ(warm.callback<LearningRates>().seen.at(i), expected[i]);

  auto plateau = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(1).max_epoch(6), Scripted{{1.0, 0.9, 0.95, 0.97, 0.8, 0.85}},
                                       tp::ReduceOnPlateau(tp::learning_rate(), "val/error", 2, 0.1), LearningRates{});
  plateau.train();
  // Epochs 3 and 4 do not improve on 0.9: from epoch 5 the rate is a tenth.
  const auto& rates = plateau.callback<LearningRates>().seen;
  EXPECT_EQ(rates[3], 0.05);
  EXPECT_DOUBLE_EQ(rates[4], 0.005);
  EXPECT_DOUBLE_EQ(rates[5], 0.005);
  EXPECT_THROW(tp::ReduceOnPlateau(tp::learning_rate(), "x", 1, 1.5), std::invalid_argument);
  EXPECT_THROW(tp::Warmup(tp::learning_rate(), 0, 0.0), std::invalid_argument);
}

TEST(HyperParams, MomentumWeightDecayAndUserValues) {
  auto trainer = tp::Trainer(tp::DummyInput(tp_test::regression_batch()),
                             tp::model_desc([] { return torch::nn::Linear(4, 1); })
                                 .tower_function([](const tp::TowerContext&, torch::nn::Linear& m, const tp_test::Batch& b) {
                                   return torch::mse_loss(m->forward(b.data), b.target);
                                 })
                                 .optimizer([](torch::nn::Linear& m) {
                                   return torch::optim::Adam(m->parameters(), torch::optim::AdamOptions(1e-3).weight_decay(0.01));
                                 }),
                             tp::SingleDevice(), tp::TrainOptions().steps_per_epoch(1));
  EXPECT_EQ(tp::momentum().get(trainer), 0.9);  // Adam's beta1
  tp::momentum().set(trainer, 0.5);
  EXPECT_EQ(std::get<0>(static_cast<torch::optim::AdamOptions&>(trainer.replicas().optimizer().param_groups()[0].options()).betas()), 0.5);
  EXPECT_EQ(tp::weight_decay().get(trainer), 0.01);
  double dropout = 0.1;
  auto user = tp::hyperparam("dropout", [&](auto&) { return dropout; }, [&](auto&, double v) { dropout = v; });
  auto with_user_value = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(1), tp::ScheduledHyperParamSetter(user, {{1, 0.3}}),
                                               ScalarRecorder{});
  with_user_value.train();
  EXPECT_EQ(dropout, 0.3);
  EXPECT_EQ(with_user_value.callback<ScalarRecorder>().seen, (std::vector<std::pair<std::string, double>>{{"dropout", 0.3}}));
}

// --- validation -------------------------------------------------------------------------------------

TEST(InferenceRunner, PutsTheDatasetMeanOfScalarOutputs) {
  auto data = tp_test::regression_batch(10);
  auto validation = tp::data::examples(data.data, data.target) | tp::data::batch(4);  // batches of 4, 4, 2
  auto infer = [](torch::nn::Linear& m, const tp_test::Batch& b) { return tp::outputs{{"cost", torch::mse_loss(m->forward(b.data), b.target)}}; };
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(3).max_epoch(2),
                                       tp::InferenceRunner(validation, infer, tp::ScalarStats({"cost"}, "val/")), ScalarRecorder{});
  trainer.train();
  const auto& seen = trainer.callback<ScalarRecorder>().seen;
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1].first, "val/cost");
  const double whole = torch::mse_loss(trainer.model()->forward(data.data), data.target).item<double>();
  EXPECT_NEAR(seen[1].second, whole, 1e-6 * whole);  // weighted by batch size: the mean over all 10 rows
}

namespace {
struct ModeProbe {
  bool training_seen = false, grad_seen = false;
};
}  // namespace

TEST(InferenceRunner, ClassificationErrorInEvalModeWithoutGradients) {
  auto labels = torch::tensor({0, 1, 2, 1, 0, 2}, torch::kLong);
  auto flow = tp::data::examples(torch::zeros({6, 4}), labels) | tp::data::batch(4);
  auto probe = std::make_shared<ModeProbe>();
  // The first batch (4 examples) is predicted right, the last (2 examples) all wrong: error 2/6.
  auto infer = [probe](torch::nn::Linear& m, const tp_test::Batch& b) {
    probe->training_seen |= m->is_training();
    probe->grad_seen |= torch::GradMode::is_enabled();
    auto predicted = b.target.clone();
    if (predicted.size(0) == 2) predicted = (predicted + 1) % 3;  // the last batch is all wrong
    return tp::outputs{{"logits", torch::one_hot(predicted, 3).to(torch::kFloat)}, {"label", b.target}};
  };
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(1), tp::InferenceRunner(flow, infer, tp::ClassificationError("logits", "label", "val/error")),
                                       ScalarRecorder{});
  trainer.train();
  EXPECT_EQ(trainer.callback<ScalarRecorder>().seen, (std::vector<std::pair<std::string, double>>{{"val/error", 2.0 / 6.0}}));
  EXPECT_FALSE(probe->training_seen);
  EXPECT_FALSE(probe->grad_seen);
  EXPECT_TRUE(trainer.model()->is_training());
}

TEST(InferenceRunner, AMissingOutputIsNamedAndTheModelGoesBackToTraining) {
  auto data = tp_test::regression_batch(4);
  auto infer = [](torch::nn::Linear& m, const tp_test::Batch& b) { return tp::outputs{{"prediction", m->forward(b.data)}}; };
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(1),
                                       tp::InferenceRunner(tp::data::examples(data.data, data.target) | tp::data::batch(2), infer,
                                                           tp::ScalarStats({"cost"})));
  try {
    trainer.train();
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("gives no output named 'cost'; it gives: prediction"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(trainer.model()->is_training());
}

// --- the default callback set (tensorpack's TrainConfig defaults) ------------------------------

TEST(DefaultCallbacks, OneCallGivesTheUsualSetBesideTheUsersOwn) {
  TempFolder folder;
  fs::create_directories(folder.path);
  const auto batch = tp_test::regression_batch(24);
  auto flow = tp::data::examples(batch.data, batch.target) | tp::data::batch(6);
  Spy mine;
  auto trainer = tp::make_trainer(tp::FeedInput(flow), tp_test::linear_desc(), tp::SingleDevice(), tp::TrainOptions().max_epoch(2),
                                  tp::default_callbacks(folder.path), mine);
  // The pack is flattened: the trainer is the type it is with the callbacks listed by hand, so the
  // set costs what they cost.
  using Listed = tp::Trainer<tp::FeedInput<decltype(flow)>, decltype(tp_test::linear_desc()), tp::SingleDevice, tp::RunEnvironment,
                             tp::ProgressBar, decltype(tp::MovingAverage("cost")), tp::ScalarPrinter, tp::JSONWriter, tp::TensorBoardWriter, Spy>;
  static_assert(std::is_same_v<decltype(trainer), Listed>);
  trainer.train();
  EXPECT_EQ(trainer.steps_per_epoch(), 4);  // one pass of 24 rows in batches of 6
  const auto epochs = tp::JSONWriter::read(folder.path / "stats.json");
  ASSERT_EQ(epochs.size(), 2u);
  EXPECT_EQ(epochs[1].global_step, 8);
  EXPECT_TRUE(epochs[1].scalars.contains("cost"));  // the moving average, put at each epoch's end
  bool events = false;
  for (const auto& entry : fs::directory_iterator(folder.path)) events |= entry.path().filename().string().starts_with("events.out.tfevents");
  EXPECT_TRUE(events);
  EXPECT_EQ(tp_test::only(*mine.log, "after_epoch").size(), 2u);
}
