#pragma once
// What a checkpoint holds of a trainer, and how it is saved and loaded (Lightning's checkpoint
// connector): everything a resumed run needs to go on exactly as an uninterrupted one.
//
//   tp/format               2 (format 1, with callback state by position, is still read)
//   loop/*                  the loop's position (trainer/loop_position.hpp)
//   model                   the main tower's parameters and buffers, by name
//   optimizer/N, .../count  every optimizer, with its hyperparameters
//   loss_scaler             the loss scaler, when the tower has one
//   rng/cpu, rng/cuda       the random generators
//   input/flow, /consumed   the input's position in its dataflow (resumable inputs)
//   callback/KEY#N, /keys   the callbacks' state, by name (trainer/callback_set.hpp)
//
// Multi-tower policies bring the other towers back to the main one when training starts.
#include <cstdint>
#include <string>
#include <vector>

#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <tp/checkpoint_error.hpp>
#include <tp/concepts/input.hpp>
#include <tp/data/state.hpp>
#include <tp/detail/archive.hpp>
#include <tp/loss_scaler.hpp>
#include <tp/trainer/loop_position.hpp>

namespace tp::detail {

inline constexpr std::int64_t trainer_state_format = 2;

// A friend of the trainer: it reads and writes the trainer's parts.
template <class Trainer>
struct trainer_state {
  static void save(Trainer& t, torch::serialize::OutputArchive& archive) {
    archive.write("tp/format", c10::IValue(trainer_state_format));
    t.position_.save(archive);
    torch::serialize::OutputArchive model;
    save_module(model, *t.model_module());
    archive.write("model", model);
    std::int64_t count = 0;
    t.replicas_.for_each_optimizer([&](auto& optimizer) {
      torch::serialize::OutputArchive one;
      optimizer.save(one);
      archive.write("optimizer/" + std::to_string(count++), one);
    });
    archive.write("optimizer/count", c10::IValue(count));
    if (const auto* scaler = loss_scaler_of(t.tower_)) {
      torch::serialize::OutputArchive one;
      scaler->save(one);
      archive.write("loss_scaler", one);
    }
    save_cpu_rng(archive, "rng/cpu");
    save_cuda_rng(archive, "rng/cuda");
    if constexpr (resumable_input<typename Trainer::input_type>) {
      const auto where = t.input_.position();
      archive.write("input/flow", c10::IValue(std::vector<std::int64_t>(where.flow.begin(), where.flow.end())));
      archive.write("input/consumed", c10::IValue(where.consumed));
    }
    t.callbacks_.save_state(t, archive);
  }

  static void load(Trainer& t, torch::serialize::InputArchive& archive) {
    const auto format = read_int(archive, "tp/format");
    if (format != 1 && format != trainer_state_format)
      throw checkpoint_error("the checkpoint has format " + std::to_string(format) + "; this tp reads formats 1 and " +
                             std::to_string(trainer_state_format));
    const auto saved = loop_position::read(archive);
    torch::serialize::InputArchive model;
    read_archive(archive, "model", model);
    load_module(model, *t.model_module());
    load_optimizers(t, archive);
    // A checkpoint of a run without loss scaling leaves the scaler at its initial scale.
    torch::serialize::InputArchive scaler_state;
    if (auto* scaler = loss_scaler_of(t.tower_); scaler && archive.try_read("loss_scaler", scaler_state)) scaler->load(scaler_state);
    load_cpu_rng(archive, "rng/cpu");
    load_cuda_rng(archive, "rng/cuda");
    if constexpr (resumable_input<typename Trainer::input_type>) {
      data::position where;
      for (auto v : read_ints(archive, "input/flow")) where.flow.push_back(static_cast<std::uint64_t>(v));
      where.consumed = read_int(archive, "input/consumed");
      t.input_.restore(where);
    }
    t.callbacks_.load_state(t, archive, format);
    t.position_.global_step = saved.global_step;
    t.resume_ = saved.resumes_at();
    t.options_.starting_epoch(t.resume_.epoch);
  }

 private:
  static void load_optimizers(Trainer& t, torch::serialize::InputArchive& archive) {
    std::int64_t count = 0;
    const auto saved_count = read_int(archive, "optimizer/count");
    t.replicas_.for_each_optimizer([&](auto& optimizer) {
      if (count >= saved_count)
        throw checkpoint_error("the checkpoint holds " + std::to_string(saved_count) + " optimizers but this trainer has more");
      torch::serialize::InputArchive one;
      read_archive(archive, "optimizer/" + std::to_string(count++), one);
      try {
        optimizer.load(one);
      } catch (const c10::Error& e) {
        throw checkpoint_error("the checkpoint's optimizer " + std::to_string(count - 1) + " does not fit this trainer's (" +
                               e.what_without_backtrace() + "); build the optimizer as the run that saved it did");
      }
    });
    if (count != saved_count)
      throw checkpoint_error("the checkpoint holds " + std::to_string(saved_count) + " optimizers but this trainer has " + std::to_string(count));
  }
};

}  // namespace tp::detail
