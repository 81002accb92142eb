#!/usr/bin/env python3
"""PyTorch twin of the reference GPT's training step, the peer of bench/bench_gpt.cpp.

Same model as apps/gpt (and tests/gpt/torch_oracle.py): token + learned position embedding,
pre-LayerNorm blocks (causal multi-head attention through scaled_dot_product_attention, tanh
GELU MLP), final LayerNorm, head tied to the token embedding, mean softmax cross-entropy; AdamW
(lr 1e-3, betas 0.9/0.95, eps 1e-8, decay 0.1 on matrices and embeddings only) after clipping the
gradients to a global norm of 1; float32, eager mode. One step = zero_grad + forward + backward +
clip + optimizer step, on random byte tokens.

For each model and thread count (torch.set_num_threads) it runs `warmup` steps, then `steps` timed
steps, and prints one JSON object per case: model, threads, median and fastest step seconds, and
tokens/s of the median step. PyTorch is not a build dependency: run it with any python that has
torch, e.g. /work/venv-torch/bin/python bench/gpt_torch.py.

usage: gpt_torch.py [--steps N] [--warmup N] [--threads 1,2] [--models default,long,wide]
"""
import argparse
import json
import math
import statistics
import time

import torch
import torch.nn.functional as F

# name: (layers, d_model, heads, seq_len, batch); the same table as bench/bench_gpt.cpp.
MODELS = {
    "default": (4, 128, 4, 128, 4),
    "long": (4, 128, 4, 1024, 1),
    "wide": (6, 256, 4, 256, 4),
}
VOCAB = 256


class Block(torch.nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.o = torch.nn.Linear(d, d)
        self.ln2 = torch.nn.LayerNorm(d)
        self.fc = torch.nn.Linear(d, 4 * d)
        self.proj = torch.nn.Linear(4 * d, d)

    def forward(self, x):
        B, L, D = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(D, dim=-1)
        shape = (B, L, self.heads, D // self.heads)
        q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, L, D)
        x = x + self.o(a)
        return x + self.proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(torch.nn.Module):
    def __init__(self, layers, d, heads, seq):
        super().__init__()
        self.wte = torch.nn.Embedding(VOCAB, d)
        self.wpe = torch.nn.Embedding(seq, d)
        self.blocks = torch.nn.ModuleList(Block(d, heads) for _ in range(layers))
        self.lnf = torch.nn.LayerNorm(d)
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * layers) if name.endswith(("o.weight", "proj.weight")) else 0.02
                torch.nn.init.normal_(p, 0.0, std)

    def forward(self, idx, targets):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for b in self.blocks:
            x = b(x)
        logits = self.lnf(x) @ self.wte.weight.t()
        return F.cross_entropy(logits.view(-1, VOCAB), targets.view(-1))


def measure(name, threads, steps, warmup):
    layers, d, heads, seq, batch = MODELS[name]
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    model = GPT(layers, d, heads, seq)
    decay = [p for p in model.parameters() if p.dim() == 2]
    rest = [p for p in model.parameters() if p.dim() != 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": rest, "weight_decay": 0.0}],
                            lr=1e-3, betas=(0.9, 0.95), eps=1e-8)
    times = []
    for i in range(warmup + steps):
        idx = torch.randint(0, VOCAB, (batch, seq))
        tgt = torch.randint(0, VOCAB, (batch, seq))
        t = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(idx, tgt)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if i >= warmup:
            times.append(time.perf_counter() - t)
    med = statistics.median(times)
    return {"model": name, "layers": layers, "d_model": d, "heads": heads, "seq_len": seq, "batch": batch,
            "threads": threads, "median_step_s": med, "fastest_step_s": min(times),
            "tokens_per_s": batch * seq / med, "torch": torch.__version__}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--models", default=",".join(MODELS))
    a = ap.parse_args()
    for name in a.models.split(","):
        for t in (int(x) for x in a.threads.split(",")):
            print(json.dumps(measure(name, t, a.steps, a.warmup)), flush=True)


if __name__ == "__main__":
    main()
