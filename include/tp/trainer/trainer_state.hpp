#pragma once
// What a checkpoint holds of a trainer, and how it is saved and loaded (Lightning's checkpoint
// connector): everything a resumed run needs to go on exactly as an uninterrupted one.
//
// A checkpoint file holds it as the dictionary Python's torch.load returns, in the shape of
// Lightning's checkpoints (to_dict, from_dict):
//
//   state_dict              the main tower's parameters and buffers, by name (conv1.weight)
//   optimizer_states        every optimizer, in torch.optim's state_dict format when it has a
//                           Python twin (optim/torch_optim_state.hpp), else {libtorch_archive}
//   epoch, global_step      where the loop was
//   tp/format, tp/state     3, and the rest as a LibTorch archive (below, without model and
//                           optimizers)
//   tp/layout               processes, and batches each takes per step (towers x micro-batches):
//                           a resumable input's position holds only on that layout
//
// In memory (save, load: Trainer::save_state) it is one LibTorch archive:
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
// A state that does not fit throws checkpoint_error, and leaves the model, the optimizers and
// the loop as they were (all_or_nothing). Multi-tower policies bring the other towers back to the main one when
// training starts.
#include <concepts>
#include <cstdint>
#include <string>
#include <vector>

#include <ATen/core/Dict.h>
#include <ATen/core/List.h>
#include <torch/optim/optimizer.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <tp/checkpoint_error.hpp>
#include <tp/concepts/input.hpp>
#include <tp/data/state.hpp>
#include <tp/detail/archive.hpp>
#include <tp/detail/python_pickle.hpp>
#include <tp/loss_scaler.hpp>
#include <tp/optim/torch_optim_state.hpp>
#include <tp/state_dict.hpp>
#include <tp/trainer/loop_position.hpp>

namespace tp::detail {

inline constexpr std::int64_t trainer_state_format = 2;  // the whole state in one LibTorch archive
inline constexpr std::int64_t dict_state_format = 3;     // a checkpoint file's dictionary

// A friend of the trainer: it reads and writes the trainer's parts.
template <class Trainer>
struct trainer_state {
  static void save(Trainer& t, torch::serialize::OutputArchive& archive) {
    archive.write("tp/format", c10::IValue(trainer_state_format));
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
    save_rest(t, archive);
  }

  static c10::impl::GenericDict to_dict(Trainer& t) {
    auto all = optim::detail::new_dict();
    all.insert("state_dict", state_dict_of(*t.model_module()));
    c10::impl::GenericList optimizers(c10::AnyType::get());
    t.replicas_.for_each_optimizer([&](auto& optimizer) {
      const torch::optim::Optimizer* base = as_torch_optimizer(optimizer);
      if (auto in_python = base ? optim::to_torch_optim_state(*base) : std::nullopt) {
        optimizers.push_back(*in_python);
      } else {
        torch::serialize::OutputArchive one;
        optimizer.save(one);
        auto own = optim::detail::new_dict();
        own.insert("libtorch_archive", archive_bytes(one));
        optimizers.push_back(own);
      }
    });
    all.insert("optimizer_states", optimizers);
    all.insert("epoch", std::int64_t{t.position_.epoch_num});
    all.insert("global_step", t.position_.global_step);
    torch::serialize::OutputArchive rest;
    rest.write("tp/format", c10::IValue(dict_state_format));
    save_rest(t, rest);
    auto own = optim::detail::new_dict();
    own.insert("format", dict_state_format);
    own.insert("state", archive_bytes(rest));
    auto layout = optim::detail::new_dict();
    layout.insert("processes", std::int64_t{t.process_count()});
    layout.insert("batches_per_step", std::int64_t{batches_per_step(t)});
    own.insert("layout", layout);
    all.insert("tp", own);
    return all;
  }

  static void load(Trainer& t, torch::serialize::InputArchive& archive) {
    all_or_nothing(t, [&] {
      const auto format = read_int(archive, "tp/format");
      if (format != 1 && format != trainer_state_format)
        throw checkpoint_error("the checkpoint has format " + std::to_string(format) + "; this tp reads formats 1 and " +
                               std::to_string(trainer_state_format) + " here (format " + std::to_string(dict_state_format) +
                               " is a checkpoint file's: read it with tp::load_checkpoint)");
      torch::serialize::InputArchive model;
      read_archive(archive, "model", model);
      load_module(model, *t.model_module());
      load_optimizers(t, archive);
      load_rest(t, archive, format);
    });
  }

