#pragma once
// tp::Trainer<InputPolicy, TowerPolicy, DistributionPolicy, Callbacks...>: the composed loop.
//
//   for epoch_num in [starting_epoch, max_epoch]
//     before_epoch
//     for local_step in [0, steps_per_epoch)
//       before_step; step(); ++global_step; after_step
//     after_epoch
//
// Contracts (tensorpack's, made exact):
// - Every callback sees every event, in the order the callbacks were given. At after_epoch the
//   plain callbacks run first and the monitors (callbacks with on_scalar) after them, so that a
//   monitor prints the scalars the epoch's callbacks have just put; checkpoint writers run last
//   at after_epoch and after_step, so that they save the state of the finished epoch or step.
// - before_train and after_train pair like constructors and destructors: after_train runs for
//   every callback whose before_train completed, on every exit path (normal end, a stop
//   request, stop_training, any exception). An exception then propagates; if after_train hooks
//   throw too, the first exception wins.
// - request_stop() finishes the current step (its after_step hooks run), closes the epoch with
//   after_epoch and ends. Throwing tp::stop_training from the step or a hook ends at once.
// - Interruptions (a stop signal, TrainOptions::max_time) end at the next boundary: after the
//   current step's after_step hooks, or after the epoch's after_epoch hooks if it is closing.
//   The epoch is not closed early: on_interrupt hooks run (checkpoint writers last: the on-stop
//   save, which resumes at the next step), then after_train, and train() returns the outcome
//   (tp/train_outcome.hpp). With many processes, all agree to end after the same step.
// - epoch_num is the current epoch (starting_epoch - 1 in before_train, as in tensorpack; the
//   last epoch run in after_train).
// - global_step counts the steps ever finished: in before_step it excludes the current step,
//   in after_step it includes it. local_step is the index of the current step in its epoch.
// - setup hooks run first, before the input starts and outside the before/after_train pairing:
//   a callback may load a checkpoint there. save_state/load_state hold everything a resumed run
//   needs to go on exactly as an uninterrupted one: a run resumed from a checkpoint written in
//   an epoch's after_epoch starts at the next epoch; one written after step k of an epoch
//   starts that epoch again at step k (its before_epoch hooks run).
#include <array>
#include <cstdint>
#include <exception>
#include <iostream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include <boost/hana/at.hpp>
#include <boost/hana/for_each.hpp>
#include <boost/hana/front.hpp>
#include <boost/hana/length.hpp>
#include <boost/hana/tuple.hpp>
#include <ATen/Parallel.h>
#include <torch/types.h>

#include <tp/concepts/callback.hpp>
#include <tp/concepts/distribution.hpp>
#include <tp/concepts/input.hpp>
#include <tp/concepts/scalar.hpp>
#include <tp/concepts/tower.hpp>
#include <tp/data/state.hpp>
#include <tp/detail/archive.hpp>
#include <tp/detail/callback_clock.hpp>
#include <tp/detail/hook_dispatch.hpp>
#include <tp/detail/phase_marker.hpp>
#include <tp/detail/signals.hpp>
#include <tp/detail/time_budget.hpp>
#include <tp/loss_scaler.hpp>
#include <tp/model_summary.hpp>
#include <tp/detail/image.hpp>
#include <tp/stop_training.hpp>
#include <tp/train_options.hpp>
#include <tp/train_outcome.hpp>

namespace tp {

namespace hana = boost::hana;

namespace detail {
// What a trainer holds in place of a part that breaks a rule (an input it cannot move, replicas
// it cannot build): the rule's static_assert is then the whole diagnostic, not the first of
// many errors about the part's uses.
struct broken_part {
  template <class... Args>
  explicit broken_part(Args&&...) {}
};
}  // namespace detail

template <class InputPolicy, class TowerPolicy, class DistributionPolicy, class... Callbacks>
class Trainer {
  // Checked once, when the class is instantiated (the member types below use them).
  static constexpr bool input_ok = detail::check_input<InputPolicy>();
  static constexpr bool tower_ok = detail::check_tower_policy<TowerPolicy>();
  static constexpr bool distribution_ok = detail::check_distribution<DistributionPolicy, TowerPolicy>();

 public:
  using input_type = InputPolicy;
  using tower_type = TowerPolicy;
  using distribution_type = DistributionPolicy;
  using replicas_type = typename std::conditional_t<tower_ok && distribution_ok, detail::replicas_of<DistributionPolicy, TowerPolicy>,
                                                    std::type_identity<detail::broken_part>>::type;

