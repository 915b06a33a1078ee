#pragma once
// tp::Trainer<InputPolicy, TowerPolicy, DistributionPolicy, Callbacks...>: the composed loop.
//
//   for epoch_num in [starting_epoch, max_epoch]
//     before_epoch
//     for local_step in [0, steps_per_epoch)
//       before_step; step(); ++global_step; after_step
//     after_epoch
//
// This file is the loop and the accessors users call. Its rooms (trainer/*.hpp) and the loop's
// contracts (event order, the before/after_train pairing, stop requests, counters, resume) are
// described in docs/DESIGN.md.
#include <cstddef>
#include <cstdint>
#include <exception>
#include <iostream>
#include <stdexcept>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <ATen/Parallel.h>
#include <torch/types.h>

#include <tp/concepts/callback.hpp>
#include <tp/concepts/distribution.hpp>
#include <tp/concepts/input.hpp>
#include <tp/concepts/scalar.hpp>
#include <tp/concepts/step.hpp>
#include <tp/concepts/tower.hpp>
#include <tp/trainer/detail/broken_part.hpp>
#include <tp/monitors/detail/image.hpp>
#include <tp/process/freed_memory.hpp>
#include <tp/process/intra_op_threads.hpp>
#include <tp/trainer/detail/signals.hpp>
#include <tp/model_summary.hpp>
#include <tp/stop_training.hpp>
#include <tp/train_options.hpp>
#include <tp/train_outcome.hpp>
#include <tp/trainer/callback_set.hpp>
#include <tp/trainer/loop_position.hpp>
#include <tp/trainer/stop_arbiter.hpp>
#include <tp/trainer/trainer_state.hpp>

// A training loop composed at compile time (tp::Trainer) from an input, a tower and a distribution
// policy and callbacks, and the parts those are made of. tp::data holds the dataflows, tp::optim
// the optimizers, tp::backend the multi-process backends.
namespace tp {

template <class InputPolicy, class TowerPolicy, class DistributionPolicy, class... Callbacks>
class Trainer {
  // Checked once, when the class is instantiated (the member types below use them).
  static constexpr bool input_ok = detail::check_input<InputPolicy>();
  static constexpr bool tower_ok = detail::check_tower_policy<TowerPolicy>();
  static constexpr bool distribution_ok = detail::check_distribution<DistributionPolicy, TowerPolicy>();

 public:
  using input_type = InputPolicy;                // the input policy: where batches come from
  using tower_type = TowerPolicy;                // the tower policy: the model, its cost and optimizer
  using distribution_type = DistributionPolicy;  // the distribution policy: devices, processes, the update
  // What the distribution policy built for the tower policy: the towers' models and optimizers.
  using replicas_type = typename std::conditional_t<tower_ok && distribution_ok, detail::replicas_of<DistributionPolicy, TowerPolicy>,
                                                    std::type_identity<detail::broken_part>>::type;

  // Takes the parts and checks the options (std::invalid_argument naming the option); builds
  // the towers. Training starts with train().
  Trainer(InputPolicy input, TowerPolicy tower, DistributionPolicy distribution, TrainOptions options, Callbacks... callbacks)
      : input_(std::move(input)),
        tower_(std::move(tower)),
        distribution_(std::move(distribution)),
        options_((options.validate(), std::move(options))),
        replicas_(build_replicas()),
        callbacks_(std::move(callbacks)...) {
    // A callback that breaks a rule gets none of its hooks called: nothing else fails.
    [[maybe_unused]] constexpr bool callbacks_ok = (detail::check_callback<Callbacks, Trainer>() && ...);
    if constexpr (input_ok && tower_ok && distribution_ok)
      if (options_.steps_per_epoch() == 0) options_.steps_per_epoch(detail::steps_in_one_pass(input_, replicas_));
    // A tower in channels-last order gets its batches so from the input, made on its thread.
    if constexpr (requires { tower_.channels_last(); } && channels_last_input<InputPolicy>)
      if (tower_.channels_last()) input_.channels_last(true);
  }

