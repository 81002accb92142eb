#!/usr/bin/env python3
"""The libtorch GPT of gpt.hpp written in PyTorch, trained the same way (AdamW, mean cross
entropy over random windows of a byte-level text), for the tokens/s beside the C++ runs.

    python twin.py --layers 4 --d-model 128 --heads 4 --seq-len 128 --batch 8 --steps 20 --threads 2

Prints one JSON line; tokens_per_s leaves out the first step (warm-up), as train_libtorch_gpt does.
"""
import argparse
import json
import math
import os
import time

import torch
from torch import nn
import torch.nn.functional as F


class Embeddings(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.token = nn.Embedding(256, c.d_model)
        self.position = nn.Embedding(c.seq_len, c.d_model)

    def forward(self, ids):
        return self.token(ids) + self.position(torch.arange(ids.size(1)))


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.heads = c.heads
        self.qkv = nn.Linear(c.d_model, 3 * c.d_model)
        self.out = nn.Linear(c.d_model, c.d_model)

    def forward(self, x):
        rows, tokens, d = x.shape
        q, k, v = self.qkv(x).view(rows, tokens, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        scores = q @ k.transpose(-2, -1) / math.sqrt(d // self.heads)
        allowed = torch.ones(tokens, tokens, dtype=torch.bool).tril()
        y = torch.softmax(scores.masked_fill(~allowed, float("-inf")), -1) @ v
        return self.out(y.permute(0, 2, 1, 3).reshape(rows, tokens, d))


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln1 = nn.LayerNorm(c.d_model)
        self.ln2 = nn.LayerNorm(c.d_model)
        self.attention = Attention(c)
        self.mlp = nn.Sequential(nn.Linear(c.d_model, 4 * c.d_model), nn.GELU(), nn.Linear(4 * c.d_model, c.d_model))

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class Head(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.ln = nn.LayerNorm(c.d_model)
        self.logits = nn.Linear(c.d_model, 256, bias=False)

    def forward(self, x):
        return self.logits(self.ln(x))


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--data", default=os.path.join(here, "..", "gpt", "data", "tiny_corpus.txt"))
    c = p.parse_args()
    if c.threads > 0:
        torch.set_num_threads(c.threads)
    torch.manual_seed(c.seed)
    model = nn.Sequential(Embeddings(c), *[Block(c) for _ in range(c.layers)], Head(c))
    optimizer = torch.optim.AdamW(model.parameters(), lr=c.lr)
    text = torch.frombuffer(bytearray(open(c.data, "rb").read()), dtype=torch.uint8).long()
    gen = torch.Generator().manual_seed(c.seed)
    losses, start = [], None
    for step in range(c.steps):
        if step == 1:
            start = time.perf_counter()
        at = torch.randint(0, text.numel() - c.seq_len - 1, (c.batch,), generator=gen)
        window = torch.stack([text[s:s + c.seq_len + 1] for s in at.tolist()])
        inputs, targets = window[:, :-1], window[:, 1:]
        optimizer.zero_grad()
        logits = model(inputs)
        loss = F.cross_entropy(logits.reshape(-1, 256), targets.reshape(-1))
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    seconds = time.perf_counter() - start if start else float("nan")
    print(json.dumps({"transport": "pytorch", "torch": torch.__version__, "threads": torch.get_num_threads(),
                      "steps": c.steps, "first_loss": losses[0], "last_loss": losses[-1],
                      "tokens_per_s": c.batch * c.seq_len * (c.steps - 1) / seconds}))


if __name__ == "__main__":
    main()
