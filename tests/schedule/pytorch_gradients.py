#!/usr/bin/env python3
"""Runs tpipe's PyTorch-dialect lowered programs in PyTorch 2.15 (gloo, CPU threads as ranks) and
compares the gradients with the same model trained without a pipeline.

Usage: pytorch_gradients.py TPIPE_PLAN
Exit 0: every schedule's gradients equal the reference (and the control run without REDUCE_GRAD
is M times off, showing the comparison can fail); 1: a mismatch; 77: skipped (no PyTorch 2.15).
"""
import os
import subprocess
import sys
import tempfile

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
    from torch.distributed.pipelining import PipelineStage
    from torch.distributed.pipelining import schedules as S
except Exception as e:  # noqa: BLE001
    print(f"SKIP: PyTorch with torch.distributed.pipelining is not importable ({e})")
    sys.exit(77)
if not hasattr(S, "WAIT_SEND_F"):
    print(f"SKIP: torch {torch.__version__} predates PyTorch 2.15 (no WAIT_SEND_F)")
    sys.exit(77)

P, M, WIDTH, BATCH = 2, 4, 8, 8
CASES = [("1f1b", 1, "loop"), ("gpipe", 1, "loop"), ("zb-h1", 1, "loop"), ("interleaved", 2, "loop"),
         ("interleaved-zb", 2, "loop"), ("zb-v", 2, "v"), ("dualpipe-v", 2, "v")]


def layers(n):
    torch.manual_seed(0)
    return [torch.nn.Linear(WIDTH, WIDTH) for _ in range(n)]


def data():
    g = torch.Generator().manual_seed(1)
    return torch.randn(BATCH, WIDTH, generator=g), torch.randn(BATCH, WIDTH, generator=g)


def loss_fn(out, target):
    return torch.nn.functional.mse_loss(out, target)


def reference(n):
    """Gradients without a pipeline: mean over microbatches of each microbatch's mean loss."""
    model = torch.nn.Sequential(*layers(n))
    x, y = data()
    loss = sum(loss_fn(model(xm), ym) for xm, ym in zip(x.chunk(M), y.chunk(M))) / M
    loss.backward()
    return [p.grad.clone() for p in model.parameters()]


def stages_of(rank, per_rank, style):
    n = P * per_rank
    return [rank + v * P for v in range(per_rank)] if style == "loop" else [rank, n - 1 - rank]


def worker(rank, csv_path, per_rank, style, init, out):
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=P)
    n = P * per_rank
    mods = layers(n)
    stages = [PipelineStage(mods[s], s, n, torch.device("cpu")) for s in stages_of(rank, per_rank, style)]
    sched = S._PipelineScheduleRuntime(stages, M, loss_fn=loss_fn)
    sched._load_csv(csv_path, format="compute_comms")
    x, y = data()
    sched.step(x if 0 in stages_of(rank, per_rank, style) else None, target=y)
    grads = {s: [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in mods[s].parameters()]
             for s in stages_of(rank, per_rank, style)}
    torch.save(grads, f"{out}.{rank}")
    dist.barrier()
    dist.destroy_process_group()


def run(csv_path, per_rank, style, tmp, tag):
    init = f"file://{tmp}/init.{tag}"
    out = f"{tmp}/grads.{tag}"
    mp.start_processes(worker, args=(csv_path, per_rank, style, init, out), nprocs=P, start_method="spawn")
    got = {}
    for r in range(P):
        got.update(torch.load(f"{out}.{r}"))
    return [g for s in range(P * per_rank) for g in got[s]]


def main():
    plan = sys.argv[1]
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, per_rank, style in CASES:
            path = os.path.join(tmp, f"{name}.csv")
            subprocess.run([plan, "simulate", "--schedule", name, "--stages", str(P), "--microbatches", str(M),
                            "--json", "--csv", path, "--lowered", "--pytorch"], check=True, stdout=subprocess.DEVNULL)
            ref = reference(P * per_rank)
            got = run(path, per_rank, style, tmp, name)
            worst = max((g - r).abs().max().item() for g, r in zip(got, ref))
            ok = worst < 1e-5
            # Control: the same program without REDUCE_GRAD (what tpipe wrote before) must be M x off.
            rows = [[c for c in line.rstrip("\r\n").split(",") if "REDUCE_GRAD" not in c] for line in open(path, newline="")]
            bare = os.path.join(tmp, f"{name}.bare.csv")
            with open(bare, "w", newline="") as f:
                f.write("".join(",".join(r) + "\r\n" for r in rows))
            off = run(bare, per_rank, style, tmp, name + ".bare")
            ratio = max((o.abs().max() / r.abs().max()).item() for o, r in zip(off, ref))
            print(f"{'ok  ' if ok else 'FAIL'} {name} P={P} M={M}: max |grad - reference| = {worst:.2e}; "
                  f"without REDUCE_GRAD the gradients are {ratio:.2f}x the reference")
            failures += not ok or abs(ratio - M) > 1e-3
    print(f"torch {torch.__version__}: {len(CASES) - failures}/{len(CASES)} schedules exact")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
