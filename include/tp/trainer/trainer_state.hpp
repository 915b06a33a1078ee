#pragma once
// What a checkpoint holds of a trainer, and how it is saved and loaded (Lightning's checkpoint
// connector): everything a resumed run needs to go on exactly as an uninterrupted one, as one
// tp::state_tree (checkpoint/state_tree.hpp), which a checkpoint file holds as torch.save writes it, so
// that Python's torch.load returns it as plain values:
//
//   state_dict              the main tower's parameters and buffers, by name (conv1.weight); in
//                           a parameter-sharded run, but the units' parameters: each process's
//                           part holds its rows of them (checkpoint/detail/parameter_pieces.hpp)
//   optimizer_states        every optimizer, in torch.optim's state_dict format when it has a
//                           Python twin, else {"libtorch": its LibTorch entries} (optim/optimizer_state.hpp);
//                           in a sharded run its param groups only: each process's part holds
//                           its shard of the per-parameter state (save_part, optim/optimizer_pieces.hpp)
//   epoch, global_step      where the loop was (Lightning's names)
//   loop                    steps_done, epoch_closed: the step in the epoch (trainer/loop_position.hpp)
//   loss_scaler             scale, growth_tracker: when the tower has one
//   rng                     cpu, cuda: the random generators (checkpoint/detail/generator_state.hpp)
//   input                   flow, consumed, datapoints, world_size, batch: the input's position in
//                           its dataflow and in the pass's global order (resumable inputs)
//   callbacks               each stateful callback's state, by its key (trainer/callback_set.hpp)
//   tp                      format (4), sharded_parameters (name -> shape and place in the
//                           state_dict of each parameter the parts hold), optimizer_parts (a sharded run's: how many parts hold
//                           the optimizer's per-parameter state) and layout: processes, batches each takes per step (towers x
//                           micro-batches, also recorded apart), datapoints per batch and
//                           precision: a run resumed on another layout says what changed, and its
//                           input goes on at the same place in the pass's global order
//                           (data/pass_position.hpp), or refuses, saying why
//
// A state that does not fit throws checkpoint_error, and leaves the model, the optimizers and
// the loop as they were (all_or_nothing). Multi-tower policies bring the other towers back to
// the main one when training starts.
#include <algorithm>
#include <concepts>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Dict.h>
#include <ATen/core/List.h>

#include <tp/checkpoint/checkpoint_error.hpp>
#include <tp/concepts/distribution.hpp>
#include <tp/concepts/input.hpp>
#include <tp/data/state.hpp>
#include <tp/checkpoint/detail/generator_state.hpp>
#include <tp/loss_scaler.hpp>
#include <tp/optim/any_optimizer.hpp>
#include <tp/optim/optimizer_pieces.hpp>
#include <tp/optim/optimizer_state.hpp>
#include <tp/precision.hpp>
#include <tp/checkpoint/detail/parameter_pieces.hpp>
#include <tp/checkpoint/state_dict.hpp>
#include <tp/checkpoint/state_parts.hpp>
#include <tp/checkpoint/state_tree.hpp>
#include <tp/trainer/loop_position.hpp>
#include <tp/trainer/step_layout.hpp>

namespace tp::detail {

inline constexpr std::int64_t checkpoint_format = 4;  // the tree above

// A friend of the trainer: it reads and writes the trainer's parts.
template <class Trainer>
struct trainer_state {
  static state_tree save(Trainer& t) {
    state_tree all;
    auto weights = state_dict_of(*t.model_module());
    // A parameter-sharded run's units' parameters are in the parts; here their shapes and places.
    auto sharded_parameters = state_tree::new_dict();
    if (const auto shapes = sharded_parameters_of(t); !shapes.empty()) {
      std::int64_t at = 0;
      for (const auto& entry : weights) {
        if (const auto shape = shapes.find(entry.key()); shape != shapes.end()) {
          state_tree one;
          one.put("shape", shape->value());
          one.put("at", at);
          sharded_parameters.insert(entry.key(), one.dict());
        }
        ++at;
      }
      for (const auto& entry : sharded_parameters) (void)weights.erase(entry.key());
    }
    all.put("state_dict", weights);
    c10::impl::GenericList optimizers(c10::AnyType::get());
    if (in_parts(t)) {
      if constexpr (sharded) optimizers.push_back(t.replicas_.optimizer_options(t.tower_));
    } else {
      for_each_kept_optimizer(t, [&](auto& optimizer) { optimizers.push_back(optim::state_of(optimizer)); });
    }
    all.put("optimizer_states", optimizers);
    t.position_.save(all);
    if (const auto* scaler = loss_scaler_of(t.tower_)) {
      auto one = all.child("loss_scaler");
      scaler->save(one);
    }
    auto rng = all.child("rng");
    save_generators(rng);
    if constexpr (resumable_input<typename Trainer::input_type>) {
      const auto where = t.input_.position();
      auto input = all.child("input");
      c10::impl::GenericList flow(c10::AnyType::get());
      for (const auto passes : where.flow) flow.push_back(static_cast<std::int64_t>(passes));
      input.put("flow", flow);
      input.put("consumed", where.consumed);
      input.put("datapoints", where.datapoints);
      input.put("world_size", std::int64_t{where.world_size});
      input.put("batch", where.batch);
    }
    auto callbacks = all.child("callbacks");
    t.callbacks_.save_state(t, callbacks);
    auto own = all.child("tp");
    own.put("format", checkpoint_format);
    if (in_parts(t)) own.put("optimizer_parts", std::int64_t{t.process_count()});
    if (!sharded_parameters.empty()) own.put("sharded_parameters", sharded_parameters);
    own.put("layout", layout_of(t).to_dict(towers(t)));
    return all;
  }

