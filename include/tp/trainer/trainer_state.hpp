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
//   tp/layout               processes, batches each takes per step (towers x micro-batches, also
//                           recorded apart), datapoints per batch and precision: a run resumed on another layout says what
//                           changed, and its input goes on at the same place in the pass's
//                           global order (data/pass_position.hpp), or refuses, saying why
//
// In memory (save, load: Trainer::save_state) it is one LibTorch archive:
//
//   tp/format               2
//   loop/*                  the loop's position (trainer/loop_position.hpp)
//   model                   the main tower's parameters and buffers, by name
//   optimizer/N, .../count  every optimizer, with its hyperparameters
//   loss_scaler             the loss scaler, when the tower has one
//   rng/cpu, rng/cuda       the random generators
//   input/flow, /consumed,  the input's position in its dataflow (resumable inputs), and in the
//   input/global            pass's global order: datapoints, world size, batch
//   callback/KEY#N, /keys   the callbacks' state, by name (trainer/callback_set.hpp)
//
// A state that does not fit throws checkpoint_error, and leaves the model, the optimizers and
// the loop as they were (all_or_nothing). Multi-tower policies bring the other towers back to the main one when
// training starts.
#include <concepts>
#include <cstdint>
#include <string>
#include <utility>
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
#include <tp/precision.hpp>
#include <tp/optim/any_optimizer.hpp>
#include <tp/optim/torch_optim_state.hpp>
#include <tp/state_dict.hpp>
#include <tp/trainer/loop_position.hpp>
#include <tp/trainer/step_layout.hpp>

namespace tp::detail {

inline constexpr std::int64_t trainer_state_format = 2;  // the whole state in one LibTorch archive
inline constexpr std::int64_t dict_state_format = 3;     // a checkpoint file's dictionary

// A friend of the trainer: it reads and writes the trainer's parts.
template <class Trainer>
struct trainer_state {
  static void save(Trainer& t, torch::serialize::OutputArchive& archive) {
    archive.write("tp/format", c10::IValue(trainer_state_format));
    save_model_and_optimizers(t, archive);
    save_rest(t, archive);
  }

