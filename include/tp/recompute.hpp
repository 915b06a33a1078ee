#pragma once
// Recomputed activations (torch.utils.checkpoint for LibTorch): a part of a model whose
// activations are not kept for backward but computed again when backward reaches it. The part
// keeps only its inputs; its backward runs it a second time, with grad on, and backpropagates
// through that. Memory for one extra forward of the part.
//
//   torch::Tensor y = tp::recompute([block = block](const torch::Tensor& x) { return block->forward(x); }, x);
//   auto [a, b] = tp::recompute([this](const torch::Tensor& x, const torch::Tensor& m) {
//     return std::make_tuple(f(x, m), g(x));
//   }, x, mask);
//   auto ys = tp::recompute([this](const std::vector<torch::Tensor>& xs) { return h(xs); }, inputs);
//
//   // a module: register it where the block was; its forward(x) recomputes block->forward(x)
//   blocks->push_back(tp::Recomputed<torch::nn::Sequential>(torch::nn::Linear(1024, 1024), torch::nn::GELU()));
//   auto b = register_module("b", tp::Recomputed<MyBlock>(MyBlock(options)));   // b->block is the MyBlock
//
// The contract:
// - The function takes the tensors given after it (or one std::vector<torch::Tensor>) and
//   returns a torch::Tensor, a std::tuple of them or a std::vector of them; anything else is
//   refused at compile time. Other values it needs, it captures.
// - It is called again during backward, after the call that made the graph has returned: it must
//   stay valid until then. Capture by value (module holders are shared pointers, so
//   `[block = block]` or `[this]` inside a module's forward are safe); `[&]` on a local of the
//   calling function dangles.
// - It must compute the same thing when called again: the same inputs (they are saved, and
//   modifying one in place before backward is LibTorch's usual "modified by an inplace
//   operation" error), the same parameters (backward comes before the optimizer's step), and the
//   same random numbers: the CPU generator's state (and the CUDA generators' of the devices the
//   inputs are on) is saved before the first call and put back for the second, so dropout draws
//   the same masks; after backward the generators are as they were before it. If the function
//   drew random numbers and the second call does not end on the generator state the first ended
//   on, the masks were not the same and backward throws rather than return wrong gradients. This
//   is what happens when several threads draw from LibTorch's one CPU generator at once, as the
//   towers of Replicated<>::cpu(n), ParameterServer and Async on CPU do with dropout anywhere in
//   the model: keep random operations out of recomputed parts there, or use one tower per
//   process (MultiProcess) or per CUDA device (each has its own generator). A function that
//   draws nothing never touches the generators, on any policy.
// - Autocast: the second call runs under the autocast state of the first (CPU and CUDA, on or
//   off, the dtypes), so its casts are the same; tp's towers run backward outside autocast.
// - Gradients: backward returns the inputs' gradients and accumulates the parameters' the
//   function uses into their .grad, as a plain run does (bitwise the same on the CPU). When no
//   input requires grad (a first block, given the batch) the outputs are made to require grad
//   anyway, so that the parameters the function captures get theirs. When inputs require grad and
//   none of the recomputed outputs does (a function that detaches its result or runs under
//   torch::NoGradGuard), backward throws and says so.
// - Under torch::NoGradGuard or inference mode, the function is just called: nothing is saved.
// - Buffers the function updates in training (BatchNorm's running statistics) would be updated
//   a second time by the recomputation. tp::Recomputed puts its block's buffers back after it;
//   with tp::recompute, test tp::recomputing() in the function to skip such an update.
// - Double backward (create_graph) through a recomputed part is not supported.
#include <algorithm>
#include <cstddef>
#include <functional>
#include <mutex>
#include <ostream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/ivalue.h>
#include <torch/autograd.h>
#include <torch/nn/cloneable.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>
#include <torch/version.h>

namespace tp {

namespace detail {

// How deep in recomputations this thread is (a recomputed part may hold another).
inline thread_local int recompute_depth = 0;

// This thread's autocast state for CPU and CUDA, to be replayed by the recomputation.
struct autocast_state {
  bool cpu = false, cuda = false, cache = true;
  at::ScalarType cpu_dtype = at::kBFloat16, cuda_dtype = at::kHalf;

  bool any() const noexcept { return cpu || cuda; }

