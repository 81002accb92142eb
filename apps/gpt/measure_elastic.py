#!/usr/bin/env python3
"""Elastic training (PipeTransformer) measured: train_gpt --elastic against the same run without
freezing, and the ablations, on CPU threads and (with --mpi) one device per MPI process.

Configurations (same model, data, global batch, steps, seed):
  baseline        --max-frozen 0: the starting pipeline throughout (nothing freezes)
  freeze only     --no-autopipe --no-autocache (frozen layers skip backward; the pipeline keeps its length)
  +AutoPipe+AutoCache (no AutoDP)  --no-autodp (the pipeline shortens, freed devices idle)
  +AutoPipe+AutoDP (no AutoCache)  --no-autocache
  all four        (AutoFreeze, AutoPipe, AutoDP, AutoCache)
Every configuration runs ROUNDS times (default 2), round-robin, so that all of them see the same
mix of quiet and busy moments on a shared machine; the table gives each one's fastest run.
Prints Markdown: end-to-end samples/s and speedup over the baseline, the predicted end-to-end
speedup (the plan's simulated throughput per interval, weighted by the interval's samples), and
the per-interval table of the full elastic run.

usage: measure_elastic.py TRAIN_GPT [--rounds R] [--plan TPIPE_PLAN] [--mpi MPIEXEC] [train_gpt flags...]
  (freeze intervals must be epochs for the --plan comparison: tpipe-plan plans per epoch)
"""
import fractions
import json
import os
import subprocess
import sys
import tempfile

CONFIGS = [
    ("baseline (no freezing)", ["--max-frozen", "0"]),
    ("freeze only", ["--no-autopipe", "--no-autocache"]),
    ("freeze + AutoPipe + AutoCache (no AutoDP)", ["--no-autodp"]),
    ("freeze + AutoPipe + AutoDP (no AutoCache)", ["--no-autocache"]),
    ("all four", []),
]


def run(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    lines = [json.loads(l) for l in out.splitlines() if l.startswith("{")]
    model = next(l["planner_model"] for l in lines if "planner_model" in l)
    intervals = [l for l in lines if "summary" not in l and "planner_model" not in l]
    return intervals, next(l for l in lines if "summary" in l), model


def predicted_seconds(intervals, batch):
    return sum(i["steps"] * batch / i["predicted_throughput"] for i in intervals)


def main():
    args = sys.argv[1:]
    gpt = args.pop(0)
    prefix = [gpt]
    transport = "threads"
    rounds = 2
    plan = None
    while args and args[0] in ("--rounds", "--plan"):
        if args[0] == "--rounds":
            rounds = int(args[1])
        else:
            plan = args[1]
        args = args[2:]
    if args and args[0] == "--mpi":
        mpiexec = args[1]
        args = args[2:]
        devices = args[args.index("--devices") + 1] if "--devices" in args else "2"
        prefix = [mpiexec, "--oversubscribe", "--allow-run-as-root", "-np", devices, gpt, "--transport", "mpi"]
        transport = "mpi"
    batch = int(args[args.index("--batch") + 1]) if "--batch" in args else 4
    best = {}
    for _ in range(rounds):
        for name, extra in CONFIGS:
            intervals, summary, model = run(prefix + ["--elastic", "--json"] + args + extra)
            if name not in best or summary["samples_per_s"] > best[name][1]["samples_per_s"]:
                best[name] = (intervals, summary)
    rows = [(name,) + best[name] for name, _ in CONFIGS]
    full = rows[-1][1]
    base = rows[0][2]["samples_per_s"]
    base_pred = predicted_seconds(rows[0][1], batch)
    print(f"transport: {transport}; flags: {' '.join(args)}; best of {rounds} rounds\n")
    print("| configuration | samples/s | speedup | predicted speedup | weights |")
    print("|---|---|---|---|---|")
    for name, intervals, s in rows:
        print(f"| {name} | {s['samples_per_s']:.1f} | {s['samples_per_s'] / base:.2f}x | "
              f"{base_pred / predicted_seconds(intervals, batch):.2f}x | {s['weights_fnv']} |")
    print("\nall four, per interval:\n")
    print("| interval | frozen | stages x replicas | microbatches | samples/s | predicted | rows computed / extended / cached |")
    print("|---|---|---|---|---|---|---|")
    for i in full:
        print(f"| {i['epoch']} | {i['frozen']} | {i['stages']} x {i['replicas']} | {i['microbatches']} | "
              f"{i['measured_throughput']:.1f} | {i['predicted_throughput']:.1f} | "
              f"{i['rows_computed']} / {i['rows_extended']} / {i['rows_cached']} |")
    sys.stdout.flush()
    planned = None
    if plan:  # tpipe-plan elastic on the same model, machine (the measured unit times) and run
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(model, f)
        epochs = sum(1 for _ in rows[-1][1])
        alpha = args[args.index("--alpha") + 1] if "--alpha" in args else "0.3333333333"
        alpha = str(fractions.Fraction(alpha).limit_denominator(1000))  # train_gpt's nearest fraction
        devices = args[args.index("--devices") + 1] if "--devices" in args else "2"
        cmd = [plan, "elastic", "--model", f.name, "--devices", devices, "--alpha", alpha, "--epochs", str(epochs), "--ablation"]
        planned = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        os.unlink(f.name)
    if planned:
        print("\ntpipe-plan elastic on the measured unit times (" + " ".join(cmd[1:2] + cmd[4:]) + "):\n")
        print("```\n" + planned.rstrip() + "\n```")


if __name__ == "__main__":
    main()