  Trainer(InputPolicy input, TowerPolicy tower, DistributionPolicy distribution,
          TrainOptions options, Callbacks... callbacks)
      : input_(std::move(input)),
        tower_(std::move(tower)),
        distribution_(std::move(distribution)),
        options_((options.validate(), std::move(options))),
        replicas_(build_replicas()),
        callbacks_(std::move(callbacks)...) {
    // A callback that breaks a rule gets none of its hooks called: nothing else fails.
    [[maybe_unused]] constexpr bool callbacks_ok = (detail::check_callback<Callbacks, Trainer>() && ...);
    // A tower in channels-last order gets its batches so from the input, made on its thread.
    if constexpr (requires { tower_.channels_last(); input_.channels_last(true); })
      if (tower_.channels_last()) input_.channels_last(true);
  }

  Trainer(const Trainer&) = delete;  // callbacks may hold on to the trainer
  Trainer& operator=(const Trainer&) = delete;

  // Trains with the distribution policy's default step.
  train_outcome train() {
    if constexpr (detail::check_default_step<DistributionPolicy, TowerPolicy, InputPolicy>())
      return train([](Trainer& t) { return t.replicas_.run_step(t.tower_, t.input_); });
    else return {};
  }

  // Trains with a step of the user's: step(trainer) runs one step and returns the cost (a
  // tensor, shown by the progress bar) or nothing. Every callback works as with the default.
  template <class Step>
  train_outcome train(Step step) {
    static_assert(std::bool_constant<std::invocable<Step&, Trainer&>>::value,  // bool: see check_input
                  "tp rule [step: takes the trainer]: a step is called as step(trainer); declare it "
                  "as [](auto& trainer) { ... }");
    using step_result = typename std::conditional_t<std::invocable<Step&, Trainer&>, std::invoke_result<Step&, Trainer&>,
                                                    std::type_identity<void>>::type;
    static_assert(std::is_void_v<step_result> || std::is_convertible_v<step_result, torch::Tensor>,
                  "tp rule [step: returns a cost]: a step returns its cost as a torch::Tensor, or "
                  "nothing; wrap a number in torch::tensor(x)");
    // A step that breaks a rule is not called: the rule is the only error.
    constexpr bool returns_cost = !std::is_void_v<step_result> && std::is_convertible_v<step_result, torch::Tensor>;
    constexpr bool returns_nothing = std::is_void_v<step_result> && std::invocable<Step&, Trainer&>;
    stop_requested_ = false;
    outcome_ = {};
    started_ = 0;
    // Stop signals only set a flag from here until train() returns, when the previous handlers
    // are back; the loop reads the flag at its boundaries (should_stop).
    const detail::signal_scope signals(options_.stop_signals());
    if (options_.intra_op_threads() > 0) at::set_num_threads(options_.intra_op_threads());
    budget_ = detail::time_budget(options_.max_time(), detail::time_budget::clock::now());
    run_setup();
    epoch_num_ = options_.starting_epoch() - 1;  // epochs finished, as tensorpack counts them
    const std::int64_t first_step = std::exchange(resume_step_, 0);
    local_step_ = first_step;
    steps_done_ = 0;
    epoch_closed_ = true;
    looping_ = true;
    struct not_looping {
      bool& flag;
      ~not_looping() { flag = false; }
    } end_of_loop{looping_};
    try {
      if constexpr (requires { input_.start(); }) input_.start();  // background threads, if any
      if constexpr (requires { replicas_.start(); }) replicas_.start();  // e.g. towers synced from the main one
      run_before_train();
      const std::int64_t steps = options_.steps_per_epoch();
      for (int epoch = options_.starting_epoch(); epoch <= options_.max_epoch() && !outcome_.interrupted(); ++epoch) {
        epoch_num_ = epoch;  // after the loop it stays the last epoch run
        const std::int64_t first = epoch == options_.starting_epoch() ? first_step : 0;
        local_step_ = first;
        steps_done_ = first;
        epoch_closed_ = false;
        if constexpr (times_callbacks) clock_.start_epoch();
        run_hook<detail::before_epoch_tag>();
        for (std::int64_t index = first; index < steps; ++index) {
          local_step_ = index;  // after the loop it stays the index of the epoch's last step
          const auto began = budget_.limited() ? detail::time_budget::clock::now() : detail::time_budget::clock::time_point{};
          run_hook<detail::before_step_tag>();
          if constexpr (returns_cost) {
            last_cost_ = step(*this);
          } else if constexpr (returns_nothing) {
            step(*this);
          }
          ++global_step_;
          ++steps_done_;
          if (summary_pending_) print_optimizer_summary();
          run_hook<detail::after_step_tag, receivers::all_but_writers>();
          const auto stepped = budget_.limited() ? detail::time_budget::clock::now() : began;
          run_hook<detail::after_step_tag, receivers::writers>();
          if (budget_.limited()) {
            budget_.saw_step(stepped - began);
            budget_.saw_checkpoint(detail::time_budget::clock::now() - stepped);
          }
          // Ahead: this epoch's end (after its last step), or the next step, which may close it.
          if (should_stop(/*epoch_end_ahead=*/index + 2 >= steps)) break;
        }
        if (outcome_.interrupted()) break;  // the epoch stays open: a resumed run finishes it
        if constexpr (requires { replicas_.end_epoch(epoch); }) replicas_.end_epoch(epoch);
        epoch_closed_ = true;
        const auto closing = budget_.limited() ? detail::time_budget::clock::now() : detail::time_budget::clock::time_point{};
        run_hook<detail::after_epoch_tag, receivers::plain>();
        run_hook<detail::after_epoch_tag, receivers::monitors>();
        const auto closed = budget_.limited() ? detail::time_budget::clock::now() : closing;
        run_hook<detail::after_epoch_tag, receivers::writers>();
        if (budget_.limited()) {
          budget_.saw_epoch_end(closed - closing);
          budget_.saw_checkpoint(detail::time_budget::clock::now() - closed);
        }
        if constexpr (times_callbacks) report_epoch_times();
        if (should_stop(/*epoch_end_ahead=*/steps == 1)) break;
      }
      if (outcome_.interrupted()) {
        run_hook<detail::on_interrupt_tag, receivers::all_but_writers>();
        run_hook<detail::on_interrupt_tag, receivers::writers>();
      }
    } catch (const stop_training&) {
      // A requested end, not a failure: fall through to after_train and return.
      outcome_.cause = end_cause::stop_requested;
    } catch (...) {
      stop_input();
      run_after_train(std::current_exception());
      throw;
    }
    stop_input();
    outcome_.global_step = global_step_;
    run_after_train(nullptr);
    return outcome_;
  }

