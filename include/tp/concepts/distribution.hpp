#pragma once
// The distribution concept family.
//
// A distribution policy says how towers turn their gradients into one update. It is a small
// value (devices, options) whose `build(tower_policy)` creates the replicas: one model per tower
// and the optimizer state the policy needs. The built replicas give:
//
//   main_model()                the main tower's model (what callbacks read and savers save)
//   for_each_optimizer(f)       calls f on each optimizer the replicas hold (none, for a tower
//                               without one): what checkpoints and hyperparameter setters reach
//   run_step(tower, input)      the default step: every tower pulls its own batch, computes its
//                               cost, and the policy makes one update; returns the main tower's
//                               cost (the trainer detaches it when it is read)
//
// Optional capabilities of the replicas, each a named concept required whole or not at all (a
// policy with half of one fails to compile, naming the rule, rather than misbehaving at run time):
//   multi_process_replicas   is_chief(), world_size(), agree_on_stop(code, at_epoch_end) and
//                            sum_across_processes(values): the run spans processes, which must
//                            agree on when to stop and can sum values (MultiProcess); after a
//                            step the agreement may come one step late (a vote riding in the
//                            step's own collectives), at an epoch's end it is immediate
//   shards_state             state_is_sharded(), optimizer_options(tower), optimizer_part(),
//                            optimizer_part_pieces(rank), load_checkpoint_optimizer(tower, load)
//                            and load_checkpoint_parts(tower, options, parts, source, load): the
//                            optimizer state may be spread over the processes (MultiProcess with
//                            .shard(): each holds a shard, and writes it as its part of a
//                            checkpoint, optim/optimizer_pieces.hpp)
//   gathers_parameters       gather_parameters(), parameters_are_sharded(), parameter_rows(),
//                            sharded_parameters() and load_sharded_parameters(weights): the
//                            parameters may be spread over the processes between steps
//                            (MultiProcess with .shard(tp::sharding::parameters)); every process
//                            calls gather_parameters() at once, and the model is whole until the
//                            next step; a checkpoint saves each process's rows in its part
//                            (checkpoint/detail/parameter_pieces.hpp), and each process loads
//                            its rows, with no collective
//   synced_at_start          start(): called once training starts, after a resume too, to bring
//                            every tower to the main one (Replicated, ParameterServer)
//   counts_batches           batches_per_step(): how many batches the default step takes from the
//                            input (towers x micro-batches); TrainOptions' default steps_per_epoch
//                            (one pass of the input) needs it
//   epoch_end_work           end_epoch(epoch): work at each epoch's end, before its after_epoch
//                            hooks (Replicated brings its towers back to tower 0 every n epochs)
//
// Level 1: `detail::builds_replicas<D, Tower>`; level 2: `distribution_policy<D, Tower>` (the
// replicas expose a main model and their optimizers) and `stepping_distribution<D, Tower,
// Input>` (they can also run the default step on that input).
#include <concepts>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

#include <tp/concepts/input.hpp>
#include <tp/concepts/member_names.hpp>
#include <tp/concepts/tower.hpp>
#include <tp/checkpoint/state_parts.hpp>

namespace tp::detail {
TP_DETAIL_NAME_PROBE(is_chief)
TP_DETAIL_NAME_PROBE(world_size)
TP_DETAIL_NAME_PROBE(agree_on_stop)
TP_DETAIL_NAME_PROBE(sum_across_processes)
TP_DETAIL_NAME_PROBE(end_epoch)
TP_DETAIL_NAME_PROBE(batches_per_step)
// (start: concepts/input.hpp)

// What for_each_optimizer is called with in the concept: any callable taking an optimizer.
struct any_optimizer_visitor {
  void operator()(auto&) const {}
};

template <class D, class Tower>
concept builds_replicas = requires(D& d, Tower& tower) {
  { d.build(tower) };
};
}  // namespace tp::detail