  Trainer(const Trainer&) = delete;  // callbacks may hold on to the trainer
  Trainer& operator=(const Trainer&) = delete;

  // Trains with the distribution policy's default step.
  train_outcome train() {
    if constexpr (detail::check_default_step<DistributionPolicy, TowerPolicy, InputPolicy>())
      return loop(
          [](Trainer& t) {
            if constexpr (requires { t.replicas_.at_step(std::int64_t{}); }) t.replicas_.at_step(t.position_.global_step);
            return t.replicas_.run_step(t.tower_, t.input_);
          },
          /*user_step=*/false);
    else return {};
  }

  // Trains with a step of the user's: step(trainer) runs one step and returns the cost (a
  // tensor, shown by the progress bar) or nothing. Every callback works as with the default.
  template <class Step>
  train_outcome train(Step step) {
    return loop(std::move(step), /*user_step=*/true);
  }

 private:
  template <class Step>
  train_outcome loop(Step step, bool user_step) {
    user_step_ = user_step;  // a checkpoint loaded from here on (before_train) knows it
    constexpr auto returns = detail::check_step<Step, Trainer>();
    using boundary = detail::stop_arbiter::boundary;
    using detail::receivers;
    outcome_ = {};
    callbacks_.forget_started();
    stop_.start(options_);
    // Stop signals only set a flag from here until train() returns, when the previous handlers
    // are back; the loop reads the flag at its boundaries (should_stop).
    const detail::signal_scope signals(options_.stop_signals());
    if (const auto threads = detail::choose_intra_op_threads(options_.intra_op_threads()); threads.threads > 0)
      at::set_num_threads(threads.threads);
    detail::keep_freed_memory(options_.keep_freed_memory());
    callbacks_.setup(*this);
    const std::int64_t first_step = std::exchange(resume_.step, 0);
    position_.begin_run(options_.starting_epoch(), first_step);
    looping_ = true;
    struct not_looping {
      bool& flag;
      ~not_looping() { flag = false; }
    } end_of_loop{looping_};
    try {
      if constexpr (background_input<InputPolicy>) input_.start();
      print_model_summary();  // before start(): a parameter-sharded model is whole until then
      if constexpr (synced_at_start<replicas_type>) replicas_.start();  // towers brought to the main one
      callbacks_.before_train(*this);
      const std::int64_t steps = options_.steps_per_epoch();
      for (int epoch = options_.starting_epoch(); epoch <= options_.max_epoch() && !outcome_.interrupted(); ++epoch) {
        const std::int64_t first = epoch == options_.starting_epoch() ? first_step : 0;
        position_.begin_epoch(epoch, first);
        callbacks_.start_epoch_clock();
        callbacks_.template run<detail::before_epoch_tag>(*this);
        for (std::int64_t index = first; index < steps; ++index) {
          position_.local_step = index;  // after the loop it stays the index of the epoch's last step
          stop_.began();
          callbacks_.template run<detail::before_step_tag>(*this);
          if constexpr (returns == detail::step_returns::cost) last_cost_ = step(*this);
          else if constexpr (returns == detail::step_returns::nothing) step(*this);
          position_.finish_step();
          if (summary_pending_) print_optimizer_summary();
          callbacks_.template run<detail::after_step_tag, receivers::all_but_writers>(*this);
          stop_.work_done();
          callbacks_.template run<detail::after_step_tag, receivers::writers>(*this);
          stop_.writers_done(boundary::step);
          // Ahead: this epoch's end (after its last step), or the next step, which may close it.
          if (should_stop(/*epoch_end_ahead=*/index + 2 >= steps, /*at_epoch_end=*/false)) break;
        }
        if (outcome_.interrupted()) break;  // the epoch stays open: a resumed run finishes it
        if constexpr (epoch_end_work<replicas_type>) replicas_.end_epoch(epoch);
        position_.epoch_closed = true;
        stop_.began();
        callbacks_.template run<detail::after_epoch_tag, receivers::plain>(*this);
        callbacks_.template run<detail::after_epoch_tag, receivers::monitors>(*this);
        stop_.work_done();
        callbacks_.template run<detail::after_epoch_tag, receivers::writers>(*this);
        stop_.writers_done(boundary::epoch_end);
        callbacks_.report_epoch_times(*this, epoch);
        if (should_stop(/*epoch_end_ahead=*/steps == 1, /*at_epoch_end=*/true)) break;
      }
      if (outcome_.interrupted()) {
        callbacks_.template run<detail::on_interrupt_tag, receivers::all_but_writers>(*this);
        callbacks_.template run<detail::on_interrupt_tag, receivers::writers>(*this);
      }
    } catch (const stop_training&) {
      // A requested end, not a failure: fall through to after_train and return.
      outcome_.cause = end_cause::stop_requested;
    } catch (...) {
      stop_input();
      callbacks_.after_train(*this, std::current_exception());
      throw;
    }
    stop_input();
    outcome_.global_step = position_.global_step;
    callbacks_.after_train(*this, nullptr);
    return outcome_;
  }