  // --- loop state -------------------------------------------------------------------------
  int epoch_num() const noexcept { return epoch_num_; }
  std::int64_t local_step() const noexcept { return local_step_; }
  std::int64_t global_step() const noexcept { return global_step_; }
  std::int64_t steps_per_epoch() const noexcept { return options_.steps_per_epoch(); }
  int starting_epoch() const noexcept { return options_.starting_epoch(); }
  int max_epoch() const noexcept { return options_.max_epoch(); }
  const TrainOptions& options() const noexcept { return options_; }

  // Whether this process is the chief (rank 0): the one that runs chief-only callbacks.
  bool is_chief() const {
    if constexpr (requires { replicas_.is_chief(); }) return replicas_.is_chief();
    else return true;
  }

  // --- many processes ----------------------------------------------------------------------
  // How many processes train together (1 unless the distribution policy spans several).
  int process_count() const {
    if constexpr (requires { replicas_.world_size(); }) return replicas_.world_size();
    else return 1;
  }
  // Sums values across the processes, in place (nothing to do with one). Every process must
  // call it at the same point: callbacks that are not chief-only may.
  void sum_across_processes(std::vector<double>& values) {
    if constexpr (requires { replicas_.sum_across_processes(values); }) replicas_.sum_across_processes(values);
  }
  // The mean of a value across the processes (a loss, an accuracy).
  double mean_across_processes(double value) {
    if (process_count() == 1) return value;
    std::vector<double> one{value};
    sum_across_processes(one);
    return one[0] / process_count();
  }

  // Ends training after the current step and its epoch's after_epoch hooks.
  void request_stop() noexcept { stop_requested_ = true; }
  bool stop_requested() const noexcept { return stop_requested_; }
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

