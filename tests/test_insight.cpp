// Seeing inside a run: the model summary, the profiler's trace with tp's phase markers,
// callback times, TensorBoard histograms, images and texts, live hyperparameters (hyper.txt) and
// the numerics watch.
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "support.hpp"

namespace fs = std::filesystem;
using tp_test::Batch;
using tp_test::TempDir;

namespace {

struct Frozen : torch::nn::Module {
  Frozen() {
    conv = register_module("conv", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 8, 5)));
    head = register_module("head", torch::nn::Linear(8, 2));
    head->bias.set_requires_grad(false);
    bn = register_module("bn", torch::nn::BatchNorm1d(2));
  }
  torch::nn::Conv2d conv{nullptr};
  torch::nn::Linear head{nullptr};
  torch::nn::BatchNorm1d bn{nullptr};
};

// Two towers (Replicated), so that the trace shows the towers' threads and the reduction.
auto two_tower_trainer(tp::TrainOptions options, auto... callbacks) {
  return tp::Trainer(tp::DummyInput(tp_test::regression_batch()), tp_test::linear_desc(),
                     tp::Replicated({torch::Device(torch::kCPU), torch::Device(torch::kCPU)}), options.model_summary(false),
                     std::move(callbacks)...);
}

struct Edit {
  fs::path file;
  void after_step(auto& t) {
    if (t.global_step() == 3) std::ofstream(file) << "learning_rate : 0.002  # lower\n";
  }
};
struct PoisonWeight {
  void after_step(auto& t) {
    torch::NoGradGuard no_grad;
    if (t.global_step() == 3) t.model()->bias[0] = NAN;
  }
};
struct PoisonGradient {
  void after_step(auto& t) {
    if (t.global_step() == 4) t.model()->weight.mutable_grad()[0][1] = INFINITY;
  }
};

struct LrRecorder {
  std::shared_ptr<std::vector<double>> lr = std::make_shared<std::vector<double>>();
  void before_step(auto& t) { lr->push_back(tp::learning_rate().get(t)); }
};

}  // namespace

// --- model summary ---------------------------------------------------------------------------------

TEST(ModelSummary, ListsModulesWithTheirParametersAndTotals) {
  Frozen model;
  const auto rows = tp::summarize_modules(model);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].name, "conv");
  EXPECT_EQ(rows[0].type, "torch::nn::Conv2dImpl");
  EXPECT_EQ(rows[0].trainable, 8 * 25 + 8);
  EXPECT_EQ(rows[0].bytes, (8 * 25 + 8) * 4);
  EXPECT_EQ(rows[1].name, "head");
  EXPECT_EQ(rows[1].trainable, 16);
  EXPECT_EQ(rows[1].frozen, 2);
  const auto text = tp::model_summary(model);
  EXPECT_NE(text.find("[8, 1, 5, 5] [8]"), std::string::npos) << text;
  EXPECT_NE(text.find("total"), std::string::npos) << text;
  EXPECT_NE(text.find("228       2"), std::string::npos) << text;  // 208 + 16 + 4 (BatchNorm weight and bias) trainable, 2 frozen
  EXPECT_NE(text.find("(buffers 24 B)"), std::string::npos) << text;  // running mean and var (2 floats each), batch count (int64)
}

TEST(ModelSummary, TheTrainerPrintsItAndTheOptimizerStateUnlessTurnedOff) {
  testing::internal::CaptureStdout();
  tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(2)).train();
  const auto on = testing::internal::GetCapturedStdout();
  EXPECT_NE(on.find("tp: the model\nmodule"), std::string::npos) << on;
  EXPECT_NE(on.find("tp: optimizer state after the first step: "), std::string::npos) << on;
  testing::internal::CaptureStdout();
  tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(2).model_summary(false)).train();
  EXPECT_EQ(testing::internal::GetCapturedStdout(), "");
}