 public:
  // --- loop state -------------------------------------------------------------------------
  int epoch_num() const noexcept { return position_.epoch_num; }  // the epoch under way, from 1 (the last one after training)
  std::int64_t local_step() const noexcept { return position_.local_step; }  // the step's index in its epoch, from 0
  std::int64_t global_step() const noexcept { return position_.global_step; }  // steps finished in the whole run (after_step counts its own)
  std::int64_t steps_per_epoch() const noexcept { return options_.steps_per_epoch(); }  // steps in an epoch (TrainOptions)
  int starting_epoch() const noexcept { return options_.starting_epoch(); }  // the first epoch's number (TrainOptions)
  int max_epoch() const noexcept { return options_.max_epoch(); }  // the last epoch's number (TrainOptions)
  const TrainOptions& options() const noexcept { return options_; }  // the options, as validated

  // Whether this process is the chief (rank 0): the one that runs chief-only callbacks.
  bool is_chief() const {
    if constexpr (multi_process_replicas<replicas_type>) return replicas_.is_chief();
    else return true;
  }

  // --- many processes ----------------------------------------------------------------------
  // How many processes train together (1 unless the distribution policy spans several).
  int process_count() const {
    if constexpr (multi_process_replicas<replicas_type>) return replicas_.world_size();
    else return 1;
  }
  // Sums values across the processes, in place (nothing to do with one). Every process must
  // call it at the same point: callbacks that are not chief-only may.
  void sum_across_processes(std::vector<double>& values) {
    if constexpr (multi_process_replicas<replicas_type>) replicas_.sum_across_processes(values);
  }
  // The mean of a value across the processes (a loss, an accuracy).
  double mean_across_processes(double value) {
    if (process_count() == 1) return value;
    std::vector<double> one{value};
    sum_across_processes(one);
    return one[0] / process_count();
  }

  // This process's rank among them (0: the chief).
  int process_rank() const {
    if constexpr (multi_process_replicas<replicas_type>) return replicas_.rank();
    else return 0;
  }
  // Whether each process holds only its shard of the optimizer state (MultiProcess with
  // .shard()): its checkpoints are then each process's part (state_part()) beside the chief's
  // state_dict(), which holds the rest.
  bool state_is_sharded() const {
    if constexpr (tower_ok && distribution_ok && shards_state<replicas_type, TowerPolicy>) return replicas_.state_is_sharded();
    else return false;
  }

  // Ends training after the current step and its epoch's after_epoch hooks.
  void request_stop() noexcept { stop_.request(); }
  bool stop_requested() const noexcept { return stop_.requested(); }  // whether a stop was requested (by a callback or a signal)
  // How training is ending, once the loop has decided (in on_interrupt and after_train hooks);
  // train() returns it.
  const train_outcome& outcome() const noexcept { return outcome_; }

  // The cost the last step returned (undefined before the first step, or if the step returns
  // nothing), detached from the autograd graph. It is detached here, on first read, rather
  // than in every step: a run whose callbacks never read it does not pay for it. Reading its
  // value with .item() waits for the device.
  const torch::Tensor& last_cost() const {
    if (last_cost_.defined() && last_cost_.requires_grad()) last_cost_ = last_cost_.detach();
    return last_cost_;
  }