  // What to_dict wrote (a checkpoint file read by detail::read_torch_save); `source` names it.
  static void from_dict(Trainer& t, const py_value& saved, const std::string& source) {
    if (!saved.is_dict()) throw checkpoint_error(source + " holds " + saved.describe() + ", not a checkpoint's dictionary");
    const auto* own = saved.find("tp");
    const auto* format = own && own->is_dict() ? own->find("format") : nullptr;
    const auto* state = own && own->is_dict() ? own->find("state") : nullptr;
    if (!format || format->type() != py_value::kind::integer || !state || state->type() != py_value::kind::tensor)
      throw checkpoint_error(source + " has no tp section (tp/format, tp/state): it is not a tp checkpoint; to start from a "
                                      "state_dict, use tp::load_state_dict(model, path)");
    if (format->as_int() != dict_state_format)
      throw checkpoint_error(source + " has format " + std::to_string(format->as_int()) + "; this tp reads format " +
                             std::to_string(dict_state_format));
    check_layout(t, *own, source);
    torch::serialize::InputArchive rest;
    const auto bytes = state->tensor().contiguous();
    rest.load_from(static_cast<const char*>(bytes.data_ptr()), static_cast<std::size_t>(bytes.numel()));
    const auto* optimizers = saved.find("optimizer_states");
    if (!optimizers || optimizers->type() != py_value::kind::list) throw checkpoint_error(source + " has no list optimizer_states");
    all_or_nothing(t, [&] {
      load_state_dict(*t.model_module(), saved, StateDictOptions(), source);
      std::size_t count = 0;
      t.replicas_.for_each_optimizer([&](auto& optimizer) {
        if (count >= optimizers->items().size())
          throw checkpoint_error("the checkpoint holds " + std::to_string(optimizers->items().size()) + " optimizers but this trainer has more");
        const auto& one = optimizers->items()[count++];
        const auto* own_archive = one.is_dict() ? one.find("libtorch_archive") : nullptr;
        if (own_archive && own_archive->type() == py_value::kind::tensor) {
          torch::serialize::InputArchive archive;
          const auto archive_data = own_archive->tensor().contiguous();
          archive.load_from(static_cast<const char*>(archive_data.data_ptr()), static_cast<std::size_t>(archive_data.numel()));
          load_one_optimizer(optimizer, archive, count - 1);
        } else if (torch::optim::Optimizer* base = as_torch_optimizer(optimizer)) {
          optim::load_torch_optim_state(*base, one, "optimizer " + std::to_string(count - 1));
        } else {
          throw checkpoint_error("the checkpoint's optimizer " + std::to_string(count - 1) +
                                 " is in torch.optim's format, which this trainer's optimizer type cannot take");
        }
      });
      if (count != optimizers->items().size())
        throw checkpoint_error("the checkpoint holds " + std::to_string(optimizers->items().size()) + " optimizers but this trainer has " +
                               std::to_string(count));
      load_rest(t, rest, dict_state_format);
    });
  }

 private:
  // Batches one process takes per step (towers times micro-batches), 1 when the policy cannot say.
  static std::int64_t batches_per_step(const Trainer& t) {
    if constexpr (counts_batches<typename Trainer::replicas_type>) return t.replicas_.batches_per_step();
    else return 1;
  }

  // The input's position is a count of batches of this process's shard, which means something
  // only on the layout that wrote it: on another number of processes or batches per step, a
  // resumed run would train some examples twice and skip others. Refused, naming both layouts,
  // until positions are kept in the pass's global order.
  static void check_layout(const Trainer& t, const py_value& own, const std::string& source) {
    if constexpr (resumable_input<typename Trainer::input_type>) {
      const auto* layout = own.find("layout");
      if (!layout || !layout->is_dict()) return;  // written before tp recorded layouts
      const auto* processes = layout->find("processes");
      const auto* per_step = layout->find("batches_per_step");
      if (!processes || processes->type() != py_value::kind::integer || !per_step || per_step->type() != py_value::kind::integer)
        throw checkpoint_error(source + " has a layout without whole counts of processes and batches per step");
      const std::int64_t here_processes = t.process_count(), here_per_step = batches_per_step(t);
      if (processes->as_int() == here_processes && per_step->as_int() == here_per_step) return;
      auto describe = [](std::int64_t p, std::int64_t b) {
        return std::to_string(p) + (p == 1 ? " process" : " processes") + " taking " + std::to_string(b) +
               (b == 1 ? " batch" : " batches") + " per step each";
      };
      throw checkpoint_error(source + " was written by " + describe(processes->as_int(), per_step->as_int()) + "; this run has " +
                             describe(here_processes, here_per_step) +
                             ". tp cannot yet move the input's position to another layout (examples would be trained twice or "
                             "skipped): resume with the layout that wrote it (tp-run -n " + std::to_string(processes->as_int()) +
                             ", the same towers and accumulation), or start afresh in another log folder from its weights "
                             "(tp-export --state-dict, then tp::load_state_dict)");
    }
  }