  // --- scalars -----------------------------------------------------------------------------
  static constexpr bool has_monitors() { return (detail::callable_on_scalar<Callbacks, Trainer> || ...); }

  // Sends a scalar to every monitor, tagged with the current global_step.
  void put_scalar(std::string_view name, double value) {
    hana::for_each(monitors(), [&](auto i) {
      if (runs_here(callbacks_[i])) callbacks_[i].on_scalar(*this, name, value);
    });
  }
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
    hana::for_each(receivers_of<detail::on_histogram_probe>(), [&](auto i) {
      if (runs_here(callbacks_[i])) callbacks_[i].on_histogram(*this, name, values);
    });
  }
  // Sends an image to the monitors that show images: [H, W] (grey), or [C, H, W] or [H, W, C]
  // with C = 1, 3 or 4 (grey, RGB, RGBA); uint8, or floating point in [0, 1] (clamped). Throws
  // std::invalid_argument for another shape or type, whether or not a monitor takes images.
  void put_image(std::string_view name, const torch::Tensor& image) {
    const auto pixels = detail::image_pixels(image, name);
    hana::for_each(receivers_of<detail::on_image_probe>(), [&](auto i) {
      if (runs_here(callbacks_[i])) callbacks_[i].on_image(*this, name, pixels);
    });
  }
  // Sends a text (Markdown, as TensorBoard shows it) to the monitors that take texts.
  void put_text(std::string_view name, std::string_view text) {
    hana::for_each(receivers_of<detail::on_text_probe>(), [&](auto i) {
      if (runs_here(callbacks_[i])) callbacks_[i].on_text(*this, name, text);
    });
  }

  // --- state: what a checkpoint holds -------------------------------------------------------
  // Everything a resumed run needs to go on exactly as an uninterrupted one: the loop's place,
  // the main model's parameters and buffers, every optimizer (with its hyperparameters), the
  // loss scaler, the CPU and CUDA random generators, the input's position in its dataflow, and
  // the state of the callbacks that have some. Multi-tower policies bring the other towers back to the main one at start.
  void save_state(torch::serialize::OutputArchive& archive) {
    namespace d = detail;
    archive.write("tp/format", c10::IValue(std::int64_t{1}));
    archive.write("loop/epoch_num", c10::IValue(std::int64_t{epoch_num_}));
    archive.write("loop/steps_done", c10::IValue(steps_done_));
    archive.write("loop/epoch_closed", c10::IValue(epoch_closed_));
    archive.write("loop/global_step", c10::IValue(global_step_));
    torch::serialize::OutputArchive model;
    d::save_module(model, *model_module());
    archive.write("model", model);
    std::int64_t count = 0;
    replicas_.for_each_optimizer([&](auto& optimizer) {
      torch::serialize::OutputArchive one;
      optimizer.save(one);
      archive.write("optimizer/" + std::to_string(count++), one);
    });
    archive.write("optimizer/count", c10::IValue(count));
    if (const auto* scaler = d::loss_scaler_of(tower_)) {
      torch::serialize::OutputArchive one;
      scaler->save(one);
      archive.write("loss_scaler", one);
    }
    d::save_cpu_rng(archive, "rng/cpu");
    d::save_cuda_rng(archive, "rng/cuda");
    if constexpr (requires { input_.position(); }) {
      const auto where = input_.position();
      archive.write("input/flow", c10::IValue(std::vector<std::int64_t>(where.flow.begin(), where.flow.end())));
      archive.write("input/consumed", c10::IValue(where.consumed));
    }
    std::int64_t stateful = 0;
    hana::for_each(all_callbacks, [&](auto i) {
      if constexpr (detail::names_save_state<std::remove_cvref_t<decltype(callbacks_[i])>>) {
        torch::serialize::OutputArchive one;
        callbacks_[i].save_state(*this, one);
        archive.write("callback/" + std::to_string(stateful++), one);
      }
    });
  }