  // A sharded run's part on this process: {"pieces": its shard of the optimizer state}, and
  // with sharded parameters {"parameters": its rows of them} (checkpoint/detail/parameter_pieces.hpp).
  // Every process makes its part, before the chief's save().
  static state_tree save_part(Trainer& t) {
    state_tree part;
    if constexpr (sharded) {
      if (t.state_is_sharded()) {
        part.put("pieces", t.replicas_.optimizer_part());
        if constexpr (gathers_parameters<typename Trainer::replicas_type>)
          if (t.replicas_.parameters_are_sharded()) part.put("parameters", t.replicas_.parameter_rows());
        return part;
      }
    }
    throw std::logic_error("tp::Trainer::state_part: this run's optimizer state is not sharded; its state_dict() holds it whole");
  }
  // The pieces process `rank`'s part holds.
  static std::vector<state_piece> part_pieces(const Trainer& t, int rank) {
    if constexpr (sharded) return t.replicas_.optimizer_part_pieces(rank);
    else return {};
  }

  // What save() gave, from this process or a file (read by detail::read_torch_save, then
  // to_ivalue); `source` names it in errors.
  // A sharded run's checkpoint also takes `parts`: where its processes' parts are.
  static void load(Trainer& t, const c10::IValue& saved, const std::string& source, const state_parts* parts) {
    const state_tree all(saved, "");
    if (!all.contains("tp") || !all.value("tp").isGenericDict())
      throw checkpoint_error(source + " has no tp section: it is not a tp checkpoint; to start from a state_dict, use "
                                      "tp::load_state_dict(model, path)");
    const auto own = all.at("tp");
    if (own.integer("format") != checkpoint_format)
      throw checkpoint_error(source + " has format " + std::to_string(own.integer("format")) + "; this tp reads format " +
                             std::to_string(checkpoint_format));
    note_layout(t, own, source);
    const auto optimizers = all.items("optimizer_states");
    const bool saved_in_parts = own.contains("optimizer_parts");
    if (saved_in_parts && !parts)
      throw checkpoint_error(source + " is a sharded run's: its optimizer state is in the parts its processes wrote beside it; load it "
                                      "with tp::load_checkpoint, which reads them, or make it one file with tp-export --whole");
    if (saved_in_parts && optimizers.size() != 1)
      throw checkpoint_error(source + " is a sharded run's but holds " + std::to_string(optimizers.size()) + " optimizers' options, not 1");
    // A parameter-sharded run's parameters are in its parts: joined whole, as any layout loads them.
    if (own.contains("sharded_parameters") && !parts)
      throw checkpoint_error(source + " is a parameter-sharded run's: its parameters are in the parts its processes wrote beside it; "
                                      "load it with tp::load_checkpoint, which reads them, or make it one file with tp-export --whole");
    const auto weights = own.contains("sharded_parameters") ? c10::IValue(join_parameters(all.value("state_dict"), own.at("sharded_parameters"), *parts, source))
                                                            : all.value("state_dict");
    refuse_non_finite(weights, source);
    all_or_nothing(t, [&] {
      const auto take_rows = load_weights(t, weights, source);
      if (saved_in_parts) {
        load_from_parts(t, optimizers[0], *parts, source);
        load_rest(t, all);
        take_rows();
        return;
      }
      std::size_t count = 0;
      load_kept_optimizers(t, [&](auto& optimizer, std::int64_t at) {
        const auto index = static_cast<std::size_t>(at);
        ++count;
        if (index >= optimizers.size())
          throw checkpoint_error("the checkpoint holds " + std::to_string(optimizers.size()) + " optimizers but this trainer has more");
        optim::load_state(optimizer, optimizers[index], "the checkpoint's optimizer_states/" + std::to_string(index));
      });
      if (!optimizers_are_copies && count != optimizers.size())
        throw checkpoint_error("the checkpoint holds " + std::to_string(optimizers.size()) + " optimizers but this trainer has " +
                               std::to_string(count));
      load_rest(t, all);
      take_rows();
    });
  }