  // LibTorch 2.4 names the device in one set of calls (and deprecates the per-device pairs);
  // 1.13 to 2.3 have only the pairs. As in tp/precision.hpp.
  static autocast_state current() {
    autocast_state s;
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
    s.cpu = at::autocast::is_autocast_enabled(c10::DeviceType::CPU);
    s.cuda = at::autocast::is_autocast_enabled(c10::DeviceType::CUDA);
    s.cpu_dtype = at::autocast::get_autocast_dtype(c10::DeviceType::CPU);
    s.cuda_dtype = at::autocast::get_autocast_dtype(c10::DeviceType::CUDA);
#else
    s.cpu = at::autocast::is_cpu_enabled();
    s.cuda = at::autocast::is_enabled();
    s.cpu_dtype = at::autocast::get_autocast_cpu_dtype();
    s.cuda_dtype = at::autocast::get_autocast_gpu_dtype();
#endif
    s.cache = at::autocast::is_autocast_cache_enabled();
    return s;
  }
  void make_current() const {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
    at::autocast::set_autocast_dtype(c10::DeviceType::CPU, cpu_dtype);
    at::autocast::set_autocast_dtype(c10::DeviceType::CUDA, cuda_dtype);
    at::autocast::set_autocast_enabled(c10::DeviceType::CPU, cpu);
    at::autocast::set_autocast_enabled(c10::DeviceType::CUDA, cuda);
#else
    at::autocast::set_autocast_cpu_dtype(cpu_dtype);
    at::autocast::set_autocast_gpu_dtype(cuda_dtype);
    at::autocast::set_cpu_enabled(cpu);
    at::autocast::set_enabled(cuda);
#endif
    at::autocast::set_autocast_cache_enabled(cache);
  }
};

// The autocast state of the first call while alive, as an autocast scope of its own: nested, so
// that the casts of weights it caches (a weight used twice is cast once, as in the first call,
// which keeps the gradients bitwise the same) are dropped at its end and never outlive the
// step's weights.
class replay_autocast {
 public:
  explicit replay_autocast(const autocast_state& first) : outer_(autocast_state::current()) {
    active_ = first.any() || outer_.any();
    if (!active_) return;
    first.make_current();
    at::autocast::increment_nesting();
  }
  ~replay_autocast() {
    if (!active_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    outer_.make_current();
  }
  replay_autocast(const replay_autocast&) = delete;
  replay_autocast& operator=(const replay_autocast&) = delete;

 private:
  autocast_state outer_;
  bool active_ = false;
};

// The first call runs without grad: a weight cast it put in autocast's cache would have no
// history, and a later use of the same weight in the same autocast scope would then pass no
// gradient to it. So the cache is off during the first call (the casts are the same values).
class no_autocast_cache {
 public:
  explicit no_autocast_cache(bool autocast_on) : was_(at::autocast::is_autocast_cache_enabled()), active_(autocast_on && was_) {
    if (active_) at::autocast::set_autocast_cache_enabled(false);
  }
  ~no_autocast_cache() {
    if (active_) at::autocast::set_autocast_cache_enabled(was_);
  }
  no_autocast_cache(const no_autocast_cache&) = delete;
  no_autocast_cache& operator=(const no_autocast_cache&) = delete;