  // The state beside the model and optimizers, in the archive's keys above.
  static void save_rest(Trainer& t, torch::serialize::OutputArchive& archive) {
    t.position_.save(archive);
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

  static void load_rest(Trainer& t, torch::serialize::InputArchive& archive, std::int64_t format) {
    const auto saved = loop_position::read(archive);
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

  static void load_optimizers(Trainer& t, torch::serialize::InputArchive& archive) {
    std::int64_t count = 0;
    const auto saved_count = read_int(archive, "optimizer/count");
    t.replicas_.for_each_optimizer([&](auto& optimizer) {
      if (count >= saved_count)
        throw checkpoint_error("the checkpoint holds " + std::to_string(saved_count) + " optimizers but this trainer has more");
      torch::serialize::InputArchive one;
      read_archive(archive, "optimizer/" + std::to_string(count), one);
      load_one_optimizer(optimizer, one, count++);
    });
    if (count != saved_count)
      throw checkpoint_error("the checkpoint holds " + std::to_string(saved_count) + " optimizers but this trainer has " + std::to_string(count));
  }

  template <class Optimizer>
  static void load_one_optimizer(Optimizer& optimizer, torch::serialize::InputArchive& archive, std::int64_t index) {
    try {
      optimizer.load(archive);
    } catch (const c10::Error& e) {
      throw checkpoint_error("the checkpoint's optimizer " + std::to_string(index) + " does not fit this trainer's (" +
                             e.what_without_backtrace() + "); build the optimizer as the run that saved it did");
    }
  }

  // The optimizer as LibTorch's base class (through AnyOptimizer's get()), or null.
  template <class Optimizer>
  static torch::optim::Optimizer* as_torch_optimizer(Optimizer& optimizer) {
    if constexpr (std::derived_from<Optimizer, torch::optim::Optimizer>) return &optimizer;
    else if constexpr (requires { { optimizer.get() } -> std::convertible_to<torch::optim::Optimizer&>; }) return &optimizer.get();
    else return nullptr;
  }

  // Runs load(); if it throws, the trainer gets back its model, optimizers, loop position and
  // CPU generator as they were (saved here first), so that a checkpoint that does not fit never
  // leaves a half-loaded model or optimizer. (Callbacks are not saved here: their state may not
  // exist before training, and their set is checked whole before any of it is loaded.)
  template <class Load>
  static void all_or_nothing(Trainer& t, Load&& load) {
    torch::serialize::OutputArchive before, model;
    save_module(model, *t.model_module());
    before.write("model", model);
    std::int64_t count = 0;
    t.replicas_.for_each_optimizer([&](auto& optimizer) {
      torch::serialize::OutputArchive one;
      optimizer.save(one);
      before.write("optimizer/" + std::to_string(count++), one);
    });
    before.write("optimizer/count", c10::IValue(count));
    save_cpu_rng(before, "rng/cpu");
    const auto bytes = archive_bytes_string(before);
    const auto position = t.position_;
    const auto resume = t.resume_;
    const int starting_epoch = t.options_.starting_epoch();
    try {
      load();
    } catch (...) {
      torch::serialize::InputArchive back, saved_model;
      back.load_from(bytes.data(), bytes.size());
      read_archive(back, "model", saved_model);
      load_module(saved_model, *t.model_module());
      load_optimizers(t, back);
      load_cpu_rng(back, "rng/cpu");
      t.position_ = position, t.resume_ = resume, t.options_.starting_epoch(starting_epoch);
      throw;
    }
  }
};

}  // namespace tp::detail