TEST(ModelSummary, TheOptimizerStateGrowsWithAdamsMoments) {
  torch::nn::Linear model(100, 10);
  torch::optim::SGD sgd(model->parameters(), 0.1);
  torch::optim::Adam adam(model->parameters(), 0.1);
  model->forward(torch::ones({1, 100})).sum().backward();
  adam.step();
  // Two moments of the 1010 parameters, 4 bytes each, and a little more.
  EXPECT_GT(tp::optimizer_state_bytes(adam) - tp::optimizer_state_bytes(sgd), 2 * 1010 * 4);
}

// --- profiler --------------------------------------------------------------------------------------

namespace {
struct Slow {
  void after_epoch(auto&) {  // busy for 30 ms: a callback that takes a noticeable share of an epoch
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(30);
    while (std::chrono::steady_clock::now() < until) {
    }
  }
};
struct Quick {
  void after_step(auto&) {}
};
}  // namespace

TEST(Profiler, WritesAChromeTraceOfItsWindowWithTpsPhases) {
  TempDir dir("profiler_trace");
  auto trainer = two_tower_trainer(tp::TrainOptions().steps_per_epoch(3).max_epoch(2), tp::Profiler(dir.path, {{2, 4}}), Quick{});
  trainer.train();
  const auto& traces = trainer.callback<tp::Profiler>().traces();
  ASSERT_EQ(traces.size(), 1u);
  EXPECT_EQ(traces[0], dir.path / "trace-steps-2-4.json");
  const auto trace = nlohmann::json::parse(std::ifstream(traces[0]));  // throws if it is not JSON
  ASSERT_TRUE(trace.is_array());
  std::set<std::string> names;
  std::map<std::string, std::set<std::string>> threads;  // name -> tids
  std::map<std::string, int> count;
  for (const auto& event : trace) {
    ASSERT_EQ(event.at("ph"), "X");  // complete events: a name, a start and a duration
    EXPECT_GE(event.at("dur").get<double>(), 0);
    const auto name = event.at("name").get<std::string>();
    names.insert(name);
    ++count[name];
    threads[name].insert(event.at("tid").dump());
  }
  for (const char* phase : {"tp::input_wait", "tp::tower_forward", "tp::tower_backward", "tp::reduce", "tp::optimizer_step",
                            "tp::callback/Quick.after_step", "aten::mm"})
    EXPECT_TRUE(names.contains(phase)) << phase << " is not in the trace";
  EXPECT_EQ(count["tp::reduce"], 3);  // steps 2, 3 and 4
  EXPECT_EQ(count["tp::tower_forward"], 6);  // two towers
  EXPECT_EQ(threads["tp::tower_forward"].size(), 2u);  // each in its own thread
  EXPECT_EQ(count["tp::callback/Quick.after_step"], 2);  // the window ends at the Profiler's own after_step of step 4
  EXPECT_FALSE(fs::exists(dir.path / "trace-steps-2-4.json.partial"));
}

TEST(Profiler, ARunThatEndsInsideAWindowWritesWhatItRecorded) {
  TempDir dir("profiler_end");
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(3).model_summary(false), tp::Profiler(dir.path, {{2, 10}}));
  trainer.train();
  ASSERT_EQ(trainer.callback<tp::Profiler>().traces().size(), 1u);
  const auto trace = nlohmann::json::parse(std::ifstream(dir.path / "trace-steps-2-10.json"));
  int forwards = 0;
  for (const auto& event : trace) forwards += event.at("name") == "tp::tower_forward";
  EXPECT_EQ(forwards, 2);  // steps 2 and 3
}

TEST(Profiler, BadWindowsSayWhatIsWrong) {
  const auto error = [](std::vector<tp::Profiler::window> w) {
    return tp_test::error_message_of<std::invalid_argument>([&] { tp::Profiler("unused", std::move(w)); });
  };
  EXPECT_EQ(error({}), "(no error)");  // none: profiles nothing
  EXPECT_NE(error({{0, 3}}).find("window 0:3 starts before step 1"), std::string::npos);
  EXPECT_NE(error({{5, 3}}).find("window 5:3 ends before it starts"), std::string::npos);
  EXPECT_NE(error({{1, 5}, {5, 8}}).find("window 5:8 overlaps"), std::string::npos);
}

