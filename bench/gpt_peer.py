#!/usr/bin/env python3
"""The Python peer of examples/gpt.cpp: nanoGPT's GPT and recipe in PyTorch, for side-by-side
timing (bench/gpt.sh), and the check that tp's exported weights load into it.

  gpt_peer.py train DATA_DIR [--iters N] [nanoGPT's flags with dashes]   prints each step's time
  gpt_peer.py score CKPT DATA_DIR --eval-iters N --batch-size B --seed S
        loads CKPT (tp's or nanoGPT's ckpt.pt) into this GPT with load_state_dict(strict=True)
        and prints its mean loss on the val windows tp's evaluation uses (tp::data::fixed_windows
        with seed S + 1), to compare with tp's own val loss.

The model has nanoGPT's parameter names and shapes (transformer.wte.weight, ..., lm_head.weight,
tied to wte); written for this project, not copied from nanoGPT.
"""
import argparse
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class LayerNorm(nn.Module):
    def __init__(self, n, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.bias = nn.Parameter(torch.zeros(n)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_attn = nn.Linear(c.n_embd, 3 * c.n_embd, bias=c.bias)
        self.c_proj = nn.Linear(c.n_embd, c.n_embd, bias=c.bias)
        self.attn_dropout = nn.Dropout(c.dropout)
        self.resid_dropout = nn.Dropout(c.dropout)
        self.n_head, self.n_embd, self.dropout = c.n_head, c.n_embd, c.dropout
        self.fused = hasattr(F, "scaled_dot_product_attention")
        if not self.fused:  # PyTorch 1: the mask, kept out of the state_dict
            self.register_buffer("mask", torch.ones(c.block_size, c.block_size, dtype=torch.bool).triu(1), persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        if self.fused:
            y = F.scaled_dot_product_attention(q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.mask[:T, :T], float("-inf"))
            y = self.attn_dropout(F.softmax(att, dim=-1)) @ v
        return self.resid_dropout(self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C)))


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c_fc = nn.Linear(c.n_embd, 4 * c.n_embd, bias=c.bias)
        self.c_proj = nn.Linear(4 * c.n_embd, c.n_embd, bias=c.bias)
        self.dropout = nn.Dropout(c.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(F.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln_1 = LayerNorm(c.n_embd, c.bias)
        self.attn = CausalSelfAttention(c)
        self.ln_2 = LayerNorm(c.n_embd, c.bias)
        self.mlp = MLP(c)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.config = c
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(c.vocab_size, c.n_embd), wpe=nn.Embedding(c.block_size, c.n_embd), drop=nn.Dropout(c.dropout),
            h=nn.ModuleList([Block(c) for _ in range(c.n_layer)]), ln_f=LayerNorm(c.n_embd, c.bias)))
        self.lm_head = nn.Linear(c.n_embd, c.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * c.n_layer))
            elif ".ln_" in name:
                nn.init.ones_(p) if name.endswith("weight") else nn.init.zeros_(p)
            elif name.endswith("bias"):
                nn.init.zeros_(p)
            else:
                nn.init.normal_(p, 0.0, 0.02)

    def forward(self, idx, targets=None):
        T = idx.size(1)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(torch.arange(T, device=idx.device)))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        return logits if targets is None else F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def token_file(path):
    data = open(path, "rb").read()
    return torch.frombuffer(bytearray(data), dtype=torch.int16).to(torch.int64) & 0xFFFF


# tp::data::window_offset: SplitMix64 over (seed, draw, index), the same offsets as tp's.
M = (1 << 64) - 1


def splitmix64(state):
    state = (state + 0x9E3779B97F4A7C15) & M
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
    return state, z ^ (z >> 31)


def window_offset(seed, draw, index, tokens, length):
    state = (seed ^ ((0xD1B54A32D192ED03 * (draw + 1)) & M)) & M
    state ^= (0x9FB21C651E98DF25 * (index + 1)) & M
    state, _ = splitmix64(state)
    state, r = splitmix64(state)
    return (r * (tokens - length + 1)) >> 64


def model_config(args, vocab_size):
    return argparse.Namespace(n_layer=args.n_layer, n_head=args.n_head, n_embd=args.n_embd, block_size=args.block_size,
                              vocab_size=vocab_size, dropout=args.dropout, bias=args.bias)


