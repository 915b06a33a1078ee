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
//   monitor prints the scalars the epoch's callbacks have just put.
// - before_train and after_train pair like constructors and destructors: after_train runs for
//   every callback whose before_train completed, on every exit path (normal end, a stop
//   request, stop_training, any exception). An exception then propagates; if after_train hooks
//   throw too, the first exception wins.
// - request_stop() finishes the current step (its after_step hooks run), closes the epoch with
//   after_epoch and ends. Throwing tp::stop_training from the step or a hook ends at once.
// - epoch_num is the current epoch (starting_epoch - 1 in before_train, as in tensorpack; the
//   last epoch run in after_train).
// - global_step counts the steps ever finished: in before_step it excludes the current step,
//   in after_step it includes it. local_step is the index of the current step in its epoch.
#include <cstdint>
#include <exception>
#include <string_view>
#include <type_traits>
#include <utility>

#include <boost/hana/at.hpp>
#include <boost/hana/for_each.hpp>
#include <boost/hana/front.hpp>
#include <boost/hana/length.hpp>
#include <boost/hana/tuple.hpp>
#include <torch/types.h>

#include <tp/concepts/callback.hpp>
#include <tp/concepts/distribution.hpp>
#include <tp/concepts/input.hpp>
#include <tp/concepts/tower.hpp>
#include <tp/detail/hook_dispatch.hpp>
#include <tp/stop_training.hpp>
#include <tp/train_options.hpp>

namespace tp {

namespace hana = boost::hana;

template <class InputPolicy, class TowerPolicy, class DistributionPolicy, class... Callbacks>
class Trainer {
  static_assert(detail::check_input<InputPolicy>());
  static_assert(detail::check_tower_policy<TowerPolicy>());
  static_assert(detail::check_distribution<DistributionPolicy, TowerPolicy>());

 public:
  using input_type = InputPolicy;
  using tower_type = TowerPolicy;
  using distribution_type = DistributionPolicy;
  using replicas_type = replicas_t<DistributionPolicy, TowerPolicy>;

  Trainer(InputPolicy input, TowerPolicy tower, DistributionPolicy distribution,
          TrainOptions options, Callbacks... callbacks)
      : input_(std::move(input)),
        tower_(std::move(tower)),
        distribution_(std::move(distribution)),
        options_((options.validate(), std::move(options))),
        replicas_(distribution_.build(tower_)),
        callbacks_(std::move(callbacks)...) {
    static_assert((detail::check_callback<Callbacks, Trainer>() && ...));
  }

  Trainer(const Trainer&) = delete;  // callbacks may hold on to the trainer
  Trainer& operator=(const Trainer&) = delete;

  // Trains with the distribution policy's default step.
  void train() {
    static_assert(detail::check_trainable_tower<TowerPolicy, batch_t<InputPolicy>>());
    static_assert(stepping_distribution<DistributionPolicy, TowerPolicy, InputPolicy>,
                  "tp rule [distribution_policy: run_step]: this distribution policy has no "
                  "default step for this tower and input; pass your own step to train()");
    train([](Trainer& t) { return t.replicas_.run_step(t.tower_, t.input_); });
  }