TEST(CallbackTimeLogger, NamesTheCallbacksThatTookANoticeableShareOfTheEpoch) {
  std::ostringstream out;
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(2).max_epoch(2).model_summary(false), Quick{}, Slow{},
                                       tp::CallbackTimeLogger(0.05, out));
  trainer.train();
  const auto& last = trainer.callback<tp::CallbackTimeLogger>().last();
  EXPECT_EQ(last.epoch, 2);
  ASSERT_EQ(last.callbacks.size(), 3u);
  EXPECT_EQ(last.callbacks[1].name, "Slow");
  EXPECT_GE(last.callbacks[1].seconds, 0.03);
  EXPECT_GE(last.seconds, last.callbacks[1].seconds);
  EXPECT_LT(last.callbacks[0].seconds, last.callbacks[1].seconds);
  const auto text = out.str();
  EXPECT_NE(text.find("tp: epoch 1 took "), std::string::npos) << text;
  EXPECT_NE(text.find("tp: epoch 2 took "), std::string::npos) << text;
  EXPECT_NE(text.find(": Slow 0.0"), std::string::npos) << text;
  EXPECT_EQ(text.find("Quick"), std::string::npos) << text;  // under 5%
}

// --- TensorBoard beyond scalars ---------------------------------------------------------------------

namespace {
struct PutsOneOfEach {
  void after_epoch(auto& t) {
    t.put_histogram("values", torch::tensor({1.0, 2.0, 3.0, 4.0, std::nan("")}));
    // 2 rows, 3 columns, RGB: red, green, blue / black, grey, white.
    auto image = torch::tensor({255, 0, 0, 0, 255, 0, 0, 0, 255, 0, 0, 0, 128, 128, 128, 255, 255, 255}, torch::kUInt8).view({2, 3, 3});
    t.put_image("picture", image);
    t.put_text("note", "**bold** words");
  }
};
}  // namespace

TEST(TensorBoardWriter, WritesHistogramsImagesAndTextsThatIndependentDecodersRead) {
  TempDir dir("tensorboard_more");
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(2).model_summary(false), PutsOneOfEach{},
                                       tp::TensorBoardWriter(dir.path).config("batch: 8"));
  trainer.train();
  const auto decoded = tp_test::decode_tensorboard_records(trainer.callback<tp::TensorBoardWriter>().path(), dir.path);
  ASSERT_EQ(decoded.size(), 5u);  // the version, the config, then the three values at step 2
  // Text: a string tensor (dtype 7) for the text plugin.
  EXPECT_NE(decoded[1].find("1: \"config\"\n    8 {\n      1: 7\n      2: \"\"\n      8: \"batch: 8\"\n    }\n    9 {\n      1 {\n        1: \"text\""),
            std::string::npos)
      << decoded[1];
  EXPECT_NE(decoded[4].find("8: \"**bold** words\""), std::string::npos) << decoded[4];
  // Histogram of 1, 2, 3, 4 (the NaN left out): min 1, max 4, num 4, sum 10, sum of squares 30.
  for (const char* field : {"1: 0x3ff0000000000000", "2: 0x4010000000000000", "3: 0x4010000000000000", "4: 0x4024000000000000",
                            "5: 0x403e000000000000"})
    EXPECT_NE(decoded[2].find(field), std::string::npos) << field << " in\n" << decoded[2];
  // Image: height 2, width 3, 3 channels, and PNG bytes that PIL decodes to the same pixels.
  EXPECT_NE(decoded[3].find("4 {\n      1: 2\n      2: 3\n      3: 3\n      4: \"\\211PNG"), std::string::npos) << decoded[3];
  const auto record = tp_test::read_all(dir.path / "record3");
  const auto png = record.substr(record.find("\x89PNG"));
  std::ofstream(dir.path / "picture.png", std::ios::binary).write(png.data(), static_cast<std::streamsize>(png.size()));
  EXPECT_EQ(tp_test::run(std::string(TP_PYTHON) + " -c \"from PIL import Image; im = Image.open('" + (dir.path / "picture.png").string() +
                         "'); print(im.size, im.mode, list(im.getdata()))\""),
            "(3, 2) RGB [(255, 0, 0), (0, 255, 0), (0, 0, 255), (0, 0, 0), (128, 128, 128), (255, 255, 255)]\n");
}

