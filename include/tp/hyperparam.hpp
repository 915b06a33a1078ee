#pragma once
// Named hyperparameters: a name, and how to read and set the value on a trainer (tensorpack's
// HyperParam). Setters (callbacks/scheduled_hyperparam.hpp, warmup.hpp, reduce_on_plateau.hpp,
// human_hyperparam.hpp) change them during training and put their values as scalars.
//
//   tp::learning_rate()     every parameter group of every optimizer (every tower's replica)
//   tp::momentum()          SGD's, RMSprop's and LARS's momentum; beta1 of Adam, AdamW, NAdam,
//                           RAdam and LAMB
//   tp::weight_decay()      SGD, Adam, AdamW, RMSprop, Adagrad, NAdam, RAdam, LARS, LAMB
//   tp::hyperparam("dropout", get, set)      any value of the user's: get(trainer), set(trainer, v)
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

#include <torch/optim.h>

#include <tp/checkpoint/state_tree.hpp>
#include <tp/optim/lamb.hpp>
#include <tp/optim/lars.hpp>
#include <tp/optim/nadam.hpp>
#include <tp/optim/radam.hpp>

namespace tp {

// A named hyperparameter: how to read its value from a trainer and how to set it; made by
// tp::hyperparam and the functions below.
template <class Get, class Set>
struct HyperParam {
  std::string name;
  Get get;  // get(trainer) -> double
  Set set;  // set(trainer, double)
};

template <class Get, class Set>
HyperParam<Get, Set> hyperparam(std::string name, Get get, Set set) {
  return {std::move(name), std::move(get), std::move(set)};
}

namespace detail {
// For a setter's checkpoint: the value itself, for a hyperparameter that lives outside the
// optimizer (the optimizer's own state holds the others).
template <class Param, class Trainer>
void save_hyperparam(Param& param, Trainer& trainer, state_tree& out) {
  out.put("value", param.get(trainer));
}
template <class Param, class Trainer>
void load_hyperparam(Param& param, Trainer& trainer, const state_tree& in) {
  param.set(trainer, in.real("value"));
}
}  // namespace detail

namespace detail {
// A hyperparameter stored in every parameter group's options of every optimizer. `field`
// returns a pointer to it in one options object, or nullptr if that optimizer has none.
template <class Field>
auto option_hyperparam(std::string name, Field field) {
  auto get = [name, field](auto& trainer) {
    double value = 0;
    bool found = false;
    trainer.replicas().for_each_optimizer([&](auto& optimizer) {
      for (auto& group : optimizer.param_groups())
        if (!found) {
          const double* p = field(group.options());
          if (!p) throw std::invalid_argument("tp::" + name + "(): this optimizer has no " + name + " tp knows; use tp::hyperparam(name, get, set)");
          value = *p;
          found = true;
        }
    });
    if (!found) throw std::invalid_argument("tp::" + name + "(): the trainer has no optimizer");
    return value;
  };
  auto set = [name, field](auto& trainer, double value) {
    trainer.replicas().for_each_optimizer([&](auto& optimizer) {
      for (auto& group : optimizer.param_groups()) {
        double* p = field(group.options());
        if (!p) throw std::invalid_argument("tp::" + name + "(): this optimizer has no " + name + " tp knows; use tp::hyperparam(name, get, set)");
        *p = value;
      }
    });
  };
  return hyperparam(std::move(name), get, set);
}

template <class Options, class F>
double* field_of(torch::optim::OptimizerOptions& options, F&& f) {
  auto* typed = dynamic_cast<Options*>(&options);
  return typed ? &f(*typed) : nullptr;
}
}  // namespace detail

// The learning rate of every parameter group of every optimizer (every tower's replica).
inline auto learning_rate() {
  return hyperparam(
      "learning_rate",
      [](auto& trainer) {
        double value = -1;
        trainer.replicas().for_each_optimizer([&](auto& optimizer) {
          if (value < 0 && !optimizer.param_groups().empty()) value = optimizer.param_groups().front().options().get_lr();
        });
        if (value < 0) throw std::invalid_argument("tp::learning_rate(): the trainer has no optimizer");
        return value;
      },
      [](auto& trainer, double value) {
        trainer.replicas().for_each_optimizer([&](auto& optimizer) {
          for (auto& group : optimizer.param_groups()) group.options().set_lr(value);
        });
      });
}

// The momentum: SGD's, RMSprop's and LARS's, and beta1 of Adam, AdamW, NAdam, RAdam and LAMB.
inline auto momentum() {
  using namespace torch::optim;
  return detail::option_hyperparam("momentum", [](OptimizerOptions& o) -> double* {
    if (auto* p = detail::field_of<SGDOptions>(o, [](SGDOptions& s) -> double& { return s.momentum(); })) return p;
    if (auto* p = detail::field_of<RMSpropOptions>(o, [](RMSpropOptions& s) -> double& { return s.momentum(); })) return p;
    if (auto* p = detail::field_of<AdamOptions>(o, [](AdamOptions& s) -> double& { return std::get<0>(s.betas()); })) return p;
    if (auto* p = detail::field_of<tp::optim::NAdamOptions>(o, [](auto& s) -> double& { return std::get<0>(s.betas()); })) return p;
    if (auto* p = detail::field_of<tp::optim::RAdamOptions>(o, [](auto& s) -> double& { return std::get<0>(s.betas()); })) return p;
    if (auto* p = detail::field_of<tp::optim::LAMBOptions>(o, [](auto& s) -> double& { return std::get<0>(s.betas()); })) return p;
    if (auto* p = detail::field_of<tp::optim::LARSOptions>(o, [](auto& s) -> double& { return s.momentum(); })) return p;
    return detail::field_of<AdamWOptions>(o, [](AdamWOptions& s) -> double& { return std::get<0>(s.betas()); });
  });
}

// The weight decay of SGD, Adam, AdamW, RMSprop, Adagrad, NAdam, RAdam, LARS and LAMB.
inline auto weight_decay() {
  using namespace torch::optim;
  return detail::option_hyperparam("weight_decay", [](OptimizerOptions& o) -> double* {
    if (auto* p = detail::field_of<SGDOptions>(o, [](SGDOptions& s) -> double& { return s.weight_decay(); })) return p;
    if (auto* p = detail::field_of<AdamOptions>(o, [](AdamOptions& s) -> double& { return s.weight_decay(); })) return p;
    if (auto* p = detail::field_of<AdamWOptions>(o, [](AdamWOptions& s) -> double& { return s.weight_decay(); })) return p;
    if (auto* p = detail::field_of<RMSpropOptions>(o, [](RMSpropOptions& s) -> double& { return s.weight_decay(); })) return p;
    if (auto* p = detail::field_of<tp::optim::NAdamOptions>(o, [](auto& s) -> double& { return s.weight_decay(); })) return p;
    if (auto* p = detail::field_of<tp::optim::RAdamOptions>(o, [](auto& s) -> double& { return s.weight_decay(); })) return p;
    if (auto* p = detail::field_of<tp::optim::LAMBOptions>(o, [](auto& s) -> double& { return s.weight_decay(); })) return p;
    if (auto* p = detail::field_of<tp::optim::LARSOptions>(o, [](auto& s) -> double& { return s.weight_decay(); })) return p;
    return detail::field_of<AdagradOptions>(o, [](AdagradOptions& s) -> double& { return s.weight_decay(); });
  });
}

}  // namespace tp
