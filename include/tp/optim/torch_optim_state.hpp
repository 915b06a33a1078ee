#pragma once
// An optimizer's state in torch.optim's own state_dict format, both ways, so that Python's
// optimizer.load_state_dict takes what tp saved and tp takes what Python saved:
//
//   {"state": {0: {"exp_avg": ..., "exp_avg_sq": ..., "step": tensor(12.)}, 1: {...}},
//    "param_groups": [{"lr": 0.001, "betas": (0.9, 0.999), ..., "params": [0, 1, ...]}]}
//
// Parameters are numbered across the groups in order, as torch.optim numbers them: a Python
// module of the same structure, whose optimizer was built from model.parameters(), lists them
// in the same order. Known: LibTorch's SGD, Adam, AdamW, Adagrad, RMSprop and tp's NAdam and
// RAdam, whose updates are torch.optim's. Another optimizer (LAMB, LARS, LBFGS, a user's) has no
// Python twin: to_torch_optim_state gives nothing, and a checkpoint keeps LibTorch's own archive.
//
// Loading is all or nothing: every group, key, shape and type is checked against this
// optimizer first, and a file of another optimizer (SGD's state into Adam) is an error naming
// what does not fit. Python keeps `step` as a float32 tensor; so does tp here, exact up to 2^24.
#include <optional>
#include <string>

#include <ATen/core/Dict.h>
#include <ATen/core/ivalue.h>
#include <torch/optim/optimizer.h>

#include <tp/compiled_part.hpp>
#include <tp/checkpoint/state_tree.hpp>

namespace tp::optim {

namespace detail {
using dict = c10::impl::GenericDict;
inline dict new_dict() { return dict(c10::StringType::get(), c10::AnyType::get()); }
}  // namespace detail

// The name torch.optim gives this optimizer ("Adam"), or nothing when it has no Python twin.
TP_DECL std::optional<std::string> torch_optim_name(const torch::optim::Optimizer& optimizer);

// The optimizer's state as torch.optim's state_dict(), or nothing when it has no Python twin.
TP_DECL std::optional<c10::IValue> to_torch_optim_state(const torch::optim::Optimizer& optimizer);

// Loads torch.optim's state_dict() (as read from a torch.save file) into `optimizer`, all or
// nothing; `source` names the file in errors. Throws checkpoint_error.
TP_DECL void load_torch_optim_state(torch::optim::Optimizer& optimizer, const c10::IValue& saved, const std::string& source);

}  // namespace tp::optim

#if TP_DEFINE_COMPILED_PART
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <utility>
#include <vector>

#include <ATen/core/List.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include <tp/checkpoint/checkpoint_error.hpp>
#include <tp/optim/checks.hpp>
#include <tp/optim/nadam.hpp>
#include <tp/optim/radam.hpp>

