#pragma once
// nanoGPT's GPT (karpathy/nanoGPT, model.py) in LibTorch: token and position embeddings,
// pre-LayerNorm blocks of causal self-attention and a GELU MLP, the output layer tied to the
// token embedding. The names and shapes of its parameters are nanoGPT's
// (transformer.wte.weight, transformer.h.0.attn.c_attn.weight, ...), so its state_dict loads in
// Python into nanoGPT's GPT, but for lm_head.weight, which here is transformer.wte.weight itself:
// nanogpt_state_dict() adds it, load_nanogpt_weights() checks it.
//
// The example (gpt.cpp), its tests and the benchmarks use it; gpt_peer.py is the same model in
// Python.
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>

#include <torch/torch.h>
#include <torch/version.h>

#include <tp/recompute.hpp>
#include <tp/sharded.hpp>
#include <tp/checkpoint/state_dict.hpp>

namespace gpt {

struct Config {
  std::int64_t block_size = 1024;
  std::int64_t vocab_size = 50304;
  std::int64_t n_layer = 12;
  std::int64_t n_head = 12;
  std::int64_t n_embd = 768;
  double dropout = 0.0;
  bool bias = false;  // in the Linear layers and LayerNorms

  void check() const {
    const auto positive = [](std::int64_t v, const char* name) {
      if (v < 1) throw std::invalid_argument(std::string("gpt: ") + name + " must be >= 1, not " + std::to_string(v));
    };
    positive(block_size, "block_size");
    positive(vocab_size, "vocab_size");
    positive(n_layer, "n_layer");
    positive(n_head, "n_head");
    positive(n_embd, "n_embd");
    if (n_embd % n_head != 0)
      throw std::invalid_argument("gpt: n_embd (" + std::to_string(n_embd) + ") must be a multiple of n_head (" + std::to_string(n_head) + ")");
    if (!(dropout >= 0 && dropout < 1)) throw std::invalid_argument("gpt: dropout must be in [0, 1), not " + std::to_string(dropout));
  }
};

// LayerNorm with an optional bias (torch.nn.LayerNorm has both or neither).
struct LayerNormImpl : torch::nn::Module {
  torch::Tensor weight, bias;
  LayerNormImpl(std::int64_t n, bool with_bias) {
    weight = register_parameter("weight", torch::ones({n}));
    if (with_bias) bias = register_parameter("bias", torch::zeros({n}));
  }
  torch::Tensor forward(const torch::Tensor& x) { return torch::layer_norm(x, {weight.size(0)}, weight, bias, 1e-5); }
};
TORCH_MODULE(LayerNorm);

struct CausalSelfAttentionImpl : torch::nn::Module {
  torch::nn::Linear c_attn, c_proj;
  torch::nn::Dropout attn_dropout, resid_dropout;
  std::int64_t n_head, n_embd;
  double dropout;
  torch::Tensor mask;  // above the diagonal: where a query must not look (LibTorch 1.x)

  explicit CausalSelfAttentionImpl(const Config& c)
      : c_attn(register_module("c_attn", torch::nn::Linear(torch::nn::LinearOptions(c.n_embd, 3 * c.n_embd).bias(c.bias)))),
        c_proj(register_module("c_proj", torch::nn::Linear(torch::nn::LinearOptions(c.n_embd, c.n_embd).bias(c.bias)))),
        attn_dropout(register_module("attn_dropout", torch::nn::Dropout(c.dropout))),
        resid_dropout(register_module("resid_dropout", torch::nn::Dropout(c.dropout))),
        n_head(c.n_head),
        n_embd(c.n_embd),
        dropout(c.dropout) {}