 private:
  // A diverged run's checkpoint (a NaN or an infinity in a weight) would resume into a run
  // that trains on NaN to the end and exits as if well: refused, naming the weight.
  static void refuse_non_finite(const c10::IValue& weights, const std::string& source) {
    if (!weights.isGenericDict()) return;
    for (const auto& entry : weights.toGenericDict()) {
      if (!entry.value().isTensor()) continue;
      const auto& w = entry.value().toTensor();
      if (w.is_floating_point() && w.numel() > 0 && !w.isfinite().all().item<bool>())
        throw checkpoint_error(source + " holds NaN or infinite values in '" + (entry.key().isString() ? entry.key().toStringRef() : "?") +
                               "': the run that wrote it had diverged. Move it (and any later checkpoint) out of the folder to resume "
                               "from the one before, or start afresh");
    }
  }

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
  static void note_layout(Trainer& t, const state_tree& own, const std::string& source) {
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

  // The parts beside the model and optimizers.
  static void load_rest(Trainer& t, const state_tree& all) {
    const auto saved = loop_position::read(all);
    // A checkpoint of a run without loss scaling leaves the scaler at its initial scale.
    if (auto* scaler = loss_scaler_of(t.tower_); scaler && all.contains("loss_scaler")) scaler->load(all.at("loss_scaler"));
    load_generators(all.at("rng"));
    if constexpr (resumable_input<typename Trainer::input_type>) {
      const auto input = all.at("input");
      data::position where;
      for (auto v : input.integers("flow")) where.flow.push_back(static_cast<std::uint64_t>(v));
      where.consumed = input.integer("consumed");
      where.datapoints = input.integer("datapoints");
      where.world_size = static_cast<int>(input.integer("world_size"));
      where.batch = input.integer("batch");
      if (where.consumed < 0 || where.datapoints < 0 || where.world_size < 1 || where.batch < 0)
        throw checkpoint_error("the checkpoint's input position (consumed " + std::to_string(where.consumed) + ", datapoints " +
                               std::to_string(where.datapoints) + ", world_size " + std::to_string(where.world_size) + ", batch " +
                               std::to_string(where.batch) + ") is not one a run can reach");
      try {
        t.input_.restore(where);
      } catch (const std::invalid_argument& e) {
        throw checkpoint_error("the input cannot go on where the checkpoint's run stopped" +
                               (t.layout_change_.empty() ? std::string() : " (" + t.layout_change_ + ")") + ": " + e.what() +
                               ". Resume on the layout that wrote it, or start afresh in another log folder from its weights "
                               "(tp-export --state-dict, then tp::load_state_dict)");
      }
    }
    t.callbacks_.load_state(t, all.at("callbacks"));
    t.position_.global_step = saved.global_step;
    t.resume_ = saved.resumes_at();
    t.options_.starting_epoch(t.resume_.epoch);
  }

  // Loads the model's weights. In a parameter-sharded run the units' parameters are each
  // process's rows, which it takes from the whole tensors without a collective (processes load
  // at different moments: the chief first, to choose the checkpoint). That comes last, from what
  // this returns: all_or_nothing cannot give rows back, and with the shapes checked here it
  // cannot fail.
  static std::function<void()> load_weights(Trainer& t, const c10::IValue& weights, const std::string& source) {
    const auto sharded = sharded_parameters_of(t);
    if (sharded.empty() || !weights.isGenericDict()) {
      load_state_dict(*t.model_module(), weights, StateDictOptions(), source);
      return [] {};
    }
    const auto whole = weights.toGenericDict();
    auto rest = whole.copy();
    const state_tree shapes(sharded, "");
    std::vector<std::string> missing, differ;
    for (const auto& name : shapes.keys()) {
      const auto found = whole.find(name);
      if (found == whole.end()) missing.push_back(name);
      else if (!found->value().isTensor() || found->value().toTensor().sizes().vec() != shapes.integers(name))
        differ.push_back(name + " is " + state_tree::describe(found->value()) + " in the file but " + c10::str(c10::IntArrayRef(shapes.integers(name))) + " here");
      (void)rest.erase(name);
    }
    auto report = load_state_dict(*t.model_module(), rest, StateDictOptions().strict(false), source);
    std::erase_if(report.missing_keys, [&](const std::string& name) { return sharded.contains(name); });
    const auto listed = [](const std::string& what, const std::vector<std::string>& names) {
      std::string text;
      for (std::size_t i = 0; i < names.size() && i < 8; ++i) text += (i ? ", " : " " + what + ": ") + names[i];
      if (names.size() > 8) text += " and " + std::to_string(names.size() - 8) + " more";
      return names.empty() ? text : text + ";";
    };
    missing.insert(missing.end(), report.missing_keys.begin(), report.missing_keys.end());
    const auto problems = listed("shapes that differ", differ) + listed("missing keys", missing) + listed("unexpected keys", report.unexpected_keys);
    if (!problems.empty())
      throw checkpoint_error(source + " does not fit this model:" + problems +
                             " build the module as the one that saved it (its names are LibTorch's register_module names)");
    if constexpr (gathers_parameters<typename Trainer::replicas_type>) return [&t, whole] { t.replicas_.load_sharded_parameters(whole); };
    else return [] {};
  }

  // The parameters this run's processes hold in rows (name -> shape): its parts hold them.
  static c10::impl::GenericDict sharded_parameters_of(const Trainer& t) {
    if constexpr (gathers_parameters<typename Trainer::replicas_type>) return t.replicas_.sharded_parameters();
    else return state_tree::new_dict();
  }

  // Whether this run's checkpoints hold the optimizer state in parts.
  static bool in_parts(const Trainer& t) { return t.state_is_sharded(); }

  // Loads a sharded checkpoint's optimizer: its options, then the per-parameter state from the
  // parts that hold this run's pieces (a sharded run's own shard, else every parameter whole).
  static void load_from_parts(Trainer& t, const c10::IValue& options, const state_parts& parts, const std::string& source) {
    auto unsharded = [&](auto& optimizer) {
      const auto* base = torch_optimizer_of(optimizer);
      if (!base)
        throw checkpoint_error(source + " is a sharded run's, whose parts only an optimizer of LibTorch's kind (torch::optim::Optimizer) can load");
      optim::load_state(optimizer, options, source + "/optimizer_states/0");
      auto [pieces, shapes] = optim::whole_pieces(*base);
      optim::load_joined(optimizer, std::move(pieces), std::move(shapes), parts, source);
    };
    if constexpr (sharded) {
      t.replicas_.load_checkpoint_parts(t.tower_, options, parts, source, unsharded);
    } else {
      t.replicas_.for_each_optimizer(unsharded);
    }
  }

  // The optimizers a checkpoint holds: every one, except where each tower's optimizer is a copy
  // of the main tower's (Replicated: the same averaged gradients on the same weights). There it
  // holds the main one, and loading gives it to every tower: one state serves any number of them.
  // (A sharded run's are in parts: in_parts.)
  static constexpr bool optimizers_are_copies = requires { Trainer::replicas_type::optimizer_per_tower; };
  static constexpr bool sharded = shards_state<typename Trainer::replicas_type, typename Trainer::tower_type>;
  template <class F>
  static void for_each_kept_optimizer(Trainer& t, F&& f) {
    bool first = true;
    t.replicas_.for_each_optimizer([&](auto& optimizer) {
      if (!optimizers_are_copies || std::exchange(first, false)) f(optimizer);
    });
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
  // CPU generator as they were (copied here first), so that a checkpoint that does not fit never
  // leaves a half-loaded model or optimizer. (Callbacks are not copied here: their state may not
  // exist before training, and their set is checked whole before any of it is loaded. The
  // optimizers are this process's own, as they step: in a sharded run, its shards.)
  template <class Load>
  static void all_or_nothing(Trainer& t, Load&& load) {
    const auto model = state_tree::deep_copy(state_dict_of(*t.model_module()));
    std::vector<c10::IValue> optimizers;
    t.replicas_.for_each_optimizer([&](auto& optimizer) { optimizers.push_back(state_tree::deep_copy(optim::state_of(optimizer))); });
    state_tree rng;
    save_generators(rng);
    const auto position = t.position_;
    const auto resume = t.resume_;
    const int starting_epoch = t.options_.starting_epoch();
    try {
      load();
    } catch (...) {
      load_state_dict(*t.model_module(), model, StateDictOptions(), "the model as it was");
      std::size_t i = 0;
      t.replicas_.for_each_optimizer([&](auto& optimizer) { optim::load_state(optimizer, optimizers[i++], "the optimizer as it was"); });
      load_cpu_generator(rng);
      t.position_ = position, t.resume_ = resume, t.options_.starting_epoch(starting_epoch);
      throw;
    }
  }
};

}  // namespace tp::detail
