#pragma once
// tp::default_callbacks(logdir): the callbacks every run wants, in one call (tensorpack's
// TrainConfig defaults): what the run computes with (RunEnvironment), a progress bar, a moving
// average of the cost, and the scalar printer, stats.json and TensorBoard writers in the log
// folder. The model summary is TrainOptions::model_summary, on by default.
//
//   auto trainer = tp::make_trainer(input, desc, tp::SingleDevice(), tp::TrainOptions(),
//                                   tp::default_callbacks(logdir), tp::ModelSaver(logdir));
//
// A callback_pack is flattened by tp::make_trainer (trainer/make_trainer.hpp) into the
// trainer's list of callbacks: the trainer is the same type as with the callbacks listed by
// hand, so the set costs what they cost, and nothing for the hooks they do not have.
#include <filesystem>

#include <tp/callback_pack.hpp>
#include <tp/callbacks/moving_average.hpp>
#include <tp/callbacks/progress_bar.hpp>
#include <tp/callbacks/run_environment.hpp>
#include <tp/monitors/console.hpp>
#include <tp/monitors/json.hpp>
#include <tp/monitors/tensorboard.hpp>

namespace tp {

inline auto default_callbacks(const std::filesystem::path& logdir) {
  return callbacks(RunEnvironment(), ProgressBar(), MovingAverage("cost"), ScalarPrinter(), JSONWriter(logdir), TensorBoardWriter(logdir));
}

}  // namespace tp