  torch::Tensor forward(const torch::Tensor& x) {
    const auto B = x.size(0), T = x.size(1), C = x.size(2);
    auto qkv = c_attn(x).split(n_embd, 2);
    const auto heads = [&](const torch::Tensor& t) { return t.view({B, T, n_head, C / n_head}).transpose(1, 2); };
    auto q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);
#if TORCH_VERSION_MAJOR >= 2
    auto y = at::scaled_dot_product_attention(q, k, v, {}, is_training() ? dropout : 0.0, /*is_causal=*/true);
#else
    if (!mask.defined() || mask.size(0) < T || mask.device() != x.device())
      mask = torch::ones({T, T}, torch::TensorOptions(torch::kBool).device(x.device())).triu(1);
    auto att = q.matmul(k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(k.size(-1))));
    att = att.masked_fill(mask.slice(0, 0, T).slice(1, 0, T), -std::numeric_limits<float>::infinity());
    auto y = attn_dropout(torch::softmax(att, -1)).matmul(v);
#endif
    return resid_dropout(c_proj(y.transpose(1, 2).contiguous().view({B, T, C})));
  }
};
TORCH_MODULE(CausalSelfAttention);

struct MLPImpl : torch::nn::Module {
  torch::nn::Linear c_fc, c_proj;
  torch::nn::Dropout dropout;
  explicit MLPImpl(const Config& c)
      : c_fc(register_module("c_fc", torch::nn::Linear(torch::nn::LinearOptions(c.n_embd, 4 * c.n_embd).bias(c.bias)))),
        c_proj(register_module("c_proj", torch::nn::Linear(torch::nn::LinearOptions(4 * c.n_embd, c.n_embd).bias(c.bias)))),
        dropout(register_module("dropout", torch::nn::Dropout(c.dropout))) {}
  torch::Tensor forward(const torch::Tensor& x) { return dropout(c_proj(torch::gelu(c_fc(x)))); }
};
TORCH_MODULE(MLP);

// nanoGPT's initialisation of one parameter (its name relative to a block or to the model):
// N(0, 0.02) for the Linear and Embedding weights, zero biases, LayerNorms at 1 and 0, and
// N(0, 0.02 / sqrt(2 n_layer)) for the projections into the residual stream.
inline void initialise(const std::string& name, torch::Tensor& t, const Config& c) {
  torch::NoGradGuard no_grad;
  if (name.ends_with("c_proj.weight")) t.normal_(0.0, 0.02 / std::sqrt(2.0 * static_cast<double>(c.n_layer)));
  else if (name.starts_with("ln_") || name.find(".ln_") != std::string::npos) name.ends_with("weight") ? t.fill_(1.0) : t.zero_();
  else if (name.ends_with("bias")) t.zero_();
  else t.normal_(0.0, 0.02);
}

struct BlockImpl : torch::nn::Module {
  LayerNorm ln_1, ln_2;
  CausalSelfAttention attn;
  MLP mlp;
  explicit BlockImpl(const Config& c)
      : ln_1(register_module("ln_1", LayerNorm(c.n_embd, c.bias))),
        ln_2(nullptr),
        attn(register_module("attn", CausalSelfAttention(c))),
        mlp(nullptr) {
    ln_2 = register_module("ln_2", LayerNorm(c.n_embd, c.bias));  // nanoGPT's order: ln_1, attn, ln_2, mlp
    mlp = register_module("mlp", MLP(c));
    // Initialised here, in the block: a run that builds the model sharded (MultiProcess's
    // build_sharded) keeps only its row of the block once it is built.
    for (auto& p : named_parameters()) initialise(p.key(), p.value(), c);
  }
  torch::Tensor forward(torch::Tensor x) {
    x = x + attn(ln_1(x));
    return x + mlp(ln_2(x));
  }
};
TORCH_MODULE(Block);

struct TransformerImpl : torch::nn::Module {
  torch::nn::Embedding wte, wpe;
  torch::nn::Dropout drop;
  torch::nn::ModuleList h;
  LayerNorm ln_f;
  explicit TransformerImpl(const Config& c)
      : wte(register_module("wte", torch::nn::Embedding(c.vocab_size, c.n_embd))),
        wpe(register_module("wpe", torch::nn::Embedding(c.block_size, c.n_embd))),
        drop(register_module("drop", torch::nn::Dropout(c.dropout))),
        h(register_module("h", torch::nn::ModuleList())),
        ln_f(nullptr) {
    // Each block a unit of parameter sharding (tp/sharded.hpp): a plain block unless the run
    // shards parameters, and the names are the block's own either way.
    for (std::int64_t i = 0; i < c.n_layer; ++i) h->push_back(tp::Sharded<Block>(Block(c)));
    ln_f = register_module("ln_f", LayerNorm(c.n_embd, c.bias));
  }
};
TORCH_MODULE(Transformer);