namespace tp {

// The replicas a distribution policy D builds for a tower policy: the type of D::build(tower).
template <class D, class Tower>
using replicas_t = std::remove_cvref_t<decltype(std::declval<D&>().build(std::declval<Tower&>()))>;

// A distribution policy for Tower: its replicas expose the main tower's model and their optimizers
// (level 2 of concepts/distribution.hpp).
template <class D, class Tower>
concept distribution_policy = detail::builds_replicas<D, Tower> && requires(replicas_t<D, Tower>& r) {
  { r.main_model() } -> module_handle;
  r.for_each_optimizer(detail::any_optimizer_visitor{});
};

// Replicas of a run that spans processes: they say the rank's place, agree on when to stop and sum
// values across the processes.
template <class R>
concept multi_process_replicas = requires(R& r, const R& constant, int stop_code, bool at_epoch_end, std::vector<double>& values) {
  { constant.is_chief() } -> std::convertible_to<bool>;
  { constant.world_size() } -> std::convertible_to<int>;
  { r.agree_on_stop(stop_code, at_epoch_end) } -> std::convertible_to<int>;
  r.sum_across_processes(values);
};

// Replicas whose optimizer state may be spread over the processes, each saving its shard as its
// part of a checkpoint.
template <class R, class Tower>
concept shards_state = requires(R& r, const R& constant, Tower& tower, const c10::IValue& options, const state_parts& parts,
                                 const std::string& source) {
  { constant.state_is_sharded() } -> std::convertible_to<bool>;
  { r.optimizer_options(tower) } -> std::convertible_to<c10::IValue>;
  { r.optimizer_part() } -> std::convertible_to<c10::IValue>;
  { constant.optimizer_part_pieces(0) } -> std::convertible_to<std::vector<state_piece>>;
  r.load_checkpoint_optimizer(tower, detail::any_optimizer_visitor{});
  r.load_checkpoint_parts(tower, options, parts, source, detail::any_optimizer_visitor{});
};

// Replicas whose parameters may be spread over the processes between steps, gathered whole on
// request.
template <class R>
concept gathers_parameters = requires(R& r, const R& constant) {
  r.gather_parameters();
  { constant.parameters_are_sharded() } -> std::convertible_to<bool>;
  { constant.parameter_rows() } -> std::convertible_to<c10::IValue>;
  { constant.sharded_parameters() } -> std::convertible_to<c10::IValue>;
  r.load_sharded_parameters(c10::impl::GenericDict(c10::StringType::get(), c10::AnyType::get()));
};

// Replicas with start(): called once training starts, to bring every tower to the main one.
template <class R>
concept synced_at_start = requires(R& r) { r.start(); };

// Replicas with end_epoch(epoch): work at each epoch's end, before its after_epoch hooks.
template <class R>
concept epoch_end_work = requires(R& r, int epoch) { r.end_epoch(epoch); };

// Replicas that say how many batches the default step takes from the input (batches_per_step()).
template <class R>
concept counts_batches = requires(const R& r) {
  { r.batches_per_step() } -> std::convertible_to<int>;
};

// A distribution policy whose replicas also run the default step (run_step) on batches of Input.
template <class D, class Tower, class Input>
concept stepping_distribution =
    distribution_policy<D, Tower> && requires(replicas_t<D, Tower>& r, Tower& tower, Input& input) {
      { r.run_step(tower, input) } -> std::same_as<torch::Tensor>;
    };

namespace detail {
// replicas_t, formed only where std::conditional_t picks it (a trainer whose parts break a rule
// holds a placeholder instead).
template <class D, class Tower>
struct replicas_of {
  using type = replicas_t<D, Tower>;
};

// The optional capabilities: a member that names one must be all of it (through variables: see
// check_callback).
template <class R>
constexpr void check_replica_capabilities() {
  constexpr bool half_multi_process = (names_member_is_chief<R> || names_member_world_size<R> ||
                                       names_member_agree_on_stop<R> || names_member_sum_across_processes<R>) &&
                                      !multi_process_replicas<R>;
  static_assert(!half_multi_process,
                "tp rule [distribution_policy: many processes]: replicas with any of is_chief(), "
                "world_size(), agree_on_stop(int, bool) and sum_across_processes(std::vector<double>&) "
                "must have all four: a run across processes needs each (see MultiProcess)");
  constexpr bool bad_start = names_member_start<R> && !synced_at_start<R>;
  static_assert(!bad_start,
                "tp rule [distribution_policy: start]: the replicas' start must be callable as "
                "start(); the trainer calls it when training starts");
  constexpr bool bad_end_epoch = names_member_end_epoch<R> && !epoch_end_work<R>;
  static_assert(!bad_end_epoch,
                "tp rule [distribution_policy: end_epoch]: the replicas' end_epoch must be callable "
                "as end_epoch(int epoch); the trainer calls it at each epoch's end");
  constexpr bool bad_count = names_member_batches_per_step<R> && !counts_batches<R>;
  static_assert(!bad_count,
                "tp rule [distribution_policy: batches_per_step]: the replicas' batches_per_step must be "
                "callable as batches_per_step() const, returning an int");
}

// Each check returns whether its rules hold (see check_callback), and checks a rule only once
// the rules it rests on hold.
template <class D, class Tower>
constexpr bool check_distribution() {
  if constexpr (!tower_policy<Tower>) {
    return false;  // check_tower_policy names the rule
  } else {
    static_assert(builds_replicas<D, Tower>,
                  "tp rule [distribution_policy: build]: a distribution policy must have "
                  "`build(tower_policy)` returning the replicas it trains (see SingleDevice)");
    if constexpr (builds_replicas<D, Tower>) {
      using R = replicas_t<D, Tower>;
      constexpr bool has_main_model = requires(R& r) {
        { r.main_model() } -> module_handle;
      };
      static_assert(has_main_model,
                    "tp rule [distribution_policy: main_model]: the replicas that build() returns "
                    "must have main_model(), returning the main tower's model as a module handle");
      constexpr bool has_optimizers = requires(R& r) { r.for_each_optimizer(any_optimizer_visitor{}); };
      static_assert(!has_main_model || has_optimizers,
                    "tp rule [distribution_policy: for_each_optimizer]: the replicas that build() "
                    "returns must have for_each_optimizer(f), calling f on each optimizer they hold "
                    "(on none, if they hold none): checkpoints save the optimizers through it");
      if constexpr (distribution_policy<D, Tower>) check_replica_capabilities<R>();
    }
    return distribution_policy<D, Tower>;
  }
}

// The rules the default step (trainer.train() with no step) rests on.
template <class D, class Tower, class Input>
constexpr bool check_default_step() {
  if constexpr (!input_policy<Input> || !check_distribution<D, Tower>()) {
    return false;  // check_input or check_distribution names the rule
  } else if constexpr (!check_trainable_tower<Tower, batch_t<Input>>()) {
    return false;
  } else {
    static_assert(stepping_distribution<D, Tower, Input>,
                  "tp rule [distribution_policy: run_step]: this distribution policy has no "
                  "default step for this tower and input; pass your own step to train()");
    return stepping_distribution<D, Tower, Input>;
  }
}
}  // namespace detail

}  // namespace tp
