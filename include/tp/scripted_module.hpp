#pragma once
// ScriptedModule: a TorchScript module (torch.jit.script or torch.jit.trace in Python, then
// .save("model.pt")) as a LibTorch C++ module, so that tp trains it like one written in C++:
//
//   auto desc = tp::model_desc([] { return tp::ScriptedModule("model.pt"); })
//                   .tower_function([](const tp::TowerContext&, tp::ScriptedModule& m, const Batch& b) {
//                     return torch::nn::functional::cross_entropy(m->forward(b.data), b.target);
//                   })
//                   .optimizer([](tp::ScriptedModule& m) { return torch::optim::SGD(m->parameters(), 0.1); });
//   ...
//   trainer.model()->save("trained.pt");    // Python's torch.jit.load and C++'s torch::jit::load run it
//
// The TorchScript module's parameters and buffers (BatchNorm's running statistics) are shared,
// not copied: they are registered on this module, and on mirrors of its submodules, under the
// names of Python's state_dict ("features.0.weight"). So the optimizer updates, device moves,
// channels-last, checkpoints and copies between towers all reach the tensors TorchScript
// computes with. train()/eval() set both. Each call of the tower policy's make_model() loads the
// file again, so every tower has its own copy.
//
// forward runs the TorchScript graph without the graph executor's optimizations, op by op as
// eager PyTorch runs them. The optimizing executor's fuser compiles CPU kernels with LLVM at
// run time: LibTorch 2.6 on Debian 13 spent over 5 minutes in LLVM code generation on a 6-32-1
// tanh MLP before its first optimized step. optimize(true) turns the optimizations back on.
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/script.h>

namespace tp {

namespace detail {
// Registers a TorchScript module's own parameters and buffers on `mirror`, and mirrors of its
// submodules as children, sharing every tensor.
inline void mirror_scripted(const torch::jit::Module& scripted, torch::nn::Module& mirror) {
  for (const auto& p : scripted.named_parameters(/*recurse=*/false)) mirror.register_parameter(p.name, p.value, p.value.requires_grad());
  for (const auto& b : scripted.named_buffers(/*recurse=*/false)) mirror.register_buffer(b.name, b.value);
  for (const auto& child : scripted.named_children()) {
    auto sub = std::make_shared<torch::nn::Module>(child.name);
    mirror_scripted(child.value, *sub);
    mirror.register_module(child.name, sub);
  }
}

inline torch::jit::Module load_scripted(const std::string& path) {
  try {
    return torch::jit::load(path);
  } catch (const c10::Error& e) {
    throw std::invalid_argument("tp::ScriptedModule: cannot load the TorchScript file '" + path +
                                "'; save one from Python with torch.jit.script(model).save(path). LibTorch said: " +
                                e.what_without_backtrace());
  }
}
}  // namespace detail

// The module behind ScriptedModule (LibTorch's Impl): the TorchScript module's parameters and
// buffers as its own, its forward as forward().
class ScriptedModuleImpl : public torch::nn::Module {
 public:
  explicit ScriptedModuleImpl(const std::string& path) : ScriptedModuleImpl(detail::load_scripted(path)) {}
  explicit ScriptedModuleImpl(torch::jit::Module scripted) : torch::nn::Module("ScriptedModule"), scripted_(std::move(scripted)) {
    if (!scripted_.find_method("forward"))
      throw std::invalid_argument("tp::ScriptedModule: the TorchScript module has no forward method");
    detail::mirror_scripted(scripted_, *this);
    scripted_.train(is_training());
  }

  // Whether forward runs the graph executor's optimizations (fusion); off by default.
  ScriptedModuleImpl& optimize(bool on) {
    optimize_ = on;
    return *this;
  }

  // One tensor in, one tensor out: the usual classifier or regressor.
  torch::Tensor forward(torch::Tensor input) {
    auto out = forward_values({std::move(input)});
    if (!out.isTensor()) throw std::invalid_argument("tp::ScriptedModule: forward returned a " + out.tagKind() + ", not a tensor; call forward_values");
    return out.toTensor();
  }
  // Any inputs and outputs, as TorchScript values.
  c10::IValue forward_values(std::vector<c10::IValue> inputs) {
    const torch::jit::GraphOptimizerEnabledGuard optimizations(optimize_);  // this thread, this call
    return scripted_.forward(std::move(inputs));
  }

  void train(bool on = true) override {
    torch::nn::Module::train(on);
    scripted_.train(on);
  }

  // The module as a TorchScript file, with the weights it has now. (Module's own save, into an
  // archive, stays visible beside it: clang warns when one hides the other.)
  using torch::nn::Module::save;
  void save(const std::string& path) const { scripted_.save(path); }
  // The TorchScript module itself.
  torch::jit::Module& scripted() noexcept { return scripted_; }

 private:
  torch::jit::Module scripted_;
  bool optimize_ = false;
};
TORCH_MODULE(ScriptedModule);

}  // namespace tp
