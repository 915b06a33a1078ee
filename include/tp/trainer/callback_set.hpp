#pragma once
// The trainer's callbacks and everything about calling them (Lightning's callback connector):
// which callbacks a hook goes to and in what order, the before/after_train pairing on every
// exit path, chief-only callbacks, profiler markers and hook timing, the fan-out of put values,
// and the callbacks' checkpoint state, keyed by name.
//
// Dispatch is decided at compile time (trainer/detail/hook_dispatch.hpp): a callback without a hook
// costs nothing at that hook. The set is a member of the trainer and takes the trainer type as
// a parameter, which is incomplete where the set is declared: what needs the trainer complete
// (whether a hook is callable with it) is asked only inside member functions.
#include <cstddef>
#include <exception>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <tp/checkpoint/checkpoint_error.hpp>
#include <tp/concepts/callback.hpp>
#include <tp/concepts/hooks.hpp>
#include <tp/trainer/detail/callback_clock.hpp>
#include <tp/trainer/detail/hook_dispatch.hpp>
#include <tp/trainer/detail/phase_marker.hpp>
#include <tp/trainer/detail/state_key.hpp>
#include <tp/trainer/detail/type_name.hpp>
#include <tp/checkpoint/state_tree.hpp>

namespace tp::detail {

// Which callbacks a loop hook goes to. At after_epoch plain callbacks run first, then monitors
// (callbacks with on_scalar), then checkpoint writers; at after_step and on_interrupt checkpoint
// writers run after all the others: a monitor prints what the epoch's callbacks have just put,
// and a writer saves the state at the end of the step or epoch.
enum class receivers { all, all_but_writers, plain, monitors, writers };

template <class Trainer, class... Callbacks>
class callback_set {
 public:
  explicit callback_set(Callbacks... callbacks) : callbacks_(std::move(callbacks)...) { check_state_keys(); }

  // The indices of the callbacks that have hook Tag for this trainer, among `Which` (a
  // std::index_sequence).
  template <class Tag, receivers Which = receivers::all>
  static constexpr auto with_hook() {
    return typename true_indices<receives<Tag, Which, Callbacks>()...>::type{};
  }
  template <class Tag>
  static constexpr bool any_with() {
    return with_hook<Tag>().size() > 0;
  }

  // A loop hook (train, epoch or step kind) to the callbacks of `Which`, in order.
  template <class Tag, receivers Which = receivers::all>
  void run(Trainer& trainer) {
    constexpr auto selected = with_hook<Tag, Which>();
    if constexpr (selected.size() > 0) {
      // Two loops rather than a test per callback: without a profiler, the hooks are called as
      // if there were no markers (bench_phase_markers).
      if (profiling()) for_each_index(selected, [&](auto i) { call_marked<Tag>(trainer, i); });
      else for_each_index(selected, [&](auto i) { call<Tag>(trainer, i); });
    }
  }

  // A value hook (put_scalar and the like) to every callback that takes it.
  template <class Tag, class... Args>
  void send(Trainer& trainer, const Args&... args) {
    for_each_index(with_hook<Tag>(), [&](auto i) {
      if (runs_here(trainer, callback(i))) Tag::call(callback(i), trainer, args...);
    });
  }

  // before_train for each callback in order. after_train runs for every callback whose
  // before_train completed, on every exit path, even if some throw; it rethrows the first
  // failure unless an exception is already on its way out.
  void forget_started() noexcept { started_ = 0; }  // at train()'s start, before anything can throw
  void before_train(Trainer& trainer) {
    for_each_index(all_, [&](auto i) {
      if constexpr (before_train_tag::template present<at<decltype(i)>, Trainer>) call_maybe_marked<before_train_tag>(trainer, i);
      started_ = decltype(i)::value + 1;
    });
  }
  void after_train(Trainer& trainer, std::exception_ptr in_flight) {
    std::exception_ptr first;
    for_each_index(all_, [&](auto i) {
      if constexpr (after_train_tag::template present<at<decltype(i)>, Trainer>) {
        if (decltype(i)::value < started_) {
          try {
            call_maybe_marked<after_train_tag>(trainer, i);
          } catch (...) {
            if (!first) first = std::current_exception();
          }
        }
      }
    });
    if (first && !in_flight) std::rethrow_exception(first);
  }
  void setup(Trainer& trainer) {
    for_each_index(all_, [&](auto i) {
      if constexpr (setup_tag::template present<at<decltype(i)>, Trainer>) call_maybe_marked<setup_tag>(trainer, i);
    });
  }

  // Epoch times, for the callbacks with on_epoch_times (and only then are hooks timed).
  static constexpr bool timed = (names_on_epoch_times<Callbacks> || ...);  // by name: Trainer is incomplete here
  void start_epoch_clock() {
    if constexpr (timed) clock_.start_epoch();
  }
  void report_epoch_times(Trainer& trainer, int epoch) {
    if constexpr (timed) send<on_epoch_times_tag>(trainer, clock_.read(epoch));
  }