  // Loads what save_state wrote; the next train() goes on from there. Call it before train(),
  // or from a setup hook. A state that does not fit this trainer (another model, optimizer or
  // set of stateful callbacks) throws tp::checkpoint_error naming the part; the trainer may then
  // be partly loaded, and a later successful load_state overwrites all of it.
  void load_state(torch::serialize::InputArchive& archive) {
    namespace d = detail;
    if (looping_) throw std::logic_error("tp::Trainer::load_state: called while training; call it before train() or from a setup hook");
    if (const auto format = d::read_int(archive, "tp/format"); format != 1)
      throw checkpoint_error("the checkpoint has format " + std::to_string(format) + "; this tp reads format 1");
    const auto epoch = d::read_int(archive, "loop/epoch_num");
    const auto steps_done = d::read_int(archive, "loop/steps_done");
    const bool closed = d::read_bool(archive, "loop/epoch_closed");
    const auto global_step = d::read_int(archive, "loop/global_step");
    torch::serialize::InputArchive model;
    d::read_archive(archive, "model", model);
    d::load_module(model, *model_module());
    std::int64_t count = 0;
    const auto saved_count = d::read_int(archive, "optimizer/count");
    replicas_.for_each_optimizer([&](auto& optimizer) {
      if (count >= saved_count)
        throw checkpoint_error("the checkpoint holds " + std::to_string(saved_count) + " optimizers but this trainer has more");
      torch::serialize::InputArchive one;
      d::read_archive(archive, "optimizer/" + std::to_string(count++), one);
      try {
        optimizer.load(one);
      } catch (const c10::Error& e) {
        throw checkpoint_error("the checkpoint's optimizer " + std::to_string(count - 1) + " does not fit this trainer's (" +
                               e.what_without_backtrace() + "); build the optimizer as the run that saved it did");
      }
    });
    if (count != saved_count)
      throw checkpoint_error("the checkpoint holds " + std::to_string(saved_count) + " optimizers but this trainer has " + std::to_string(count));
    // A checkpoint of a run without loss scaling leaves the scaler at its initial scale.
    torch::serialize::InputArchive scaler_state;
    if (auto* scaler = d::loss_scaler_of(tower_); scaler && archive.try_read("loss_scaler", scaler_state)) scaler->load(scaler_state);
    d::load_cpu_rng(archive, "rng/cpu");
    d::load_cuda_rng(archive, "rng/cuda");
    if constexpr (requires(data::position p) { input_.restore(p); }) {
      data::position where;
      for (auto v : d::read_ints(archive, "input/flow")) where.flow.push_back(static_cast<std::uint64_t>(v));
      where.consumed = d::read_int(archive, "input/consumed");
      input_.restore(where);
    }
    std::int64_t stateful = 0;
    hana::for_each(all_callbacks, [&](auto i) {
      if constexpr (detail::names_save_state<std::remove_cvref_t<decltype(callbacks_[i])>>) {
        torch::serialize::InputArchive one;
        d::read_archive(archive, "callback/" + std::to_string(stateful++), one);
        callbacks_[i].load_state(*this, one);
      }
    });
    global_step_ = global_step;
    if (closed) {
      options_.starting_epoch(static_cast<int>(epoch) + 1);
      resume_step_ = 0;
    } else {
      options_.starting_epoch(static_cast<int>(epoch));
      resume_step_ = steps_done;
    }
  }

  // --- parts --------------------------------------------------------------------------------
  InputPolicy& input() noexcept { return input_; }
  TowerPolicy& tower() noexcept { return tower_; }
  DistributionPolicy& distribution() noexcept { return distribution_; }
  replicas_type& replicas() noexcept { return replicas_; }
  // The main tower's model: what callbacks evaluate and savers save.
  decltype(auto) model() { return replicas_.main_model(); }
  // The same, as a plain module.
  torch::nn::Module* model_module() { return replicas_.main_model().ptr().get(); }

  // The callback of type C (which must appear once), or the I-th callback.
  template <class C>
  C& callback() {
    constexpr auto found = detail::indices_where<Callbacks...>(
        [](auto t) { return hana::bool_c<std::is_same_v<typename decltype(t)::type, C>>; });
    static_assert(decltype(hana::length(found))::value == 1,
                  "trainer.callback<C>(): C must be the type of exactly one callback");
    return callbacks_[hana::front(found)];
  }
  template <std::size_t I>
  auto& callback() {
    return callbacks_[hana::size_c<I>];
  }

 private:
  // Which callbacks a hook goes to. At after_epoch, plain callbacks run first, then monitors,
  // then checkpoint writers; at after_step, checkpoint writers run after all the others.
  enum class receivers { all, all_but_writers, plain, monitors, writers };

