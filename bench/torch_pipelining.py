#!/usr/bin/env python3
"""The libtorch GPT's PyTorch twin (apps/libtorch_gpt/twin.py) trained by PyTorch's own
pipelining (torch.distributed.pipelining: PipelineStage and a schedule) over gloo, one process
per rank, for the tokens/s beside train_libtorch_gpt's pipelined runs (bench/pipelining_vs_torch.sh).

    python torch_pipelining.py --schedule 1f1b --layers 4 --d-model 256 --seq-len 256 --batch 8 \
        --microbatches 8 --steps 12 --threads 1

Schedules: 1f1b (Schedule1F1B, a stage per rank), interleaved (ScheduleInterleaved1F1B),
interleaved-zb (ScheduleInterleavedZeroBubble), zb-v (ScheduleZBVZeroBubble); the last three run
two model chunks per rank (4 for 2 ranks, placed as PyTorch places them: loop or V).
The model is cut as train_libtorch_gpt cuts it: layers spread evenly over the chunks, the
embeddings on the first, the head on the last. Training as twin.py: AdamW, mean cross entropy
over random windows of the corpus, no gradient clipping (train_libtorch_gpt clips none either).
--check compares the losses with twin.py's non-pipelined run of the same model, seed and data.

Prints one JSON line (from rank 0); tokens_per_s leaves out the first step (warm-up), as
train_libtorch_gpt does.
"""
import argparse
import importlib.util
import json
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
import torch.nn.functional as F
from torch.distributed import pipelining as pp

HERE = os.path.dirname(os.path.abspath(__file__))
TWIN = os.path.join(HERE, "..", "apps", "libtorch_gpt", "twin.py")

# tpipe's names (and PyTorch's) -> (schedule class, chunks per rank, placement)
SCHEDULES = {
    "1f1b": (pp.Schedule1F1B, 1, "loop"),
    "gpipe": (pp.ScheduleGPipe, 1, "loop"),
    "interleaved": (pp.ScheduleInterleaved1F1B, 2, "loop"),
    "interleaved-zb": (pp.ScheduleInterleavedZeroBubble, 2, "loop"),
    "zb-v": (pp.ScheduleZBVZeroBubble, 2, "v"),
}


def load_twin():
    spec = importlib.util.spec_from_file_location("twin", TWIN)
    twin = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(twin)
    return twin


def even_cuts(layers, chunks):
    """train_libtorch_gpt's even_cuts: module boundaries of `chunks` pieces of
    [embeddings, blocks..., head]; the first takes the embeddings, the last the head."""
    cuts, at = [0], 1
    for i in range(chunks):
        at += layers // chunks + (1 if i < layers % chunks else 0)
        cuts.append(at + 1 if i + 1 == chunks else at)
    return cuts


def chunk_ranks(chunks, ranks, placement):
    if placement == "v":  # 0..P-1 down, then P-1..0 back up
        return [s if s < ranks else 2 * ranks - 1 - s for s in range(chunks)]
    return [s % ranks for s in range(chunks)]


def batches(c, text, gen):
    """twin.py's sampler: `batch` random windows of seq_len + 1 bytes per step."""
    while True:
        at = torch.randint(0, text.numel() - c.seq_len - 1, (c.batch,), generator=gen)
        window = torch.stack([text[s:s + c.seq_len + 1] for s in at.tolist()])
        yield window[:, :-1].contiguous(), window[:, 1:].contiguous()


def whole_model(c, twin):
    """twin.py's model, built with twin.py's seeding so that the weights are the same."""
    torch.manual_seed(c.seed)
    return nn.Sequential(twin.Embeddings(c), *[twin.Block(c) for _ in range(c.layers)], twin.Head(c))