namespace tp::optim {

namespace detail {



// Reads one param group or one parameter's state, naming what is missing or of the wrong kind.
class py_fields {
 public:
  py_fields(const c10::IValue& value, std::string where) : where_(std::move(where)) {
    if (!value.isGenericDict()) fail("is " + tp::state_tree::describe(value) + ", not a dict");
    dict_ = value.toGenericDict();
  }
  c10::IValue at(const char* key) const {
    const auto found = find(key);
    if (!found) fail("has no '" + std::string(key) + "'" + kind_hint());
    return *found;
  }
  bool has(const char* key) const {
    const auto found = find(key);
    return found && !found->isNone();
  }
  double real(const char* key) const { return number(at(key), key); }
  bool boolean(const char* key) const {
    const auto& v = at(key);
    if (!v.isBool()) fail("'" + std::string(key) + "' is " + tp::state_tree::describe(v) + ", not a bool");
    return v.toBool();
  }
  std::tuple<double, double> pair(const char* key) const {
    const auto items = list(key);
    if (items.size() != 2) fail("'" + std::string(key) + "' is " + tp::state_tree::describe(at(key)) + ", not a pair");
    return {number(items[0], key), number(items[1], key)};
  }
  // A list's or tuple's items.
  std::vector<c10::IValue> list(const char* key) const {
    const auto& v = at(key);
    if (v.isList()) return v.toListRef().vec();
    if (v.isTuple()) return v.toTupleRef().elements().vec();
    fail("'" + std::string(key) + "' is " + tp::state_tree::describe(v) + ", not a list");
  }
  torch::Tensor tensor(const char* key, const torch::Tensor& like) const {
    const auto& v = at(key);
    if (!v.isTensor()) fail("'" + std::string(key) + "' is " + tp::state_tree::describe(v) + ", not a tensor");
    const auto& t = v.toTensor();
    if (t.sizes() != like.sizes())
      fail("'" + std::string(key) + "' has shape " + c10::str(t.sizes()) + " but the parameter's is " + c10::str(like.sizes()) +
           ": the file is the state of another model's optimizer");
    if (!t.is_floating_point()) fail("'" + std::string(key) + "' is " + c10::str(t.scalar_type()) + ", not floating point");
    return t.to(like.options(), /*non_blocking=*/false, /*copy=*/true).contiguous(like.suggest_memory_format());
  }
  // torch.optim's step counts: a tensor (PyTorch >= 1.12), or a number (older, and RMSprop).
  std::int64_t count(const char* key) const {
    const auto& v = at(key);
    const double n = v.isTensor() && v.toTensor().numel() == 1 ? v.toTensor().item<double>() : number(v, key);
    if (!(n >= 0) || n != static_cast<double>(static_cast<std::int64_t>(n))) fail("'" + std::string(key) + "' is not a whole count");
    return static_cast<std::int64_t>(n);
  }
  // A number or a one-element tensor (as Python keeps NAdam's mu_product).
  double scalar(const char* key) const {
    const auto& v = at(key);
    return v.isTensor() && v.toTensor().numel() == 1 ? v.toTensor().item<double>() : number(v, key);
  }
  // Keys this reader does not know, which the optimizer would silently drop.
  void only(std::initializer_list<const char*> known) const {
    for (const auto& entry : dict_) {
      const std::string key = entry.key().isString() ? entry.key().toStringRef() : tp::state_tree::describe(entry.key());
      bool ok = false;
      for (const char* k : known) ok = ok || (entry.key().isString() && key == k);
      if (!ok) fail("has '" + key + "', which " + kind_ + "'s state has not: the file is another optimizer's state");
    }
  }
  const c10::impl::GenericDict& dict() const noexcept { return dict_; }
  void set_kind(std::string kind) { kind_ = std::move(kind); }
  [[noreturn]] void fail(const std::string& what) const { throw checkpoint_error(where_ + " " + what); }