 private:
  bool was_, active_;
};

// The states of the generators a recomputed part may draw from: the CPU's, and the default
// generator of each CUDA device an input is on (torch.utils.checkpoint's choice).
struct random_states {
  at::Tensor cpu;
  std::vector<std::pair<c10::Device, at::Tensor>> cuda;
};

inline at::Tensor generator_state(at::Generator generator) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}
inline void set_generator_state(at::Generator generator, const at::Tensor& state) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

// at::globalContext().defaultGenerator compiles without CUDA; it is only reached for inputs
// that are on a CUDA device, so CUDA is there when it runs.
inline random_states capture_random(const std::vector<c10::Device>& cuda_devices) {
  random_states s;
  s.cpu = generator_state(at::detail::getDefaultCPUGenerator());
  for (const auto& d : cuda_devices) s.cuda.emplace_back(d, generator_state(at::globalContext().defaultGenerator(d)));
  return s;
}
inline void restore_random(const random_states& s) {
  set_generator_state(at::detail::getDefaultCPUGenerator(), s.cpu);
  for (const auto& [d, state] : s.cuda) set_generator_state(at::globalContext().defaultGenerator(d), state);
}
inline bool same_random(const random_states& a, const random_states& b) {
  if (!torch::equal(a.cpu, b.cpu) || a.cuda.size() != b.cuda.size()) return false;
  for (std::size_t i = 0; i < a.cuda.size(); ++i)
    if (!torch::equal(a.cuda[i].second, b.cuda[i].second)) return false;
  return true;
}

// What the backward of one recomputed call needs besides the inputs. Held by the autograd node
// (through an IValue capsule: a custom Function's context keeps only IValues).
struct recompute_call : torch::CustomClassHolder {
  std::function<std::vector<torch::Tensor>(const std::vector<torch::Tensor>&)> function;  // of the inputs
  std::size_t inputs = 0;             // the function's inputs; an anchor may follow them
  std::vector<bool> requires_grad;    // of each input, in the first call
  std::vector<c10::Device> cuda_devices;
  random_states before, after;        // the generators around the first call, if it drew
  bool drew = false;
  autocast_state autocast;
};

// Marks this thread as recomputing while alive (tp::recomputing()).
struct recomputing_scope {
  recomputing_scope() { ++recompute_depth; }
  ~recomputing_scope() { --recompute_depth; }
  recomputing_scope(const recomputing_scope&) = delete;
  recomputing_scope& operator=(const recomputing_scope&) = delete;
};

struct recompute_function : torch::autograd::Function<recompute_function> {
  // Runs without grad (Function::apply turns it off): nothing inside the part is kept.
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, c10::intrusive_ptr<recompute_call> call,
                                                at::TensorList tensors) {
    ctx->set_materialize_grads(false);  // an output that nothing used gets no gradient, not zeros
    std::vector<torch::Tensor> inputs(tensors.begin(), tensors.begin() + static_cast<std::ptrdiff_t>(call->inputs));
    ctx->save_for_backward(inputs);
    for (const auto& x : inputs) {
      call->requires_grad.push_back(x.requires_grad());
      if (x.is_cuda() && std::find(call->cuda_devices.begin(), call->cuda_devices.end(), x.device()) == call->cuda_devices.end())
        call->cuda_devices.push_back(x.device());
    }
    call->autocast = autocast_state::current();
    call->before = capture_random(call->cuda_devices);
    std::vector<torch::Tensor> outputs;
    {
      const no_autocast_cache no_cache(call->autocast.any());
      outputs = call->function(inputs);
    }
    call->after = capture_random(call->cuda_devices);
    // A part that drew nothing leaves the generators alone in backward: then it is safe beside
    // other threads that draw.
    call->drew = !same_random(call->before, call->after);
    if (!call->drew) call->before = call->after = {};
    for (std::size_t i = 0; i < outputs.size(); ++i)
      if (!outputs[i].defined())
        throw std::invalid_argument("tp::recompute: the function returned an undefined tensor (output " + std::to_string(i) + ")");
    if (outputs.empty()) throw std::invalid_argument("tp::recompute: the function returned no tensor");
    ctx->saved_data["call"] = at::IValue::make_capsule(std::move(call));
    return outputs;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx, torch::autograd::variable_list grads) {
    auto call = c10::static_intrusive_pointer_cast<recompute_call>(ctx->saved_data["call"].toCapsule());
    const auto saved = ctx->get_saved_variables();
    std::vector<torch::Tensor> inputs;
    bool any_input_requires_grad = false;
    for (std::size_t i = 0; i < saved.size(); ++i) {
      // Leaves of a graph of their own, so the recomputation's backward stops at them.
      auto x = saved[i].detach();
      if (call->requires_grad[i]) x.requires_grad_(true);
      any_input_requires_grad = any_input_requires_grad || call->requires_grad[i];
      inputs.push_back(std::move(x));
    }
    std::vector<torch::Tensor> outputs;
    {
      const torch::AutoGradMode grad(true);  // backward runs without grad; the recomputation needs it
      const replay_autocast autocast(call->autocast);
      const recomputing_scope recomputing;
      if (call->drew) {
        // Fork the generators: the first call's state for the recomputation, the outer
        // stream's back after it, as if backward had drawn nothing.
        const auto outer = capture_random(call->cuda_devices);
        restore_random(call->before);
        random_states end;
        try {
          outputs = call->function(inputs);
          end = capture_random(call->cuda_devices);
        } catch (...) {
          restore_random(outer);
          throw;
        }
        restore_random(outer);
        if (!same_random(end, call->after))
          throw std::runtime_error(
              "tp::recompute: the recomputation drew other random numbers than the first call (the generator ends in "
              "another state), so its dropout masks differ and its gradients would be wrong. Either another thread drew "
              "from LibTorch's CPU generator during one of the two calls (CPU towers in threads: Replicated<>::cpu, "
              "ParameterServer, Async, with random operations anywhere in the model; keep them out of recomputed parts "
              "there, or run one tower per process with MultiProcess), or the function's draws depend on something "
              "other than its inputs");
      } else {
        outputs = call->function(inputs);
      }
    }
    std::vector<torch::Tensor> roots, root_grads;
    bool any_grad = false;
    for (std::size_t i = 0; i < outputs.size() && i < grads.size(); ++i) {
      if (!grads[i].defined()) continue;
      any_grad = true;
      if (outputs[i].requires_grad()) {
        roots.push_back(outputs[i]);
        root_grads.push_back(grads[i]);
      }
    }
    if (any_grad && roots.empty() && any_input_requires_grad)
      throw std::runtime_error(
          "tp::recompute: the function's inputs require grad but, recomputed with grad on, none of its outputs does: "
          "it detaches its result or computes it under torch::NoGradGuard, so no gradient can flow through it; call it "
          "outside tp::recompute");
    // Accumulates into the .grad of the inputs' leaves and of the parameters the function uses,
    // as the plain run's backward does.
    if (!roots.empty()) torch::autograd::backward(roots, root_grads);
    torch::autograd::variable_list result{torch::Tensor()};  // for `call`
    for (const auto& x : inputs) result.push_back(x.requires_grad() ? x.grad() : torch::Tensor());
    result.emplace_back();  // for the anchor, if there is one (an undefined extra is dropped if not)
    return result;
  }
};

// One recomputed call on a list of tensors. `anchor`: when no input requires grad, add one that
// does, so that the node exists and the parameters the function captures get their gradients.
using tensor_function = std::function<std::vector<torch::Tensor>(const std::vector<torch::Tensor>&)>;
inline std::vector<torch::Tensor> recompute_list(tensor_function function,
                                                 std::vector<torch::Tensor> inputs, bool anchor) {
  if (!torch::GradMode::is_enabled()) return function(inputs);  // NoGradGuard, inference mode: nothing to save
  auto call = c10::make_intrusive<recompute_call>();
  call->function = std::move(function);
  call->inputs = inputs.size();
  bool any_requires_grad = false;
  for (const auto& x : inputs) any_requires_grad = any_requires_grad || x.requires_grad();
  if (!any_requires_grad && anchor) inputs.push_back(torch::empty({0}, torch::TensorOptions().requires_grad(true)));
  return recompute_function::apply(std::move(call), at::TensorList(inputs));
}

template <class T>
struct is_tensor_tuple : std::false_type {};
template <class... Ts>
struct is_tensor_tuple<std::tuple<Ts...>> : std::bool_constant<(std::is_same_v<Ts, torch::Tensor> && ...)> {};

template <class R>
constexpr bool is_recomputable_result =
    std::is_same_v<R, torch::Tensor> || std::is_same_v<R, std::vector<torch::Tensor>> || is_tensor_tuple<R>::value;

template <class R>
std::vector<torch::Tensor> as_tensor_list(R&& r) {
  using T = std::remove_cvref_t<R>;
  if constexpr (std::is_same_v<T, torch::Tensor>) {
    return {std::forward<R>(r)};
  } else if constexpr (std::is_same_v<T, std::vector<torch::Tensor>>) {
    return std::forward<R>(r);
  } else {
    return std::apply([](auto&&... t) { return std::vector<torch::Tensor>{std::forward<decltype(t)>(t)...}; }, std::forward<R>(r));
  }
}

template <class R>
R from_tensor_list(std::vector<torch::Tensor>&& list) {
  if constexpr (std::is_same_v<R, torch::Tensor>) {
    return std::move(list[0]);
  } else if constexpr (std::is_same_v<R, std::vector<torch::Tensor>>) {
    return std::move(list);
  } else {
    return [&]<std::size_t... I>(std::index_sequence<I...>) {
      return R{std::move(list[I])...};
    }(std::make_index_sequence<std::tuple_size_v<R>>());
  }
}

}  // namespace detail