def worker(rank, c, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(c.threads)
    dist.init_process_group("gloo", rank=rank, world_size=c.ranks)
    twin = load_twin()
    cls, per_rank, placement = SCHEDULES[c.schedule]
    chunks = c.ranks * per_rank
    # Every process builds the whole model from the seed (the same weights as twin.py's), keeps
    # its chunks; the rest is garbage.
    model = whole_model(c, twin)
    cuts = even_cuts(c.layers, chunks)
    owner = chunk_ranks(chunks, c.ranks, placement)
    mine = [s for s in range(chunks) if owner[s] == rank]
    stages = [pp.PipelineStage(nn.Sequential(*list(model)[cuts[s]:cuts[s + 1]]), s, chunks, torch.device("cpu"))
              for s in mine]
    del model
    params = [p for st in stages for p in st.submod.parameters()]
    optimizer = torch.optim.AdamW(params, lr=c.lr)

    def loss_fn(logits, targets):  # the microbatch's mean; the schedule divides the sum by M
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))

    schedule = cls(stages[0] if per_rank == 1 else stages, c.microbatches, loss_fn=loss_fn)
    has_first = 0 in mine
    has_last = chunks - 1 in mine
    text = torch.frombuffer(bytearray(open(c.data, "rb").read()), dtype=torch.uint8).long()
    data = batches(c, text, torch.Generator().manual_seed(c.seed))  # every rank draws alike
    step_losses, start = [], None
    for step in range(c.steps):
        if step == 1:
            dist.barrier()
            start = time.perf_counter()
        inputs, targets = next(data)
        optimizer.zero_grad()
        losses = []
        args = (inputs,) if has_first else ()
        schedule.step(*args, target=targets if has_last else None, losses=losses)
        optimizer.step()
        # The batch's mean loss (the mean of the microbatches' means: equal microbatches), known
        # on the last chunk's rank; summed over the ranks like train_libtorch_gpt does.
        loss = torch.tensor([sum(x.item() for x in losses) / c.microbatches if has_last else 0.0], dtype=torch.float64)
        dist.all_reduce(loss)
        step_losses.append(loss.item())
    dist.barrier()
    seconds = time.perf_counter() - start if start else float("nan")
    if rank == 0:
        out.put({"transport": "torch.distributed.pipelining", "torch": torch.__version__, "schedule": c.schedule,
                 "class": cls.__name__, "ranks": c.ranks, "chunks": chunks, "microbatches": c.microbatches,
                 "threads": torch.get_num_threads(), "steps": c.steps, "losses": step_losses,
                 "first_loss": step_losses[0], "last_loss": step_losses[-1],
                 "tokens_per_s": c.batch * c.seq_len * (c.steps - 1) / seconds})
    dist.destroy_process_group()


def plain_losses(c):
    """twin.py's non-pipelined training with the same seed and data: the reference of --check."""
    torch.set_num_threads(c.threads)
    twin = load_twin()
    model = whole_model(c, twin)
    optimizer = torch.optim.AdamW(model.parameters(), lr=c.lr)
    text = torch.frombuffer(bytearray(open(c.data, "rb").read()), dtype=torch.uint8).long()
    data = batches(c, text, torch.Generator().manual_seed(c.seed))
    losses = []
    for _ in range(c.steps):
        inputs, targets = next(data)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(inputs).reshape(-1, 256), targets.reshape(-1))
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--schedule", default="1f1b", choices=sorted(SCHEDULES))
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--microbatches", type=int, default=8)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=1, help="intra-op threads per process")
    p.add_argument("--data", default=os.path.join(HERE, "..", "apps", "gpt", "data", "tiny_corpus.txt"))
    p.add_argument("--check", action="store_true", help="compare the losses with twin.py's plain run")
    p.add_argument("--check-tol", type=float, default=1e-4)
    c = p.parse_args()
    chunks = c.ranks * SCHEDULES[c.schedule][1]

    def refuse(what):
        print(f"torch_pipelining.py: {what}", file=sys.stderr)
        sys.exit(2)

    if c.ranks < 2:
        refuse(f"--ranks {c.ranks}: a pipeline needs at least 2 ranks")
    if c.layers < chunks:
        refuse(f"--layers {c.layers} for {chunks} model chunks ({c.schedule} on {c.ranks} ranks): every chunk "
               f"needs a layer; raise --layers to {chunks} or more")
    if c.microbatches < 1 or c.batch % c.microbatches:
        refuse(f"--microbatches {c.microbatches} must divide --batch {c.batch} into equal microbatches")
    if c.steps < 2:
        refuse(f"--steps {c.steps}: the first step warms up, give 2 or more")
    if c.threads < 1:
        refuse(f"--threads {c.threads}: give 1 or more intra-op threads per process")
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=worker, args=(r, c, port, out)) for r in range(c.ranks)]
    for pr in procs:
        pr.start()
    result = None
    while result is None:
        try:
            result = out.get(timeout=5)
        except Exception:  # queue.Empty: is every worker still alive?
            if any(pr.exitcode not in (None, 0) for pr in procs):
                for pr in procs:
                    pr.kill()
                refuse("a pipeline process failed (its error is above)")
    for pr in procs:
        pr.join()
    if c.check:
        ref = plain_losses(c)
        worst = max(abs(a - b) / abs(b) for a, b in zip(result["losses"], ref))
        result.update(check_reference_losses=ref, check_loss_rel=worst, check_ok=worst <= c.check_tol)
    print(json.dumps(result))
    if c.check and not result["check_ok"]:
        sys.exit(3)


if __name__ == "__main__":
    main()