def train(args):
    torch.manual_seed(args.seed)
    data = token_file(f"{args.data_dir}/train.bin")
    vocab = int(data.max()) + 1 if args.vocab_size == 0 else args.vocab_size
    model = GPT(model_config(args, vocab))
    decay = [p for p in model.parameters() if p.dim() >= 2]
    keep = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay}, {"params": keep, "weight_decay": 0.0}],
                                  lr=args.learning_rate, betas=(0.9, args.beta2))

    def lr_at(it):
        if it < args.warmup_iters:
            return args.learning_rate * (it + 1) / (args.warmup_iters + 1)
        if it > args.lr_decay_iters:
            return args.min_lr
        ratio = (it - args.warmup_iters) / (args.lr_decay_iters - args.warmup_iters)
        return args.min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (args.learning_rate - args.min_lr)

    device = torch.device(args.device)
    model.to(device)
    data = data.pin_memory() if device.type == "cuda" else data
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.bf16)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    warm = max(1, args.iters // 10)
    last = time.perf_counter()
    for it in range(args.iters):
        if it == warm:
            sync()
            start = time.perf_counter()
        for group in optimizer.param_groups:
            group["lr"] = lr_at(it)
        ix = torch.randint(len(data) - args.block_size, (args.batch_size,))
        x = torch.stack([data[i:i + args.block_size] for i in ix]).to(device, non_blocking=True)
        y = torch.stack([data[i + 1:i + 1 + args.block_size] for i in ix]).to(device, non_blocking=True)
        with autocast:
            loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        lossf = loss.item()  # as nanoGPT: its line costs every step one sync (free on a CPU)
        now = time.perf_counter()
        print(f"iter {it}: loss {lossf:.4f}, time {(now - last) * 1000:.2f}ms", flush=True)
        last = now
    sync()
    seconds = time.perf_counter() - start
    if args.save:  # nanoGPT's layout, for `score`
        torch.save({"model": model.state_dict(), "model_args": vars(model.config), "iter_num": args.iters}, args.save)
    print(f"peer: {args.iters} steps on {device}, {(args.iters - warm) / seconds:.2f} steps/s after the first {warm}, "
          f"{seconds / (args.iters - warm) * 1000:.2f} ms a step, {torch.get_num_threads()} threads, bf16 {args.bf16}")


def score(args):
    ckpt = torch.load(args.ckpt, map_location="cpu")
    c = argparse.Namespace(**ckpt["model_args"])
    model = GPT(c)
    # nanoGPT on PyTorch 1 keeps its causal masks in the state_dict (attn.bias): not weights
    state = {k.removeprefix("_orig_mod."): v for k, v in ckpt["model"].items() if not k.endswith(".attn.bias")}
    model.load_state_dict(state, strict=True)
    model.eval()
    val = token_file(f"{args.data_dir}/val.bin")
    count = args.eval_iters * args.batch_size
    offsets = [window_offset(args.seed + 1, 0, i, len(val), c.block_size + 1) for i in range(count)]
    losses = []
    with torch.no_grad():
        for b in range(args.eval_iters):
            rows = offsets[b * args.batch_size:(b + 1) * args.batch_size]
            x = torch.stack([val[o:o + c.block_size] for o in rows])
            y = torch.stack([val[o + 1:o + 1 + c.block_size] for o in rows])
            losses.append(model(x, y).item())
    print(f"val loss {sum(losses) / len(losses):.6f} (step {ckpt['iter_num']}, {args.eval_iters} batches)")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train")
    t.add_argument("data_dir")
    t.add_argument("--iters", type=int, default=300)
    for name, value in dict(n_layer=4, n_head=4, n_embd=128, block_size=64, batch_size=12, vocab_size=0, learning_rate=1e-3, min_lr=1e-4,
                            warmup_iters=100, lr_decay_iters=2000, weight_decay=0.1, beta2=0.99, grad_clip=1.0, dropout=0.0, seed=1337).items():
        t.add_argument("--" + name.replace("_", "-"), type=type(value), default=value)
    t.add_argument("--bias", action="store_true")
    t.add_argument("--device", default="cpu")
    t.add_argument("--bf16", action="store_true", help="autocast to bfloat16, as nanoGPT on a GPU")
    t.add_argument("--save", help="write the trained weights there as a ckpt.pt in nanoGPT's layout")
    s = sub.add_parser("score")
    s.add_argument("ckpt")
    s.add_argument("data_dir")
    s.add_argument("--eval-iters", type=int, default=200)
    s.add_argument("--batch-size", type=int, default=12)
    s.add_argument("--seed", type=int, default=1337)
    args = p.parse_args()
    train(args) if args.command == "train" else score(args)


if __name__ == "__main__":
    sys.exit(main())
