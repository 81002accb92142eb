#!/usr/bin/env bash
# Measures the reference GPT's training throughput on this machine's CPU threads:
# sequential (one stage, all threads) vs 2-stage pipelines at batch 1 with a long sequence,
# microbatch-only (one microbatch: nothing to overlap) vs token-level (uniform and
# TeraPipe-planned), plus the planner check (planned T vs measured iteration time).
#
#   examples/gpt/measure.sh [path/to/train_gpt] [steps]
#
# Prints a Markdown table (docs/gpt.md holds a run). Steps after the first (warm-up) count; the
# table gives the fastest and the median step (the fastest is the least disturbed by other
# processes on a shared machine) and tokens/s = seq_len / fastest step. "pipeline ms" is
# tpipe::run's iteration time (forward + backward, no optimizer) of the fastest step, which
# is what the planner's T predicts.
set -euo pipefail
BIN=${1:-build/examples/gpt/train_gpt}
STEPS=${2:-10}
MODEL=(--layers 4 --d-model 128 --heads 4 --seq-len 1024 --batch 1 --lr 1e-3 --seed 1)
if [[ ! -x "$BIN" ]]; then echo "measure.sh: no train_gpt at '$BIN' (build the train_gpt target)" >&2; exit 1; fi

run() {  # name, flags...
  local name=$1; shift
  "$BIN" "${MODEL[@]}" --steps "$STEPS" --json "$@" | /usr/bin/env python3 -c '
import json, statistics, sys
name = sys.argv[1]
steps, plan, summ = [], None, None
for line in sys.stdin:
    d = json.loads(line)
    if "plan" in d: plan = d
    elif d.get("summary"): summ = d
    elif "step" in d: steps.append(d)
times = [s["step_s"] for s in steps[1:]] or [steps[0]["step_s"]]
pipe = [s["pipeline_s"] for s in steps[1:]] or [steps[0]["pipeline_s"]]
best, med, pbest = min(times), statistics.median(times), min(pipe)
T = plan["planned_T_s"] if plan else 0
planned = "%.1f ms" % (T * 1e3) if plan else ""
ratio = "%.2f" % (pbest / T) if plan else ""
print("| %s | %s | %.1f | %.1f | %.0f | %.1f | %s | %s |" % (name, summ["units"], best * 1e3, med * 1e3, 1024 / best, pbest * 1e3, planned, ratio))
if plan:
    with open(sys.argv[2], "w") as f:
        d = plan["delta_last_stage"]
        f.write("Planner check (%s): profiled latency of the slowest stage, t(b=1, s, c=0) in ms: %s; "
                "context term of the last stage: %.3g + %.3g*bs + %.3g*bc + %.3g*bsc s. Plan: %s, planned T = %.1f ms "
                "(t_max %.1f ms); measured pipeline iteration: fastest %.1f ms, median %.1f ms; ratio measured/planned "
                "%.2f (fastest), %.2f (median).\n" % (name, ", ".join("t(%d)=%.2f" % (n, t * 1e3) for n, t in zip(plan["t_b1_c0_tokens"], plan["t_b1_c0_s"])),
                d[0], d[1], d[2], d[3], plan["plan"], T * 1e3, plan["t_max_s"] * 1e3, pbest * 1e3,
                statistics.median(pipe) * 1e3, pbest / T, statistics.median(pipe) / T))
' "$name" "$NOTE"
}
NOTE=$(mktemp)
trap 'rm -f "$NOTE"' EXIT

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) CPUs"
echo
echo "| configuration | units | fastest step ms | median step ms | tokens/s | pipeline ms | planned T | measured/planned |"
echo "|---|---|---|---|---|---|---|---|"
run "sequential, 1 stage x 2 threads" --stages 1 --slicer microbatch:1
run "sequential, 1 stage x 1 thread" --stages 1 --slicer microbatch:1 --threads 1
run "2 stages, microbatch-only (1F1B)" --stages 2 --schedule 1f1b --slicer microbatch:1
run "2 stages, tokens 8 x 128 (terapipe-1f1b)" --stages 2 --schedule terapipe-1f1b \
    --slicer tokens:128,128,128,128,128,128,128,128
run "2 stages, TeraPipe-planned (terapipe-1f1b)" --stages 2 --schedule terapipe-1f1b --slicer terapipe --granularity 64
echo
cat "$NOTE"
echo
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