  // --- checkpoint state: each stateful callback's tree under its key (trainer/detail/state_key.hpp) ---
  void save_state(Trainer& trainer, state_tree& out) {
    for_each_stateful([&](auto& callback, const std::string& key) {
      auto one = out.child(key);
      callback.save_state(trainer, one);
    });
  }
  // Checks that the checkpoint holds exactly the state of this set's stateful callbacks before
  // loading any of it; a missing or unknown one is an error naming it.
  void load_state(Trainer& trainer, const state_tree& in) {
    std::set<std::string> saved;
    for (const auto& key : in.keys()) saved.insert(key);
    std::vector<std::string> missing;
    for_each_stateful([&](auto&, const std::string& key) {
      if (saved.erase(key) == 0) missing.push_back(key);
    });
    if (!missing.empty() || !saved.empty()) {
      std::string message = "the checkpoint's callback state does not fit this trainer's callbacks:";
      for (const auto& key : missing) message += " this trainer's " + key + " has no state in it;";
      for (const auto& key : saved) message += " it holds state for " + key + ", which this trainer does not have;";
      throw checkpoint_error(message + " resume with the stateful callbacks the run was saved with (a callback with "
                                       "state_key() keeps its state under that name)");
    }
    for_each_stateful([&](auto& callback, const std::string& key) { callback.load_state(trainer, in.at(key)); });
  }

  // The callback of type C (which must appear once), or the I-th callback.
  template <class C>
  C& get() {
    using found = true_indices<std::is_same_v<Callbacks, C>...>;
    static_assert(found::count == 1, "trainer.callback<C>(): C must be the type of exactly one callback");
    return std::get<found::found[0]>(callbacks_);
  }
  template <std::size_t I>
  auto& get() {
    return std::get<I>(callbacks_);
  }

 private:
  template <class I>
  using at = std::tuple_element_t<I::value, std::tuple<Callbacks...>>;
  template <class I>
  auto& callback(I) {
    return std::get<I::value>(callbacks_);
  }

  // Whether callback C takes hook Tag among the receivers `Which`.
  template <class Tag, receivers Which, class C>
  static constexpr bool receives() {
    constexpr bool is_monitor = callable_on_scalar<C, Trainer>;
    constexpr bool is_writer = checkpoint_writer<C>;
    constexpr bool wanted = Which == receivers::all || (Which == receivers::all_but_writers && !is_writer) ||
                            (Which == receivers::plain && !is_monitor && !is_writer) ||
                            (Which == receivers::monitors && is_monitor && !is_writer) ||
                            (Which == receivers::writers && is_writer);
    return Tag::template present<C, Trainer> && wanted;
  }

  // Chief-only callbacks are selected at compile time; whether this process is the chief is
  // known at run time (always, with one process).
  template <class C>
  static bool runs_here(const Trainer& trainer, const C&) {
    if constexpr (chief_only_callback<C>) return trainer.is_chief();
    else return true;
  }

  template <class Tag, class I>
  void call(Trainer& trainer, I i) {
    if (!runs_here(trainer, callback(i))) return;
    if constexpr (timed) clock_.time(I::value, [&] { Tag::call(callback(i), trainer); });
    else Tag::call(callback(i), trainer);
  }
  template <class Tag, class I>
  void call_marked(Trainer& trainer, I i) {
    const phase_scope marker([] { return callback_phase_name<at<I>, Tag>(); });
    call<Tag>(trainer, i);
  }
  template <class Tag, class I>
  void call_maybe_marked(Trainer& trainer, I i) {
    if (profiling()) call_marked<Tag>(trainer, i);
    else call<Tag>(trainer, i);
  }

  // f(callback, key) for each callback with state, in order, with its checkpoint key.
  template <class F>
  void for_each_stateful(F&& f) {
    for_each_index(all_, [&](auto i) {
      if constexpr (names_save_state<at<decltype(i)>>) f(callback(i), callback_state_key(callback(i)));
    });
  }

  // Two stateful callbacks under one key would take each other's state when they swap places
  // (Lightning refuses duplicate state keys too): refused when the trainer is made.
  void check_state_keys() {
    std::map<std::string, std::size_t> seen;
    std::size_t index = 0;
    for_each_index(all_, [&](auto i) {
      ++index;
      if constexpr (names_save_state<at<decltype(i)>>) {
        const auto key = callback_state_key(callback(i));
        if (const auto [it, fresh] = seen.emplace(key, index); !fresh)
          throw std::invalid_argument("tp::Trainer: callbacks " + std::to_string(it->second) + " and " + std::to_string(index) +
                                      " both keep their checkpoint state under the key '" + key +
                                      "'; give one of them `std::string state_key() const` returning a name of its own, so that each "
                                      "resumes its own state wherever it stands in the list");
      }
    });
  }

  static auto make_clock() {
    if constexpr (timed) return callback_clock<sizeof...(Callbacks)>({readable_type_name(typeid(Callbacks))...});
    else return no_callback_clock{};
  }

  static constexpr auto all_ = std::index_sequence_for<Callbacks...>{};

  std::tuple<Callbacks...> callbacks_;
  [[no_unique_address]] decltype(make_clock()) clock_ = make_clock();
  std::size_t started_ = 0;
};

}  // namespace tp::detail