  // --- values for the monitors ---------------------------------------------------------------
  // Whether a callback receives scalars (on_scalar): without one, putting a tensor costs nothing.
  static constexpr bool has_monitors() { return callbacks_type::template any_with<detail::on_scalar_tag>(); }

  // Sends a scalar to every monitor, tagged with the current global_step.
  void put_scalar(std::string_view name, double value) { callbacks_.template send<detail::on_scalar_tag>(*this, name, value); }
  // Same, from a one-element tensor; with no monitor it costs nothing (not even a device sync).
  void put_scalar(std::string_view name, const torch::Tensor& value) {
    if constexpr (has_monitors()) put_scalar(name, value.item<double>());
  }
  // Anything else breaks a rule, which this overload names (rather than "no matching function").
  template <class Value>
    requires(!scalar_value<Value>)
  void put_scalar(std::string_view, const Value&) {
    detail::check_scalar<Value>();
  }
  // Sends a tensor's values to the monitors that draw distributions (TensorBoard histograms).
  void put_histogram(std::string_view name, const torch::Tensor& values) {
    callbacks_.template send<detail::on_histogram_tag>(*this, name, values);
  }
  // Sends an image to the monitors that show images: [H, W] (grey), or [C, H, W] or [H, W, C]
  // with C = 1, 3 or 4 (grey, RGB, RGBA); uint8, or floating point in [0, 1] (clamped). Throws
  // std::invalid_argument for another shape or type, whether or not a monitor takes images.
  void put_image(std::string_view name, const torch::Tensor& image) {
    callbacks_.template send<detail::on_image_tag>(*this, name, detail::image_pixels(image, name));
  }
  // Sends a text (Markdown, as TensorBoard shows it) to the monitors that take texts.
  void put_text(std::string_view name, std::string_view text) { callbacks_.template send<detail::on_text_tag>(*this, name, text); }

  // --- state: what a checkpoint holds (trainer/trainer_state.hpp) ----------------------------
  // The trainer's whole state as one tree of plain values: the dictionary a checkpoint file
  // holds (Python's torch.load returns it). Its tensors are the trainer's own, not copies.
  // In a sharded run, the optimizer state's per-parameter part is not in it but in each
  // process's state_part(); loading it then takes `parts` (tp::load_checkpoint reads them).
  c10::impl::GenericDict state_dict() { return detail::trainer_state<Trainer>::save(*this).dict(); }
  // A sharded run's part of the state on this process: {"pieces": its shard of the optimizer
  // state, each piece a parameter's range with its state (optim/optimizer_pieces.hpp)}; with
  // sharded parameters also {"parameters": this process's rows of them}.
  c10::impl::GenericDict state_part() { return detail::trainer_state<Trainer>::save_part(*this).dict(); }
  // The pieces of the optimizer state that process `rank`'s part holds (what its part file lists).
  std::vector<state_piece> state_part_pieces(int rank) const { return detail::trainer_state<Trainer>::part_pieces(*this, rank); }
  // Loads what state_dict gave, here or in a file; the next train() goes on from there. Call it
  // before train(), or from a setup hook. A state that does not fit this trainer (another model,
  // optimizer or set of stateful callbacks) throws tp::checkpoint_error naming the part, and
  // leaves the model, optimizers and loop as they were; `source` names the state in errors.
  void load_state_dict(const c10::IValue& saved, const std::string& source = "the state", const state_parts* parts = nullptr) {
    if (looping_) throw std::logic_error("tp::Trainer::load_state_dict: called while training; call it before train() or from a setup hook");
    detail::trainer_state<Trainer>::load(*this, saved, source, parts);
  }
  // What the last checkpoint loaded changed of the layout (processes, batches per step, batch),
  // in one line; empty when it was the same.
  const std::string& layout_change() const noexcept { return layout_change_; }