TEST(TensorBoardWriter, ParamHistogramsAndFilterImagesReachTheFile) {
  TempDir dir("tensorboard_params");
  auto desc = tp::model_desc([] { return torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 5, 3)); })
                  .tower_function([](const tp::TowerContext&, torch::nn::Conv2d& m, const Batch& b) { return m->forward(b.data).mean(); })
                  .optimizer([](torch::nn::Conv2d& m) { return torch::optim::SGD(m->parameters(), 0.1); });
  tp::Trainer trainer(tp::DummyInput(Batch{torch::randn({2, 1, 6, 6}), torch::zeros({2})}), desc, tp::SingleDevice(),
                      tp::TrainOptions().steps_per_epoch(1).max_epoch(2).model_summary(false), tp::ParamHistograms(),
                      tp::FilterImages("weight"), tp::TensorBoardWriter(dir.path));
  trainer.train();
  std::vector<std::string> tags;
  for (const auto& record : tp_test::decode_tensorboard_records(trainer.callback<tp::TensorBoardWriter>().path(), dir.path))
    if (const auto at = record.find("1: \""); at != std::string::npos && record.find("5 {") != std::string::npos)
      tags.push_back(record.substr(at + 4, record.find('"', at + 4) - at - 4));
  EXPECT_EQ(tags, (std::vector<std::string>{"param/weight", "grad/weight", "param/bias", "grad/bias", "filters/weight",
                                            "param/weight", "grad/weight", "param/bias", "grad/bias", "filters/weight"}));
  // 5 filters of 3x3 in a 3-column grid with one-pixel gaps: 2 rows.
  EXPECT_EQ(tp::detail::filter_grid(torch::randn({5, 1, 3, 3})).sizes(), (std::vector<std::int64_t>{1, 7, 11}));
  EXPECT_EQ(tp::detail::filter_grid(torch::randn({4, 3, 2, 2})).sizes(), (std::vector<std::int64_t>{3, 5, 5}));
}

TEST(TensorBoardWriter, BadImagesAndNamesSayWhatIsWrong) {
  const auto put = [](torch::Tensor image) {
    return tp_test::error_message_of<std::invalid_argument>([&] { tp::detail::image_pixels(image, "x"); });
  };
  EXPECT_NE(put(torch::zeros({2, 5, 5})).find("put_image(\"x\"): the image must have 2 dimensions, or 3 with 1, 3 or 4 channels"),
            std::string::npos);
  EXPECT_NE(put(torch::zeros({0, 5})).find("the image is empty"), std::string::npos);
  EXPECT_NE(put(torch::zeros({4, 4}, torch::kInt)).find("uint8 or floating point"), std::string::npos);
  EXPECT_EQ(tp::detail::image_pixels(torch::full({3, 2, 2}, 2.0), "x").sizes(), (std::vector<std::int64_t>{2, 2, 3}));  // CHW -> HWC
  EXPECT_EQ(tp::detail::image_pixels(torch::full({3, 2, 2}, 2.0), "x")[0][0][0].item<int>(), 255);  // clamped to 1
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(1).model_summary(false), tp::FilterImages("conv1.weight"));
  EXPECT_EQ(tp_test::error_message_of<std::invalid_argument>([&] { trainer.train(); }),
            "tp::FilterImages: the model has no convolution weight [out, in, kh, kw] named \"conv1.weight\"; its 4-dimensional "
            "parameters: none");
}

// --- live hyperparameters ----------------------------------------------------------------------------

TEST(HumanHyperParamSetter, AChangeToTheFileTakesEffectAtTheNextCheck) {
  TempDir dir("hyper");
  const auto file = dir.path / "hyper.txt";
  std::ofstream(file) << "# set by hand\nlearning_rate: 0.01\n";
  LrRecorder recorder;
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(6).model_summary(false),
                                       tp::HumanHyperParamSetter(file, tp::learning_rate()).every_steps(2), recorder, Edit{file});
  trainer.train();
  // Checks before steps 1, 3 and 5; the edit after step 3 is seen before step 5.
  EXPECT_EQ(*recorder.lr, (std::vector<double>{0.01, 0.01, 0.01, 0.01, 0.002, 0.002}));
}