// Whether this thread is inside a recomputation (a recomputed function's second call): for a
// function that must not repeat a side effect, such as updating running statistics.
inline bool recomputing() noexcept { return detail::recompute_depth > 0; }

// Calls f(xs...) without keeping its activations; backward calls it again (see the top).
template <class F, class... Tensors>
auto recompute(F f, const Tensors&... xs) {
  static_assert((std::is_same_v<Tensors, torch::Tensor> && ...),
                "tp::recompute: every argument after the function must be a torch::Tensor (or give one "
                "std::vector<torch::Tensor>); capture other values in the function, by value");
  static_assert(std::is_invocable_v<F&, const Tensors&...>, "tp::recompute: the function must take the tensors given after it");
  using R = std::remove_cvref_t<std::invoke_result_t<F&, const Tensors&...>>;
  static_assert(detail::is_recomputable_result<R>,
                "tp::recompute: the function must return a torch::Tensor, a std::tuple of torch::Tensor or a "
                "std::vector<torch::Tensor>: only tensors can be recomputed and given gradients");
  auto list = detail::recompute_list(
      [f = std::move(f)](const std::vector<torch::Tensor>& in) mutable {
        return [&]<std::size_t... I>(std::index_sequence<I...>) {
          return detail::as_tensor_list(f(in[I]...));
        }(std::index_sequence_for<Tensors...>());
      },
      std::vector<torch::Tensor>{xs...}, /*anchor=*/true);
  return detail::from_tensor_list<R>(std::move(list));
}