  template <class Tag, receivers Which = receivers::all>
  void run_hook() {
    constexpr auto selected = detail::indices_where<Callbacks...>([](auto t) {
      using C = typename decltype(t)::type;
      constexpr bool is_monitor = detail::callable_on_scalar<C, Trainer>;
      constexpr bool is_writer = checkpoint_writer<C>;
      constexpr bool wanted = Which == receivers::all || (Which == receivers::all_but_writers && !is_writer) ||
                              (Which == receivers::plain && !is_monitor && !is_writer) ||
                              (Which == receivers::monitors && is_monitor && !is_writer) ||
                              (Which == receivers::writers && is_writer);
      return hana::bool_c<Tag::template present<C, Trainer> && wanted>;
    });
    if constexpr (decltype(hana::length(selected))::value > 0) {
      // Two loops rather than a test per callback: without a profiler, the hooks are called as
      // if there were no markers (bench_phase_markers).
      if (detail::profiling()) hana::for_each(selected, [&](auto i) { call<Tag>(i, true); });
      else hana::for_each(selected, [&](auto i) { call<Tag>(i); });
    }
  }

  // Calls callback i's hook, if the callback runs in this process: marked for a profiler if
  // `marked`, and timed when a callback wants the epoch's times.
  template <class Tag, class I>
  void call(I i, bool marked) {
    using C = std::remove_cvref_t<decltype(callbacks_[i])>;
    if (!marked) return call<Tag>(i);
    const detail::phase_scope marker([] { return detail::callback_phase_name<C, Tag>(); });
    call<Tag>(i);
  }
  template <class Tag, class I>
  void call(I i) {
    if (!runs_here(callbacks_[i])) return;
    if constexpr (times_callbacks) clock_.time(I::value, [&] { Tag::call(callbacks_[i], *this); });
    else Tag::call(callbacks_[i], *this);
  }

  // The callbacks with a hook of the given probe's name and the right signature.
  template <class Probe>
  static constexpr auto receivers_of() {
    return detail::indices_where<Callbacks...>([](auto t) {
      using C = typename decltype(t)::type;
      if constexpr (std::is_same_v<Probe, detail::on_histogram_probe>) return hana::bool_c<detail::callable_on_histogram<C, Trainer>>;
      else if constexpr (std::is_same_v<Probe, detail::on_image_probe>) return hana::bool_c<detail::callable_on_image<C, Trainer>>;
      else if constexpr (std::is_same_v<Probe, detail::on_text_probe>) return hana::bool_c<detail::callable_on_text<C, Trainer>>;
      else return hana::bool_c<detail::callable_on_epoch_times<C, Trainer>>;
    });
  }

  // Whether some callback wants each epoch's times: only then are hooks timed.
  // (By name: the trainer type is not complete where the clock member needs the answer.)
  static constexpr bool times_callbacks = (detail::names_on_epoch_times<Callbacks> || ...);
  void report_epoch_times() {
    const auto times = clock_.read(epoch_num_);
    hana::for_each(receivers_of<detail::on_epoch_times_probe>(), [&](auto i) {
      if (runs_here(callbacks_[i])) callbacks_[i].on_epoch_times(*this, times);
    });
  }
  static auto make_clock() {
    if constexpr (times_callbacks)
      return detail::callback_clock<sizeof...(Callbacks)>({detail::readable_type_name(typeid(Callbacks))...});
    else return detail::no_callback_clock{};
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
    if constexpr (tower_ok && distribution_ok) {
      std::int64_t count = 0, bytes = 0;
      replicas_.for_each_optimizer([&](auto& optimizer) {
        if constexpr (requires(torch::serialize::OutputArchive& a) { optimizer.save(a); }) ++count, bytes += optimizer_state_bytes(optimizer);
      });  // (an optimizer of the user's that cannot save itself is left out)
      if (count > 0)
        std::cout << "tp: optimizer state after the first step: " << detail::human_bytes(static_cast<double>(bytes))
                  << (count > 1 ? " in " + std::to_string(count) + " optimizers (one per tower)" : std::string()) << "\n"
                  << std::flush;
    }
  }

  // Chief-only callbacks are selected at compile time; whether this process is the chief is
  // known at run time (always, with one process).
  template <class C>
  bool runs_here(const C&) const {
    if constexpr (chief_only_callback<C>) return is_chief();
    else return true;
  }

  replicas_type build_replicas() {
    if constexpr (tower_ok && distribution_ok) return distribution_.build(tower_);
    else return replicas_type();
  }