  static c10::impl::GenericDict to_dict(Trainer& t) {
    auto all = optim::detail::new_dict();
    all.insert("state_dict", state_dict_of(*t.model_module()));
    c10::impl::GenericList optimizers(c10::AnyType::get());
    for_each_kept_optimizer(t, [&](auto& optimizer) {
      const torch::optim::Optimizer* base = torch_optimizer_of(optimizer);
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
    own.insert("layout", layout_of(t).to_dict(towers(t)));
    all.insert("tp", own);
    return all;
  }

  static void load(Trainer& t, torch::serialize::InputArchive& archive) {
    t.layout_change_.clear();  // an archive in memory records no layout: it goes on as its own
    all_or_nothing(t, [&] {
      const auto format = read_int(archive, "tp/format");
      if (format != trainer_state_format)
        throw checkpoint_error("the checkpoint has format " + std::to_string(format) + "; this tp reads format " +
                               std::to_string(trainer_state_format) + " here (format " + std::to_string(dict_state_format) +
                               " is a checkpoint file's: read it with tp::load_checkpoint)");
      load_model_and_optimizers(t, archive);
      load_rest(t, archive);
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
    note_layout(t, *own, source);
    torch::serialize::InputArchive rest;
    const auto bytes = state->tensor().contiguous();
    rest.load_from(static_cast<const char*>(bytes.data_ptr()), static_cast<std::size_t>(bytes.numel()));
    const auto* optimizers = saved.find("optimizer_states");
    if (!optimizers || optimizers->type() != py_value::kind::list) throw checkpoint_error(source + " has no list optimizer_states");
    all_or_nothing(t, [&] {
      load_state_dict(*t.model_module(), saved, StateDictOptions(), source);
      std::size_t count = 0;
      load_kept_optimizers(t, [&](auto& optimizer, std::int64_t at) {
        const auto index = static_cast<std::size_t>(at);
        ++count;
        if (index >= optimizers->items().size())
          throw checkpoint_error("the checkpoint holds " + std::to_string(optimizers->items().size()) + " optimizers but this trainer has more");
        const auto& one = optimizers->items()[index];
        const auto* own_archive = one.is_dict() ? one.find("libtorch_archive") : nullptr;
        if (own_archive && own_archive->type() == py_value::kind::tensor) {
          torch::serialize::InputArchive archive;
          const auto archive_data = own_archive->tensor().contiguous();
          archive.load_from(static_cast<const char*>(archive_data.data_ptr()), static_cast<std::size_t>(archive_data.numel()));
          load_one_optimizer(optimizer, archive, at);
        } else if (torch::optim::Optimizer* base = torch_optimizer_of(optimizer)) {
          optim::load_torch_optim_state(*base, one, "optimizer " + std::to_string(index));
        } else {
          throw checkpoint_error("the checkpoint's optimizer " + std::to_string(index) +
                                 " is in torch.optim's format, which this trainer's optimizer type cannot take");
        }
      });
      if (!optimizers_are_copies && count != optimizers->items().size())
        throw checkpoint_error("the checkpoint holds " + std::to_string(optimizers->items().size()) + " optimizers but this trainer has " +
                               std::to_string(count));
      load_rest(t, rest);
    });
  }

 private:
  // Batches one process takes per step (towers times micro-batches), 1 when the policy cannot say.
  static std::int64_t batches_per_step(const Trainer& t) {
    if constexpr (counts_batches<typename Trainer::replicas_type>) return t.replicas_.batches_per_step();
    else return 1;
  }

  // Towers in one process (1 when the policy has none to count).
  static int towers(const Trainer& t) {
    if constexpr (requires { { t.replicas_.towers() } -> std::convertible_to<int>; }) return t.replicas_.towers();
    else return 1;
  }

  // This run's layout (trainer/step_layout.hpp).
  static step_layout layout_of(Trainer& t) {
    step_layout here{t.process_count(), batches_per_step(t), 0, {}};
    if constexpr (resumable_input<typename Trainer::input_type>) here.batch = t.input_.position().batch;
    if constexpr (requires { { t.tower_.precision() } -> std::same_as<tp::precision>; }) here.precision = precision_name(t.tower_.precision());
    return here;
  }

  // The checkpoint's layout beside this run's: the line ModelSaver prints when they differ
  // (t.layout_change_). Whether the input can go on at the same place in the pass's global
  // order on this layout, its restore() decides (data/pass_position.hpp), in load_rest. A run
  // with its own step is refused on another layout: what its step takes per step, and what it
  // keeps, the trainer cannot see.
  static void note_layout(Trainer& t, const py_value& own, const std::string& source) {
    t.layout_change_.clear();
    const auto saved = step_layout::read(own, source);
    const auto here = layout_of(t);
    t.layout_change_ = layout_change(saved, here);
    if (t.user_step_ && !saved.same_batches(here))
      throw checkpoint_error(source + " cannot go on here (" + t.layout_change_ + "): this run trains with its own step, which takes its "
                             "batches and keeps its state where the trainer cannot see them, so the trainer cannot carry them to another "
                             "layout. Resume on the layout that wrote it, or start afresh in another log folder from its weights "
                             "(tp-export --state-dict, then tp::load_state_dict)");
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
      archive.write("input/global", c10::IValue(std::vector<std::int64_t>{where.datapoints, where.world_size, where.batch}));
    }
    t.callbacks_.save_state(t, archive);
  }

  static void load_rest(Trainer& t, torch::serialize::InputArchive& archive) {
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
      const auto global = read_ints(archive, "input/global");
      if (global.size() != 3) throw checkpoint_error("the checkpoint's input/global holds " + std::to_string(global.size()) + " numbers, not 3");
      where.datapoints = global[0], where.world_size = static_cast<int>(global[1]), where.batch = global[2];
      try {
        t.input_.restore(where);
      } catch (const std::invalid_argument& e) {
        throw checkpoint_error("the input cannot go on where the checkpoint's run stopped" +
                               (t.layout_change_.empty() ? std::string() : " (" + t.layout_change_ + ")") + ": " + e.what() +
                               ". Resume on the layout that wrote it, or start afresh in another log folder from its weights "
                               "(tp-export --state-dict, then tp::load_state_dict)");
      }
    }
    t.callbacks_.load_state(t, archive);
    t.position_.global_step = saved.global_step;
    t.resume_ = saved.resumes_at();
    t.options_.starting_epoch(t.resume_.epoch);
  }

  // The main model under "model", and the kept optimizers under "optimizer/N" and
  // "optimizer/count": an archive's state, and what all_or_nothing sets aside.
  // (whole false: the optimizers as this process steps them, which differ from the kept ones
  // in a sharded run: all_or_nothing's copy.)
  static void save_model_and_optimizers(Trainer& t, torch::serialize::OutputArchive& archive, bool whole = true) {
    torch::serialize::OutputArchive model;
    save_module(model, *t.model_module());
    archive.write("model", model);
    std::int64_t count = 0;
    auto save = [&](auto& optimizer) {
      torch::serialize::OutputArchive one;
      optimizer.save(one);
      archive.write("optimizer/" + std::to_string(count++), one);
    };
    if (whole) for_each_kept_optimizer(t, save);
    else t.replicas_.for_each_optimizer(save);
    archive.write("optimizer/count", c10::IValue(count));
  }
  static void load_model_and_optimizers(Trainer& t, torch::serialize::InputArchive& archive, bool whole = true) {
    torch::serialize::InputArchive model;
    read_archive(archive, "model", model);
    load_module(model, *t.model_module());
    load_optimizers(t, archive, whole);
  }

  static void load_optimizers(Trainer& t, torch::serialize::InputArchive& archive, bool whole = true) {
    std::int64_t count = 0;  // optimizers loaded
    const auto saved_count = read_int(archive, "optimizer/count");
    auto load = [&](auto& optimizer, std::int64_t index) {
      ++count;
      if (index >= saved_count)
        throw checkpoint_error("the checkpoint holds " + std::to_string(saved_count) + " optimizers but this trainer has more");
      torch::serialize::InputArchive one;
      read_archive(archive, "optimizer/" + std::to_string(index), one);
      load_one_optimizer(optimizer, one, index);
    };
    if (whole) {
      load_kept_optimizers(t, load);
    } else {  // this process's own optimizers, as they step (all_or_nothing's copy)
      std::int64_t next = 0;
      t.replicas_.for_each_optimizer([&](auto& optimizer) { load(optimizer, optimizers_are_copies ? 0 : next++); });
    }
    if (!optimizers_are_copies && count != saved_count)
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

  // The optimizers a checkpoint holds: every one, except where each tower's optimizer is a copy
  // of the main tower's (Replicated: the same averaged gradients on the same weights). There it
  // holds the main one, and loading gives it to every tower: one state serves any number of them.
  // A sharded run's is the whole optimizer its ranks' shards make (consolidated on rank 0).
  static constexpr bool optimizers_are_copies = requires { Trainer::replicas_type::optimizer_per_tower; };
  static constexpr bool sharded = shards_state<typename Trainer::replicas_type, typename Trainer::tower_type>;
  template <class F>
  static void for_each_kept_optimizer(Trainer& t, F&& f) {
    if constexpr (sharded) {
      t.replicas_.for_each_checkpoint_optimizer(f);
    } else {
      bool first = true;
      t.replicas_.for_each_optimizer([&](auto& optimizer) {
        if (!optimizers_are_copies || std::exchange(first, false)) f(optimizer);
      });
    }
  }
  // Loads the kept optimizers: load(optimizer, index) reads the index-th into one.
  template <class Load>
  static void load_kept_optimizers(Trainer& t, Load&& load) {
    if constexpr (sharded) {
      t.replicas_.load_checkpoint_optimizer(t.tower_, [&](auto& whole) { load(whole, std::int64_t{0}); });
    } else {
      std::int64_t count = 0;
      t.replicas_.for_each_optimizer([&](auto& optimizer) { load(optimizer, optimizers_are_copies ? std::int64_t{0} : count++); });
    }
  }


  // Runs load(); if it throws, the trainer gets back its model, optimizers, loop position and
  // CPU generator as they were (saved here first), so that a checkpoint that does not fit never
  // leaves a half-loaded model or optimizer. (Callbacks are not saved here: their state may not
  // exist before training, and their set is checked whole before any of it is loaded.)
  template <class Load>
  static void all_or_nothing(Trainer& t, Load&& load) {
    torch::serialize::OutputArchive before;
    save_model_and_optimizers(t, before, /*whole=*/false);
    save_cpu_rng(before, "rng/cpu");
    const auto bytes = archive_bytes_string(before);
    const auto position = t.position_;
    const auto resume = t.resume_;
    const int starting_epoch = t.options_.starting_epoch();
    try {
      load();
    } catch (...) {
      torch::serialize::InputArchive back;
      back.load_from(bytes.data(), bytes.size());
      load_model_and_optimizers(t, back, /*whole=*/false);
      load_cpu_rng(back, "rng/cpu");
      t.position_ = position, t.resume_ = resume, t.options_.starting_epoch(starting_epoch);
      throw;
    }
  }
};

}  // namespace tp::detail