// The same for a function of a list of tensors.
template <class F>
auto recompute(F f, std::vector<torch::Tensor> xs) {
  static_assert(std::is_invocable_v<F&, const std::vector<torch::Tensor>&>,
                "tp::recompute: given a std::vector<torch::Tensor>, the function must take a const std::vector<torch::Tensor>&");
  using R = std::remove_cvref_t<std::invoke_result_t<F&, const std::vector<torch::Tensor>&>>;
  static_assert(detail::is_recomputable_result<R>,
                "tp::recompute: the function must return a torch::Tensor, a std::tuple of torch::Tensor or a "
                "std::vector<torch::Tensor>: only tensors can be recomputed and given gradients");
  auto list = detail::recompute_list(
      [f = std::move(f)](const std::vector<torch::Tensor>& in) mutable { return detail::as_tensor_list(f(in)); },
      std::move(xs), /*anchor=*/true);
  return detail::from_tensor_list<R>(std::move(list));
}

// A module whose forward(x) is block->forward(x), recomputed. Block is a module holder
// (torch::nn::Linear, torch::nn::Sequential, a TORCH_MODULE of one's own); its parameters are
// those of the wrapper, under "block.". Clones (Cloneable) are recomputed too.
template <class Block>
class RecomputedImpl : public torch::nn::Cloneable<RecomputedImpl<Block>> {
 public:
  // Builds the block from the arguments, or takes a block (sharing it with the caller).
  template <class... Args>
    requires std::is_constructible_v<Block, Args&&...>
  explicit RecomputedImpl(Args&&... args) : block(std::forward<Args>(args)...) {
    block = this->register_module("block", block);
  }

  // For clone(): a copy of the block under the same name (Cloneable then copies the values).
  void reset() override {
    if (block.is_empty()) return;
    block = this->register_module("block", Block(std::dynamic_pointer_cast<typename Block::ContainedType>(block->clone())));
  }

  torch::Tensor forward(const torch::Tensor& x) {
    // Anchor the node only when the block has something to train: a frozen block on data that
    // needs no gradient gives outputs that need none, as it would unrecomputed.
    bool trainable = false;
    for (const auto& p : block->parameters()) trainable = trainable || p.requires_grad();
    auto out = detail::recompute_list(
        [b = block](const std::vector<torch::Tensor>& in) mutable {
          if (!recomputing()) return std::vector<torch::Tensor>{b->forward(in[0])};
          // The second call would update the running statistics again: put them back. Through
          // variable_data(), which does not bump the version counter: BatchNorm's node saves the
          // running statistics (for eval-mode backward) and would refuse a changed version, though
          // in training its backward uses the batch's statistics, not them.
          auto buffers = b->buffers();
          std::vector<torch::Tensor> kept;
          for (const auto& buffer : buffers) kept.push_back(buffer.clone());
          std::vector<torch::Tensor> y{b->forward(in[0])};
          const torch::NoGradGuard no_grad;
          for (std::size_t i = 0; i < buffers.size(); ++i) buffers[i].variable_data().copy_(kept[i]);
          return y;
        },
        {x}, trainable);
    return out[0];
  }

  void pretty_print(std::ostream& stream) const override { stream << "tp::Recomputed"; }

  Block block;
};

// The module holder of RecomputedImpl (what a model registers): tp::Recomputed<Block>(args...)
// builds the block from args, or takes one.
template <class Block>
class Recomputed : public torch::nn::ModuleHolder<RecomputedImpl<Block>> {
 public:
  using torch::nn::ModuleHolder<RecomputedImpl<Block>>::ModuleHolder;
  using Impl = RecomputedImpl<Block>;
};

}  // namespace tp