  // Trains with a step of the user's: step(trainer) runs one step and returns the cost (a
  // tensor, shown by the progress bar) or nothing. Every callback works as with the default.
  template <class Step>
    requires std::invocable<Step&, Trainer&>
  void train(Step step) {
    using step_result = std::invoke_result_t<Step&, Trainer&>;
    static_assert(std::is_void_v<step_result> || std::is_convertible_v<step_result, torch::Tensor>,
                  "tp rule [step: returns a cost]: a step returns its cost as a torch::Tensor, or "
                  "nothing; wrap a number in torch::tensor(x)");
    stop_requested_ = false;
    started_ = 0;
    epoch_num_ = options_.starting_epoch() - 1;  // epochs finished, as tensorpack counts them
    local_step_ = 0;
    try {
      if constexpr (requires { input_.start(); }) input_.start();  // background threads, if any
      if constexpr (requires { replicas_.start(); }) replicas_.start();  // e.g. towers synced from the main one
      run_before_train();
      for (int epoch = options_.starting_epoch(); epoch <= options_.max_epoch(); ++epoch) {
        epoch_num_ = epoch;  // after the loop it stays the last epoch run
        local_step_ = 0;
        run_hook<detail::before_epoch_tag>();
        for (std::int64_t index = 0; index < options_.steps_per_epoch(); ++index) {
          local_step_ = index;  // after the loop it stays the index of the epoch's last step
          run_hook<detail::before_step_tag>();
          if constexpr (std::is_void_v<step_result>) {
            step(*this);
          } else {
            last_cost_ = step(*this);
          }
          ++global_step_;
          run_hook<detail::after_step_tag>();
          if (stop_requested_) break;
        }
        if constexpr (requires { replicas_.end_epoch(epoch); }) replicas_.end_epoch(epoch);
        run_hook<detail::after_epoch_tag, receivers::plain>();
        run_hook<detail::after_epoch_tag, receivers::monitors>();
        if (stop_requested_) break;
      }
    } catch (const stop_training&) {
      // A requested end, not a failure: fall through to after_train and return.
    } catch (...) {
      stop_input();
      run_after_train(std::current_exception());
      throw;
    }
    stop_input();
    run_after_train(nullptr);
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

  // Ends training after the current step and its epoch's after_epoch hooks.
  void request_stop() noexcept { stop_requested_ = true; }
  bool stop_requested() const noexcept { return stop_requested_; }

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

  // --- parts --------------------------------------------------------------------------------
  InputPolicy& input() noexcept { return input_; }
  TowerPolicy& tower() noexcept { return tower_; }
  DistributionPolicy& distribution() noexcept { return distribution_; }
  replicas_type& replicas() noexcept { return replicas_; }
  // The main tower's model: what callbacks evaluate and savers save.
  decltype(auto) model() { return replicas_.main_model(); }

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
  // Which callbacks a hook goes to. At after_epoch, plain callbacks run before monitors.
  enum class receivers { all, plain, monitors };

  template <class Tag, receivers Which = receivers::all>
  void run_hook() {
    constexpr auto selected = detail::indices_where<Callbacks...>([](auto t) {
      using C = typename decltype(t)::type;
      constexpr bool is_monitor = detail::callable_on_scalar<C, Trainer>;
      constexpr bool wanted = Which == receivers::all || (Which == receivers::monitors) == is_monitor;
      return hana::bool_c<Tag::template present<C, Trainer> && wanted>;
    });
    hana::for_each(selected, [this](auto i) {
      if (runs_here(callbacks_[i])) Tag::call(callbacks_[i], *this);
    });
  }

  // Chief-only callbacks are selected at compile time; whether this process is the chief is
  // known at run time (always, with one process).
  template <class C>
  bool runs_here(const C&) const {
    if constexpr (chief_only_callback<C>) return is_chief();
    else return true;
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
    hana::for_each(all_callbacks, [this](auto i) {
      if constexpr (detail::callable_before_train<std::remove_cvref_t<decltype(callbacks_[i])>, Trainer>)
        if (runs_here(callbacks_[i])) callbacks_[i].before_train(*this);
      started_ = decltype(i)::value + 1;
    });
  }

  // after_train for every callback whose before_train completed; all of them run even if some
  // throw. Rethrows the first failure unless an exception is already on its way out.
  void run_after_train(std::exception_ptr in_flight) {
    std::exception_ptr first;
    hana::for_each(all_callbacks, [&](auto i) {
      if constexpr (detail::callable_after_train<std::remove_cvref_t<decltype(callbacks_[i])>, Trainer>) {
        if (decltype(i)::value < started_ && runs_here(callbacks_[i])) {
          try {
            callbacks_[i].after_train(*this);
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

  InputPolicy input_;
  TowerPolicy tower_;
  DistributionPolicy distribution_;
  TrainOptions options_;
  replicas_type replicas_;
  hana::tuple<Callbacks...> callbacks_;

  int epoch_num_ = 0;
  std::int64_t local_step_ = 0;
  std::int64_t global_step_ = 0;
  std::size_t started_ = 0;
  bool stop_requested_ = false;
  mutable torch::Tensor last_cost_;  // as the step returned it; last_cost() detaches it
};

template <class I, class T, class D, class... Cs>
Trainer(I, T, D, TrainOptions, Cs...) -> Trainer<I, T, D, Cs...>;

}  // namespace tp