  // --- parts --------------------------------------------------------------------------------
  InputPolicy& input() noexcept { return input_; }  // the input policy (a step of your own takes batches from it)
  TowerPolicy& tower() noexcept { return tower_; }  // the tower policy (its loss_scaler(), precision)
  DistributionPolicy& distribution() noexcept { return distribution_; }  // the distribution policy, as given
  replicas_type& replicas() noexcept { return replicas_; }  // the towers' models and optimizers, as built
  // The main tower's model: what callbacks evaluate and savers save. Where the policy shards the
  // parameters (MultiProcess with tp::sharding::parameters), a unit's are empty between steps:
  // read them after gather_parameters().
  decltype(auto) model() { return replicas_.main_model(); }
  // Makes the model's parameters whole until the next step, where the policy shards them: every
  // process calls it at once (a hook that every process runs, not a chief-only one); elsewhere
  // it does nothing. Checkpoints do it themselves.
  void gather_parameters() {
    if constexpr (gathers_parameters<replicas_type>) replicas_.gather_parameters();
  }
  // Whether the policy shards the parameters (their units are empty between steps).
  bool parameters_are_sharded() const {
    if constexpr (gathers_parameters<replicas_type>) return replicas_.parameters_are_sharded();
    else return false;
  }
  // The same, as a plain module (through the handle: a ModuleHolder or a std::shared_ptr).
  torch::nn::Module* model_module() {
    torch::nn::Module& module = *replicas_.main_model();
    return &module;
  }

  // The callback of type C (which must appear once).
  template <class C>
  C& callback() {
    return callbacks_.template get<C>();
  }
  // The I-th callback, counting from 0 in the order they were given.
  template <std::size_t I>
  auto& callback() {
    return callbacks_.template get<I>();
  }

 private:
  friend struct detail::trainer_state<Trainer>;
  using callbacks_type = detail::callback_set<Trainer, Callbacks...>;

  replicas_type build_replicas() {
    if constexpr (tower_ok && distribution_ok) return distribution_.build(tower_);
    else return replicas_type();
  }

  // At a step or epoch boundary: whether training ends here (the stop arbiter decides, every
  // process alike).
  bool should_stop(bool epoch_end_ahead, bool at_epoch_end) {
    return stop_.should_stop(
        epoch_end_ahead,
        [&](int code) {
          if constexpr (multi_process_replicas<replicas_type>) return replicas_.agree_on_stop(code, at_epoch_end);
          else return code;
        },
        outcome_, position_.global_step);
  }

  // Stops the input's threads (what they made stays queued for the next run).
  void stop_input() noexcept {
    if constexpr (background_input<InputPolicy>) input_.stop();
  }

  // The model summary, when training starts, and the optimizers' state after the first step.
  // (Not with a part that breaks a rule: the rule is then the only error.)
  void print_model_summary() {
    if constexpr (tower_ok && distribution_ok) {
      summary_pending_ = options_.model_summary() && is_chief();
      if (summary_pending_) std::cout << "tp: the model\n" << model_summary(*model_module()) << std::flush;
    }
  }
  void print_optimizer_summary() {
    summary_pending_ = false;
    if constexpr (tower_ok && distribution_ok) std::cout << optimizer_summary(replicas_) << std::flush;
  }

  std::conditional_t<input_ok, InputPolicy, detail::broken_part> input_;
  TowerPolicy tower_;
  DistributionPolicy distribution_;
  TrainOptions options_;
  replicas_type replicas_;
  callbacks_type callbacks_;
  detail::loop_position position_;
  detail::loop_position::resume_point resume_;  // where a loaded state resumes within the starting epoch
  std::string layout_change_;                   // what a loaded checkpoint changed of the layout
  bool user_step_ = false;                      // train(step): the trainer cannot see what the step keeps
  detail::stop_arbiter stop_;
  train_outcome outcome_;
  bool looping_ = false;
  bool summary_pending_ = false;
  mutable torch::Tensor last_cost_;  // as the step returned it; last_cost() detaches it
};

// A trainer's type from its constructor's arguments: tp::Trainer trainer(input, tower,
// distribution, options, callbacks...).
template <class I, class T, class D, class... Cs>
Trainer(I, T, D, TrainOptions, Cs...) -> Trainer<I, T, D, Cs...>;

}  // namespace tp
