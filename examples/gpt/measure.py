#!/usr/bin/env python3
"""Throughput of the reference GPT on this machine's CPU threads (see measure.sh, docs/gpt.md).

Model: 4 layers, d=128, 4 heads, batch 1, a 1024-token sequence. Configurations:
  sequential on 2 threads and on 1 thread; 2 stages microbatch-only (batch 1 = one microbatch,
  nothing to overlap); 2 stages with 8 uniform token slices; 2 stages TeraPipe-planned.
Every configuration runs `rounds` times, round-robin, `steps` steps each, so that all of them
see the same mix of quiet and busy moments on a shared machine. Per configuration the table
gives the fastest step (the least disturbed) and the median step over all rounds (the first
step of each run is a warm-up and is dropped). "pipeline ms" is tpipe::run's iteration time
(forward + backward, no optimizer) of the fastest step, which is what the planner's T predicts.

usage: measure.py [train_gpt] [steps] [rounds]
"""
import json
import os
import statistics
import subprocess
import sys

BIN = sys.argv[1] if len(sys.argv) > 1 else "build/examples/gpt/train_gpt"
STEPS = int(sys.argv[2]) if len(sys.argv) > 2 else 6
ROUNDS = int(sys.argv[3]) if len(sys.argv) > 3 else 3
SEQ = 1024
MODEL = ["--layers", "4", "--d-model", "128", "--heads", "4", "--seq-len", str(SEQ), "--batch", "1", "--seed", "1"]
TOKENS8 = ",".join(["128"] * 8)
CONFIGS = [
    ("sequential, 1 stage x 2 threads", ["--stages", "1", "--slicer", "microbatch:1"]),
    ("sequential, 1 stage x 1 thread", ["--stages", "1", "--slicer", "microbatch:1", "--threads", "1"]),
    ("2 stages, microbatch-only (1f1b)", ["--stages", "2", "--schedule", "1f1b", "--slicer", "microbatch:1"]),
    ("2 stages, tokens 8 x 128 (terapipe-1f1b)", ["--stages", "2", "--schedule", "terapipe-1f1b", "--slicer",
                                                  "tokens:" + TOKENS8]),
    ("2 stages, TeraPipe-planned (terapipe-1f1b)", ["--stages", "2", "--schedule", "terapipe-1f1b", "--slicer",
                                                    "terapipe", "--granularity", "64"]),
]


def run(flags):
    out = subprocess.run([BIN, *MODEL, "--steps", str(STEPS), "--json", *flags], check=True, capture_output=True,
                         text=True).stdout
    steps, plan = [], None
    for line in out.splitlines():
        d = json.loads(line)
        if "plan" in d:
            plan = d
        elif "step" in d:
            steps.append(d)
    return steps[1:] or steps, plan


def main():
    if not os.access(BIN, os.X_OK):
        sys.exit(f"measure.py: no train_gpt at '{BIN}' (build the train_gpt target)")
    print(f"load average before: {' '.join(open('/proc/loadavg').read().split()[:3])}; {os.cpu_count()} CPUs; "
          f"{ROUNDS} rounds x {STEPS} steps per configuration")
    results = {name: [] for name, _ in CONFIGS}  # (step_s, pipeline_s, plan)
    for _ in range(ROUNDS):
        for name, flags in CONFIGS:
            steps, plan = run(flags)
            results[name] += [(s["step_s"], s["pipeline_s"], plan) for s in steps]
    print()
    print("| configuration | fastest step ms | median step ms | tokens/s (fastest) | pipeline ms | planned T | "
          "measured/planned |")
    print("|---|---|---|---|---|---|---|")
    notes = []
    base = None
    for name, _ in CONFIGS:
        r = results[name]
        best = min(r, key=lambda x: x[0])
        med = statistics.median(x[0] for x in r)
        plan = best[2]
        planned = ratio = ""
        if plan:
            T = plan["planned_T_s"]
            planned, ratio = f"{T * 1e3:.1f} ms", f"{best[1] / T:.2f}"
            d = plan["delta_last_stage"]
            lat = ", ".join(f"t({n})={t * 1e3:.1f}" for n, t in zip(plan["t_b1_c0_tokens"], plan["t_b1_c0_s"]))
            notes.append(f"Planner check (the round with the fastest step): profiled latency of the slowest stage, "
                         f"t(b=1, s, c=0) in ms: {lat}; context term of the last stage: {d[0]:.3g} + {d[1]:.3g}*bs + "
                         f"{d[2]:.3g}*bc + {d[3]:.3g}*bsc s. Plan: {plan['plan']}; planned T = {T * 1e3:.1f} ms "
                         f"(t_max {plan['t_max_s'] * 1e3:.1f} ms); measured iteration {best[1] * 1e3:.1f} ms; "
                         f"ratio {best[1] / T:.2f}. Plans of all rounds: "
                         + "; ".join(sorted({x[2]['plan'] for x in r})))
        tps = SEQ / best[0]
        base = base or tps
        print(f"| {name} | {best[0] * 1e3:.1f} | {med * 1e3:.1f} | {tps:.0f} ({tps / base:.2f}x) | "
              f"{best[1] * 1e3:.1f} | {planned} | {ratio} |")
    print()
    for n in notes:
        print(n)
    print()
    print(f"load average after: {' '.join(open('/proc/loadavg').read().split()[:3])}")


if __name__ == "__main__":
    main()