  // At a step or epoch boundary: whether training ends here, and why (outcome_). Every process
  // gets the same answer, so all end after the same step for the same reason: the processes
  // agree on the largest stop code, so a signal outranks the time budget, which outranks a
  // request (and of two signals the higher number wins).
  static constexpr int stop_code_request = 1, stop_code_time = 2, stop_code_signal = 1000;
  bool should_stop(bool epoch_end_ahead) {
    int code = stop_requested_ ? stop_code_request : 0;
    if (budget_.limited() && !budget_.allows_next_step(epoch_end_ahead, detail::time_budget::clock::now())) code = stop_code_time;
    if (!options_.stop_signals().empty())
      if (const int signal = detail::signal_scope::received()) code = stop_code_signal + signal;
    if constexpr (requires { replicas_.agree_on_stop(code); }) code = replicas_.agree_on_stop(code);
    if (code == 0) return false;
    stop_requested_ = true;
    outcome_.global_step = global_step_;
    if (code >= stop_code_signal) {
      outcome_.cause = end_cause::signal;
      outcome_.signal = code - stop_code_signal;
    } else {
      outcome_.cause = code == stop_code_time ? end_cause::time_limit : end_cause::stop_requested;
    }
    return true;
  }

  void run_setup() {
    hana::for_each(all_callbacks, [&](auto i) {
      if constexpr (detail::callable_setup<std::remove_cvref_t<decltype(callbacks_[i])>, Trainer>) call<detail::setup_tag>(i, detail::profiling());
    });
  }

  static constexpr auto monitors() {
    return detail::indices_where<Callbacks...>([](auto t) {
      return hana::bool_c<detail::callable_on_scalar<typename decltype(t)::type, Trainer>>;
    });
  }

  // Stops the input's threads (what they made stays queued for the next run).
  void stop_input() noexcept {
    if constexpr (requires { input_.stop(); }) input_.stop();
  }

  void run_before_train() {
    print_model_summary();
    hana::for_each(all_callbacks, [&](auto i) {
      if constexpr (detail::callable_before_train<std::remove_cvref_t<decltype(callbacks_[i])>, Trainer>)
        call<detail::before_train_tag>(i, detail::profiling());
      started_ = decltype(i)::value + 1;
    });
  }

  // after_train for every callback whose before_train completed; all of them run even if some
  // throw. Rethrows the first failure unless an exception is already on its way out.
  void run_after_train(std::exception_ptr in_flight) {
    std::exception_ptr first;
    hana::for_each(all_callbacks, [&](auto i) {
      if constexpr (detail::callable_after_train<std::remove_cvref_t<decltype(callbacks_[i])>, Trainer>) {
        if (decltype(i)::value < started_) {
          try {
            call<detail::after_train_tag>(i, detail::profiling());
          } catch (...) {
            if (!first) first = std::current_exception();
          }
        }
      }
    });
    if (first && !in_flight) std::rethrow_exception(first);
  }

  static constexpr auto all_callbacks =
      hana::to_tuple(hana::make_range(hana::size_c<0>, hana::size_c<sizeof...(Callbacks)>));

  std::conditional_t<input_ok, InputPolicy, detail::broken_part> input_;
  TowerPolicy tower_;
  DistributionPolicy distribution_;
  TrainOptions options_;
  replicas_type replicas_;
  hana::tuple<Callbacks...> callbacks_;
  [[no_unique_address]] decltype(make_clock()) clock_ = make_clock();
  bool summary_pending_ = false;

  int epoch_num_ = 0;
  std::int64_t local_step_ = 0;
  std::int64_t global_step_ = 0;
  std::size_t started_ = 0;
  bool stop_requested_ = false;
  // For checkpoints: steps finished in the current epoch, whether its after_epoch has begun,
  // and where a loaded state resumes within the starting epoch.
  std::int64_t steps_done_ = 0;
  bool epoch_closed_ = true;
  std::int64_t resume_step_ = 0;
  bool looping_ = false;
  train_outcome outcome_;
  detail::time_budget budget_{{}, {}};
  mutable torch::Tensor last_cost_;  // as the step returned it; last_cost() detaches it
};

template <class I, class T, class D, class... Cs>
Trainer(I, T, D, TrainOptions, Cs...) -> Trainer<I, T, D, Cs...>;

}  // namespace tp
