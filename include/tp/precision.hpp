#pragma once
// Precision and memory format: what a tower computes in. Options of the tower policy:
//
//   tp::model_desc(make_net).tower_function(f).optimizer(o)
//       .precision(tp::precision::bf16_mixed)   // or tp::parse_precision("bf16-mixed")
//       .channels_last()
//
// - fp32: everything in float32.
// - bf16_mixed: each tower's forward pass runs under autocast with bfloat16, on CPU and on CUDA:
//   matrix products and convolutions in bf16, the numerically touchy operations (losses,
//   softmax, norms, reductions) in fp32. Weights, gradients and optimizer state stay fp32, so
//   gradients are averaged across towers and processes in fp32: bf16's 8-bit mantissa would
//   lose the small contributions a sum of many gradients is made of. bf16 has fp32's range, so
//   there is no loss scaling. It is fast where the CPU has bf16 instructions (AVX-512 BF16,
//   AMX); elsewhere it is slower than fp32 (tp::RunEnvironment says which the CPU has).
// - fp16_mixed: autocast with float16, on CUDA only; asking for it on a CPU tower is an error.
//   fp16's range is narrow, so it comes with dynamic loss scaling (tp/loss_scaler.hpp). The
//   gradients are still fp32 (of fp32 weights), reduced while scaled, and unscaled after the
//   reduction, so every tower and rank checks the same sums for inf/NaN.
// - channels_last: the model's 4-D parameters and the batches' 4-D tensors in NHWC order, in
//   which oneDNN's convolutions run fastest. The input policies convert batches on their own
//   thread (QueueInput), not in the step.
//
// tp::autocast_scope is the autocast the towers and InferenceRunner use, for a step of one's own.
#include <stdexcept>
#include <string>
#include <string_view>

#include <torch/nn/module.h>
#include <torch/types.h>
#include <torch/version.h>

#include <tp/compiled_part.hpp>

#include <tp/batch.hpp>

namespace tp {

enum class precision { fp32, bf16_mixed, fp16_mixed };

// The precision's name as tp prints and parses it: "fp32", "bf16-mixed" or "fp16-mixed".
inline const char* precision_name(precision p) {
  switch (p) {
    case precision::bf16_mixed: return "bf16-mixed";
    case precision::fp16_mixed: return "fp16-mixed";
    default: return "fp32";
  }
}

// "fp32", "bf16-mixed" or "fp16-mixed" (Lightning's names).
inline precision parse_precision(std::string_view name) {
  for (const auto p : {precision::fp32, precision::bf16_mixed, precision::fp16_mixed})
    if (name == precision_name(p)) return p;
  throw std::invalid_argument("tp: unknown precision '" + std::string(name) + "'; give fp32, bf16-mixed or fp16-mixed");
}

// Autocast for one device type while alive, in this thread (autocast is per thread: each tower
// thread opens its own). fp32 does nothing. Scopes nest; the previous state comes back at the
// end, and the cache of casted weights is dropped when the outermost scope ends.
class autocast_scope {
 public:
  autocast_scope(precision p, c10::DeviceType device);
  ~autocast_scope();
  autocast_scope(const autocast_scope&) = delete;
  autocast_scope& operator=(const autocast_scope&) = delete;

 private:
  bool enabled() const;
  at::ScalarType get_dtype() const;
  void set(bool on, at::ScalarType dtype) const;
  bool cpu() const noexcept { return device_ == c10::DeviceType::CPU; }

  c10::DeviceType device_;
  bool active_ = false;
  bool was_enabled_ = false;
  at::ScalarType was_dtype_ = at::kFloat;
};

// What a tower policy computes in; fp32 and contiguous for a policy that does not say.
struct compute_format {
  tp::precision precision = tp::precision::fp32;
  bool channels_last = false;
};
// What a tower policy computes in: its precision() and channels_last(), where it has them.
template <class Tower>
compute_format compute_format_of(const Tower& tower) {
  compute_format format;
  if constexpr (requires { tower.precision(); }) format.precision = tower.precision();
  if constexpr (requires { tower.channels_last(); }) format.channels_last = tower.channels_last();
  return format;
}

// A batch with its 4-D tensors in channels-last order (the others as they are).
template <class B>
B channels_last_batch(B batch) {
  return map_tensors(std::move(batch), [](torch::Tensor t) { return t.dim() == 4 ? t.contiguous(torch::MemoryFormat::ChannelsLast) : t; });
}

// A module's 4-D parameters and buffers in channels-last order, in place.
TP_DECL void channels_last_module(torch::nn::Module& module);

}  // namespace tp

#if TP_DEFINE_COMPILED_PART
#include <ATen/autocast_mode.h>

namespace tp {

// LibTorch 2.4 names the device in one set of calls; 1.13 to 2.3 have a pair per device.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
TP_DECL bool autocast_scope::enabled() const { return at::autocast::is_autocast_enabled(device_); }
TP_DECL at::ScalarType autocast_scope::get_dtype() const { return at::autocast::get_autocast_dtype(device_); }
TP_DECL void autocast_scope::set(bool on, at::ScalarType dtype) const {
  at::autocast::set_autocast_dtype(device_, dtype);
  at::autocast::set_autocast_enabled(device_, on);
}
#else
TP_DECL bool autocast_scope::enabled() const {
  return cpu() ? at::autocast::is_cpu_enabled() : at::autocast::is_enabled();
}
TP_DECL at::ScalarType autocast_scope::get_dtype() const {
  return cpu() ? at::autocast::get_autocast_cpu_dtype() : at::autocast::get_autocast_gpu_dtype();
}
TP_DECL void autocast_scope::set(bool on, at::ScalarType dtype) const {
  if (cpu()) {
    at::autocast::set_autocast_cpu_dtype(dtype);
    at::autocast::set_cpu_enabled(on);
  } else {
    at::autocast::set_autocast_gpu_dtype(dtype);
    at::autocast::set_enabled(on);
  }
}
#endif

TP_DECL autocast_scope::autocast_scope(precision p, c10::DeviceType device) : device_(device) {
  if (p == precision::fp32) return;
  if (p == precision::fp16_mixed && device != c10::DeviceType::CUDA)
    throw std::invalid_argument(
        "tp: fp16-mixed precision needs a CUDA tower (CPU autocast has no fp16 with loss scaling); on CPU use bf16-mixed");
  if (device != c10::DeviceType::CPU && device != c10::DeviceType::CUDA)
    throw std::invalid_argument("tp: mixed precision runs on CPU and CUDA towers, not on " + c10::DeviceTypeName(device));
  const auto dtype = p == precision::bf16_mixed ? at::kBFloat16 : at::kHalf;
  active_ = true;
  was_enabled_ = enabled();
  was_dtype_ = get_dtype();
  set(true, dtype);
  at::autocast::increment_nesting();
}

TP_DECL autocast_scope::~autocast_scope() {
  if (!active_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  set(was_enabled_, was_dtype_);
}

TP_DECL void channels_last_module(torch::nn::Module& module) {
  torch::NoGradGuard no_grad;
  for (auto& p : module.parameters())
    if (p.dim() == 4) p.set_data(p.data().contiguous(torch::MemoryFormat::ChannelsLast));
  for (auto& b : module.buffers())
    if (b.dim() == 4) b.set_data(b.data().contiguous(torch::MemoryFormat::ChannelsLast));
}

}  // namespace tp
#endif