struct GPTImpl : torch::nn::Module {
  Config config;
  Transformer transformer;
  bool recompute = false;  // each block's activations recomputed in backward (tp::recompute)

  explicit GPTImpl(const Config& c) : config((c.check(), c)), transformer(register_module("transformer", Transformer(c))) {
    // The parameters outside the blocks (the blocks initialise their own).
    for (auto& p : named_parameters())
      if (!p.key().starts_with("transformer.h.")) initialise(p.key(), p.value(), c);
  }

  // Logits [B, T, vocab_size] for token ids [B, T] (T <= block_size).
  torch::Tensor forward(const torch::Tensor& idx) {
    const auto T = idx.size(1);
    if (T > config.block_size)
      throw std::invalid_argument("gpt: a sequence of " + std::to_string(T) + " tokens is longer than block_size " + std::to_string(config.block_size));
    const auto pos = torch::arange(T, torch::TensorOptions(torch::kLong).device(idx.device()));
    auto x = transformer->drop(transformer->wte(idx) + transformer->wpe(pos));
    for (const auto& module : *transformer->h) {
      auto block = std::dynamic_pointer_cast<tp::ShardedImpl<Block>>(module);
      x = recompute && is_training() ? tp::recompute([block](const torch::Tensor& in) { return block->forward(in); }, x) : block->forward(x);
    }
    x = transformer->ln_f(x);
    return torch::nn::functional::linear(x, transformer->wte->weight);  // lm_head, tied to wte
  }

  // Parameters without the position embedding, as nanoGPT counts them.
  std::int64_t parameter_count() const { return tp::whole_parameter_count(*this) - transformer->wpe->weight.numel(); }
};
TORCH_MODULE(GPT);

// The mean cross-entropy of the next tokens (nanoGPT's loss).
inline torch::Tensor loss(const torch::Tensor& logits, const torch::Tensor& targets) {
  return torch::nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
}

// The model's state_dict as nanoGPT's GPT has it: lm_head.weight beside transformer.wte.weight.
inline c10::impl::GenericDict nanogpt_state_dict(const GPT& model) {
  auto dict = tp::state_dict_of(*model);
  dict.insert("lm_head.weight", model->transformer->wte->weight.detach());
  return dict;
}

// Loads weights nanoGPT's GPT saved (a ckpt.pt, with '_orig_mod.' prefixes from torch.compile or
// not, or a state_dict file): every name and shape must fit, and lm_head.weight must be the
// token embedding (nanoGPT ties them).
inline void load_nanogpt_weights(GPT& model, const std::filesystem::path& path) {
  const auto content = tp::detail::read_torch_save(path);
  const auto* model_entry = content.is_dict() ? content.find("model") : nullptr;
  const auto& saved = model_entry && model_entry->is_dict() ? *model_entry : content;
  bool compiled = false;
  for (const auto& entry : saved.entries())
    if (entry.first.type() == tp::detail::py_value::kind::string && entry.first.as_string().starts_with("_orig_mod.")) compiled = true;
  const auto report = tp::load_state_dict(*model, content, tp::StateDictOptions().strict(false).prefix(compiled ? "_orig_mod." : ""), path.string());
  std::string problems;
  for (const auto& name : report.missing_keys) problems += " missing " + name + ";";
  for (const auto& name : report.unexpected_keys)
    if (name != "lm_head.weight" && !name.ends_with(".attn.bias")) problems += " unexpected " + name + ";";  // attn.bias: PyTorch 1's mask
  if (!problems.empty()) throw tp::checkpoint_error(path.string() + " does not fit this GPT:" + problems);
  const auto* head = saved.find((compiled ? "_orig_mod." : "") + std::string("lm_head.weight"));
  if (head && head->type() == tp::detail::py_value::kind::tensor && !head->tensor().equal(model->transformer->wte->weight.detach().cpu()))
    throw tp::checkpoint_error(path.string() + ": lm_head.weight differs from transformer.wte.weight; this GPT ties them, as nanoGPT does");
}

}  // namespace gpt