TEST(HumanHyperParamSetter, ABadLineIsReportedAndSkippedNeverFatal) {
  TempDir dir("hyper_bad");
  const auto file = dir.path / "hyper.txt";
  std::ofstream(file) << "learning_rate 0.5\nlr: 0.5\nmomentum: fast\nmomentum: nan\n\nlearning_rate: 0.03\nlearning_rate: 0.04\n";
  tp::HumanHyperParamSetter setter(file, tp::learning_rate(), tp::momentum());
  std::ostringstream report;
  const auto found = setter.parse(report);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0], (std::pair<std::size_t, double>{0, 0.03}));
  const auto text = report.str();
  for (const char* line : {"line 1: expected `name: value`, got \"learning_rate 0.5\"; line skipped",
                           "line 2: no hyperparameter named \"lr\" here (known: learning_rate, momentum); line skipped",
                           "line 3: the value of momentum must be a finite number, got \"fast\"",
                           "line 4: the value of momentum must be a finite number, got \"nan\"",
                           "line 7: learning_rate is given twice; the first one holds"})
    EXPECT_NE(text.find(line), std::string::npos) << line << " not in\n" << text;
  // In a run, the good line takes effect and the bad ones stop nothing.
  LrRecorder recorder;
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(2).model_summary(false),
                                       tp::HumanHyperParamSetter(file, tp::learning_rate()), recorder);
  trainer.train();
  EXPECT_EQ(*recorder.lr, (std::vector<double>{0.03, 0.03}));
  // A missing file changes nothing.
  LrRecorder untouched;
  auto no_file = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(1).model_summary(false),
                                       tp::HumanHyperParamSetter(dir.path / "none.txt", tp::learning_rate()), untouched);
  no_file.train();
  EXPECT_EQ(*untouched.lr, (std::vector<double>{0.05}));
}

// --- numerics watch --------------------------------------------------------------------------------

TEST(NumericsWatch, ANaNWeightStopsTheRunWithTheParametersNameAndStep) {
  auto trainer = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(10).model_summary(false), PoisonWeight{}, tp::NumericsWatch());
  EXPECT_EQ(tp_test::error_message_of<tp::numerics_error>([&] { trainer.train(); }),
            "tp::NumericsWatch: the parameter bias holds NaN after step 3; resume from the last checkpoint with a lower learning rate, "
            "gradient clipping or loss scaling");
  EXPECT_EQ(trainer.global_step(), 3);
}

TEST(NumericsWatch, GradientsAreWatchedWhenAsked) {
  auto watched = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(10).model_summary(false), PoisonGradient{},
                                       tp::NumericsWatch().every_steps(2).gradients(true));
  EXPECT_NE(tp_test::error_message_of<tp::numerics_error>([&] { watched.train(); }).find("the gradient of weight holds Inf after step 4"),
            std::string::npos);
  auto weights_only = tp_test::make_trainer(tp::TrainOptions().steps_per_epoch(5).model_summary(false), PoisonGradient{}, tp::NumericsWatch());
  EXPECT_EQ(weights_only.train().global_step, 5);  // the next step's zero_grad cleared it
}

// --- the hooks' rules -----------------------------------------------------------------------------------

namespace {
struct HistogramOnly {
  void on_histogram(auto&, std::string_view, const torch::Tensor&) {}
};
struct TimesOnly {
  void on_epoch_times(auto&, const tp::epoch_times&) {}
};
struct TextWrong {
  void on_text(auto&, std::string_view) {}
};
}  // namespace
static_assert(tp::callback<HistogramOnly> && tp::callback<TimesOnly> && tp::callback<TextWrong>);
using Plain = decltype(tp_test::make_trainer(tp::TrainOptions()));
static_assert(tp::callback_for<HistogramOnly, Plain> && tp::callback_for<TimesOnly, Plain>);
static_assert(!tp::callback_for<TextWrong, Plain>);