 private:
  std::optional<c10::IValue> find(const char* key) const {
    if (!dict_.keyType()->isSubtypeOf(*c10::StringType::get())) return std::nullopt;
    const auto found = dict_.find(std::string(key));
    if (found == dict_.end()) return std::nullopt;
    return found->value();
  }
  double number(const c10::IValue& v, const char* key) const {
    if (v.isDouble()) return v.toDouble();
    if (v.isInt()) return static_cast<double>(v.toInt());
    if (v.isBool()) return v.toBool() ? 1.0 : 0.0;
    fail("'" + std::string(key) + "' is " + tp::state_tree::describe(v) + ", not a number");
  }
  std::string kind_hint() const { return kind_.empty() ? "" : ", which " + kind_ + "'s has: the file is another optimizer's state"; }
  c10::impl::GenericDict dict_ = tp::state_tree::new_dict();
  std::string where_;
  std::string kind_;
};

// Python's forms of two values several families keep: betas as a tuple, and the step count as
// the float tensor torch.optim stores.
inline c10::IValue python_betas(const std::tuple<double, double>& betas) {
  return c10::ivalue::Tuple::create(std::get<0>(betas), std::get<1>(betas));
}
inline torch::Tensor python_step(std::int64_t step) { return torch::tensor(static_cast<float>(step)); }

// One optimizer family: its name in torch.optim, its group keys and its per-parameter state.
struct sgd_family {
  using options = torch::optim::SGDOptions;
  using state = torch::optim::SGDParamState;
  static constexpr const char* name = "SGD";
  static void write(dict& g, const options& o) {
    g.insert("lr", o.lr()), g.insert("momentum", o.momentum()), g.insert("dampening", o.dampening());
    g.insert("weight_decay", o.weight_decay()), g.insert("nesterov", o.nesterov()), g.insert("maximize", false);
  }
  static void read(const py_fields& g, options& o) {
    o.lr(g.real("lr")).momentum(g.real("momentum")).dampening(g.real("dampening")).weight_decay(g.real("weight_decay")).nesterov(g.boolean("nesterov"));
  }
  static void write(dict& s, const state& st) { s.insert("momentum_buffer", st.momentum_buffer()); }
  static std::unique_ptr<state> read(const py_fields& s, const torch::Tensor& p) {
    s.only({"momentum_buffer"});
    if (!s.has("momentum_buffer")) return nullptr;  // Python's SGD without momentum keeps None
    auto st = std::make_unique<state>();
    st->momentum_buffer(s.tensor("momentum_buffer", p));
    return st;
  }
};

// Adam and AdamW: the same options and state, another name.
template <class Options, class State, const char* Name>
struct adam_like_family {
  using options = Options;
  using state = State;
  static constexpr const char* name = Name;
  static void write(dict& g, const options& o) {
    g.insert("lr", o.lr()), g.insert("betas", python_betas(o.betas()));
    g.insert("eps", o.eps()), g.insert("weight_decay", o.weight_decay()), g.insert("amsgrad", o.amsgrad()), g.insert("maximize", false);
  }
  static void read(const py_fields& g, options& o) {
    o.lr(g.real("lr")).betas(g.pair("betas")).eps(g.real("eps")).weight_decay(g.real("weight_decay")).amsgrad(g.boolean("amsgrad"));
  }
  static void write(dict& s, const state& st) {
    s.insert("step", python_step(st.step()));
    s.insert("exp_avg", st.exp_avg()), s.insert("exp_avg_sq", st.exp_avg_sq());
    if (st.max_exp_avg_sq().defined()) s.insert("max_exp_avg_sq", st.max_exp_avg_sq());
  }
  static std::unique_ptr<state> read(const py_fields& s, const torch::Tensor& p) {
    s.only({"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"});
    auto st = std::make_unique<state>();
    st->step(s.count("step")).exp_avg(s.tensor("exp_avg", p)).exp_avg_sq(s.tensor("exp_avg_sq", p));
    if (s.has("max_exp_avg_sq")) st->max_exp_avg_sq(s.tensor("max_exp_avg_sq", p));
    return st;
  }
};
inline constexpr char adam_name[] = "Adam";
inline constexpr char adamw_name[] = "AdamW";
using adam_family = adam_like_family<torch::optim::AdamOptions, torch::optim::AdamParamState, adam_name>;
using adamw_family = adam_like_family<torch::optim::AdamWOptions, torch::optim::AdamWParamState, adamw_name>;

struct adagrad_family {
  using options = torch::optim::AdagradOptions;
  using state = torch::optim::AdagradParamState;
  static constexpr const char* name = "Adagrad";
  static void write(dict& g, const options& o) {
    g.insert("lr", o.lr()), g.insert("lr_decay", o.lr_decay()), g.insert("weight_decay", o.weight_decay());
    g.insert("initial_accumulator_value", o.initial_accumulator_value()), g.insert("eps", o.eps()), g.insert("maximize", false);
  }
  static void read(const py_fields& g, options& o) {
    o.lr(g.real("lr")).lr_decay(g.real("lr_decay")).weight_decay(g.real("weight_decay"));
    o.initial_accumulator_value(g.real("initial_accumulator_value")).eps(g.real("eps"));
  }
  static void write(dict& s, const state& st) { s.insert("step", python_step(st.step())), s.insert("sum", st.sum()); }
  static std::unique_ptr<state> read(const py_fields& s, const torch::Tensor& p) {
    s.only({"step", "sum"});
    auto st = std::make_unique<state>();
    st->step(s.count("step")).sum(s.tensor("sum", p));
    return st;
  }
};

struct rmsprop_family {
  using options = torch::optim::RMSpropOptions;
  using state = torch::optim::RMSpropParamState;
  static constexpr const char* name = "RMSprop";
  static void write(dict& g, const options& o) {
    g.insert("lr", o.lr()), g.insert("alpha", o.alpha()), g.insert("eps", o.eps()), g.insert("weight_decay", o.weight_decay());
    g.insert("momentum", o.momentum()), g.insert("centered", o.centered()), g.insert("maximize", false);
  }
  static void read(const py_fields& g, options& o) {
    o.lr(g.real("lr")).alpha(g.real("alpha")).eps(g.real("eps")).weight_decay(g.real("weight_decay")).momentum(g.real("momentum"));
    o.centered(g.boolean("centered"));
  }
  static void write(dict& s, const state& st) {
    s.insert("step", python_step(st.step())), s.insert("square_avg", st.square_avg());
    if (st.momentum_buffer().defined()) s.insert("momentum_buffer", st.momentum_buffer());
    if (st.grad_avg().defined()) s.insert("grad_avg", st.grad_avg());
  }
  static std::unique_ptr<state> read(const py_fields& s, const torch::Tensor& p) {
    s.only({"step", "square_avg", "momentum_buffer", "grad_avg"});
    auto st = std::make_unique<state>();
    st->step(s.count("step")).square_avg(s.tensor("square_avg", p));
    if (s.has("momentum_buffer")) st->momentum_buffer(s.tensor("momentum_buffer", p));
    if (s.has("grad_avg")) st->grad_avg(s.tensor("grad_avg", p));
    return st;
  }
};

struct nadam_family {
  using options = NAdamOptions;
  using state = NAdamParamState;
  static constexpr const char* name = "NAdam";
  static void write(dict& g, const options& o) {
    g.insert("lr", o.lr()), g.insert("betas", python_betas(o.betas()));
    g.insert("eps", o.eps()), g.insert("weight_decay", o.weight_decay()), g.insert("momentum_decay", o.momentum_decay());
  }
  static void read(const py_fields& g, options& o) {
    o.lr(g.real("lr")).betas(g.pair("betas")).eps(g.real("eps")).weight_decay(g.real("weight_decay")).momentum_decay(g.real("momentum_decay"));
  }
  static void write(dict& s, const state& st) {
    s.insert("step", python_step(st.step()));
    s.insert("mu_product", torch::tensor(static_cast<float>(st.mu_product())));  // float32, as Python keeps it
    s.insert("exp_avg", st.exp_avg()), s.insert("exp_avg_sq", st.exp_avg_sq());
  }
  static std::unique_ptr<state> read(const py_fields& s, const torch::Tensor& p) {
    s.only({"step", "mu_product", "exp_avg", "exp_avg_sq"});
    auto st = std::make_unique<state>();
    const double mu_product = s.scalar("mu_product");  // Python keeps it as a float32 tensor
    st->step(s.count("step")).mu_product(mu_product).exp_avg(s.tensor("exp_avg", p)).exp_avg_sq(s.tensor("exp_avg_sq", p));
    return st;
  }
};

struct radam_family {
  using options = RAdamOptions;
  using state = RAdamParamState;
  static constexpr const char* name = "RAdam";
  static void write(dict& g, const options& o) {
    g.insert("lr", o.lr()), g.insert("betas", python_betas(o.betas()));
    g.insert("eps", o.eps()), g.insert("weight_decay", o.weight_decay());
  }
  static void read(const py_fields& g, options& o) { o.lr(g.real("lr")).betas(g.pair("betas")).eps(g.real("eps")).weight_decay(g.real("weight_decay")); }
  static void write(dict& s, const state& st) {
    s.insert("step", python_step(st.step()));
    s.insert("exp_avg", st.exp_avg()), s.insert("exp_avg_sq", st.exp_avg_sq());
  }
  static std::unique_ptr<state> read(const py_fields& s, const torch::Tensor& p) {
    s.only({"step", "exp_avg", "exp_avg_sq"});
    auto st = std::make_unique<state>();
    st->step(s.count("step")).exp_avg(s.tensor("exp_avg", p)).exp_avg_sq(s.tensor("exp_avg_sq", p));
    return st;
  }
};

// Calls f(family{}) for the family of the optimizer's options; false when none is known.
template <class F>
bool visit_family(const torch::optim::Optimizer& optimizer, F&& f) {
  if (optimizer.param_groups().empty()) return false;
  const auto& options = optimizer.param_groups().front().options();
  bool found = false;
  auto try_one = [&](auto family) {
    using options_t = typename decltype(family)::options;
    if (!found && dynamic_cast<const options_t*>(&options)) found = true, f(family);
  };
  try_one(sgd_family{}), try_one(adamw_family{}), try_one(adam_family{}), try_one(adagrad_family{});
  try_one(rmsprop_family{}), try_one(nadam_family{}), try_one(radam_family{});
  return found;
}

}  // namespace detail

TP_DECL std::optional<std::string> torch_optim_name(const torch::optim::Optimizer& optimizer) {
  std::optional<std::string> name;
  detail::visit_family(optimizer, [&](auto family) { name = decltype(family)::name; });
  return name;
}

TP_DECL std::optional<c10::IValue> to_torch_optim_state(const torch::optim::Optimizer& optimizer) {
  std::optional<c10::IValue> out;
  detail::visit_family(optimizer, [&](auto family) {
    using family_t = decltype(family);
    c10::impl::GenericDict state(c10::IntType::get(), c10::AnyType::get());
    c10::impl::GenericList groups(c10::AnyType::get());
    std::int64_t index = 0;
    for (const auto& group : optimizer.param_groups()) {
      auto g = detail::new_dict();
      family_t::write(g, static_cast<const typename family_t::options&>(group.options()));
      // A list of Any, not c10::List<int64_t>: LibTorch pickles the latter through
      // torch.jit._pickle.build_intlist, which PyTorch 2.6's torch.load refuses.
      c10::impl::GenericList params(c10::AnyType::get());
      for (const auto& p : group.params()) {
        const auto found = optimizer.state().find(detail::param_state_key(optimizer.state(), p));
        if (found != optimizer.state().end()) {
          auto s = detail::new_dict();
          family_t::write(s, static_cast<const typename family_t::state&>(*found->second));
          state.insert(index, s);
        }
        params.push_back(index++);
      }
      g.insert("params", params);
      groups.push_back(g);
    }
    auto all = detail::new_dict();
    all.insert("state", state);
    all.insert("param_groups", groups);
    out = c10::IValue(all);
  });
  return out;
}

TP_DECL void load_torch_optim_state(torch::optim::Optimizer& optimizer, const c10::IValue& saved, const std::string& source) {
  const bool known = detail::visit_family(optimizer, [&](auto family) {
    using family_t = decltype(family);
    const std::string kind = family_t::name;
    detail::py_fields top(saved, source + ": the optimizer state");
    const auto groups = top.list("param_groups");
    const auto state = top.at("state");
    if (!state.isGenericDict()) top.fail("has a state that is " + tp::state_tree::describe(state) + ", not a dict");
    auto& mine = optimizer.param_groups();
    if (groups.size() != mine.size())
      top.fail("has " + std::to_string(groups.size()) + " param groups but this " + kind + " has " + std::to_string(mine.size()));
    // Staged: nothing changes in the optimizer until everything has been read.
    std::vector<std::unique_ptr<torch::optim::OptimizerOptions>> options;
    std::vector<std::pair<decltype(detail::param_state_key(optimizer.state(), torch::Tensor())), std::unique_ptr<typename family_t::state>>> states;
    std::map<std::int64_t, c10::IValue> by_index;
    for (const auto& entry : state.toGenericDict()) {
      if (!entry.key().isInt()) top.fail("has a state keyed by " + tp::state_tree::describe(entry.key()) + ", not by a parameter's index");
      by_index[entry.key().toInt()] = entry.value();
    }
    std::size_t index = 0;
    for (std::size_t g = 0; g < mine.size(); ++g) {
      detail::py_fields group(groups[g], source + ": param group " + std::to_string(g) + " of the optimizer state");
      group.set_kind(kind);
      auto o = std::make_unique<typename family_t::options>(static_cast<const typename family_t::options&>(mine[g].options()));
      family_t::read(group, *o);
      if (group.has("maximize") && group.boolean("maximize")) group.fail("has maximize=True, which LibTorch's " + kind + " does not do");
      const auto params = group.list("params");
      if (params.size() != mine[g].params().size())
        group.fail("has " + std::to_string(params.size()) + " params but this " + kind + "'s group " + std::to_string(g) + " has " +
                   std::to_string(mine[g].params().size()) + " parameters: the file is the state of another model's optimizer");
      for (std::size_t i = 0; i < params.size(); ++i, ++index) {
        const auto& id = params[i];
        if (!id.isInt()) group.fail("lists a parameter that is " + tp::state_tree::describe(id) + ", not an index");
        const auto found = by_index.find(id.toInt());
        if (found == by_index.end()) continue;  // a parameter that has not stepped yet
        const auto& p = mine[g].params()[i];
        detail::py_fields one(found->second, source + ": the optimizer state of parameter " + std::to_string(index) + " (shape " +
                                                  c10::str(p.sizes()) + ")");
        one.set_kind(kind);
        if (auto s = family_t::read(one, p)) states.emplace_back(detail::param_state_key(optimizer.state(), p), std::move(s));
        by_index.erase(found);
      }
      options.push_back(std::move(o));
    }
    if (!by_index.empty())
      top.fail("has state for parameter " + std::to_string(by_index.begin()->first) + ", which none of its param groups lists");
    for (std::size_t g = 0; g < mine.size(); ++g) mine[g].set_options(std::move(options[g]));
    optimizer.state().clear();
    for (auto& [key, s] : states) optimizer.state()[key] = std::move(s);
  });
  if (!known)
    throw checkpoint_error(source + ": this optimizer has no torch.optim twin (tp reads torch.optim's SGD, Adam, AdamW, Adagrad, RMSprop, "
                                    "NAdam and RAdam); save and load it with LibTorch's own optimizer.save and load");
}

}  // namespace tp::optim
#endif
