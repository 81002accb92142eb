#!/usr/bin/python3
"""PyTorch oracle for the reference GPT (tests/gpt/test_torch_oracle.cpp).

Usage: torch_oracle.py DIR
Reads DIR/manifest.txt, DIR/params.f32, DIR/tokens.i32; builds the same model with torch
operations (float32), computes the mean cross-entropy and its gradients with autograd and writes
DIR/result.f64: the loss, then every parameter's gradient in the flat layout order.
"""
import math
import sys

import torch
import torch.nn.functional as F


def main(d):
    cfg, rows, seq, tensors = {}, 0, 0, []
    with open(f"{d}/manifest.txt") as f:
        for line in f:
            w = line.split()
            if not w:
                continue
            if w[0] == "config":
                for kv in w[1:]:
                    k, v = kv.split("=")
                    cfg[k] = float(v) if k == "ln_eps" else int(v)
            elif w[0] == "batch":
                rows, seq = int(w[1]), int(w[2])
            elif w[0] == "tensor":
                tensors.append((w[1], int(w[2]), [int(x) for x in w[3:]]))
    flat = torch.from_numpy(__import__("numpy").fromfile(f"{d}/params.f32", dtype="<f4").copy())
    toks = torch.from_numpy(__import__("numpy").fromfile(f"{d}/tokens.i32", dtype="<i4").astype("int64"))
    inputs = toks[: rows * seq].view(rows, seq)
    targets = toks[rows * seq:].view(rows, seq)
    P = {}
    for name, off, shape in tensors:
        n = math.prod(shape)
        P[name] = flat[off:off + n].view(*shape).clone().requires_grad_(True)

    D, H, eps = cfg["d_model"], cfg["heads"], cfg["ln_eps"]
    dh = D // H
    x = P["wte"][inputs] + P["wpe"][:seq].unsqueeze(0)
    mask = torch.ones(seq, seq, dtype=torch.bool).tril()
    for l in range(cfg["layers"]):
        p = lambda s: P[f"h.{l}.{s}"]
        h = F.layer_norm(x, (D,), p("ln1.g"), p("ln1.b"), eps)
        qkv = h @ p("attn.w_qkv") + p("attn.b_qkv")
        q, k, v = qkv.split(D, dim=-1)
        q = q.view(rows, seq, H, dh).transpose(1, 2)
        k = k.view(rows, seq, H, dh).transpose(1, 2)
        v = v.view(rows, seq, H, dh).transpose(1, 2)
        att = (q @ k.transpose(-1, -2)) / math.sqrt(dh)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        o = (att @ v).transpose(1, 2).reshape(rows, seq, D)
        x = x + o @ p("attn.w_o") + p("attn.b_o")
        h = F.layer_norm(x, (D,), p("ln2.g"), p("ln2.b"), eps)
        h = F.gelu(h @ p("mlp.w_fc") + p("mlp.b_fc"), approximate="tanh")
        x = x + h @ p("mlp.w_proj") + p("mlp.b_proj")
    x = F.layer_norm(x, (D,), P["lnf.g"], P["lnf.b"], eps)
    head = P["wte"] if cfg["tied"] else P["head"]
    logits = x @ head.t()
    loss = F.cross_entropy(logits.reshape(-1, cfg["vocab"]), targets.reshape(-1))
    loss.backward()
    out = [torch.tensor([loss.item()], dtype=torch.float64)]
    for name, _, _ in tensors:
        out.append(P[name].grad.reshape(-1).to(torch.float64))
    torch.cat(out).numpy().astype("<f8").tofile(f"{d}/result.f64")


if __name__ == "__main__":
    main(sys.argv[1])
