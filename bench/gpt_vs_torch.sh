#!/usr/bin/env bash
# The reference GPT's training steps (bench_gpt's gpt_step) against the same steps in PyTorch
# eager mode (bench/gpt_torch.py), measured in one window, `rounds` times alternately; prints the
# Markdown table of docs/gpt.md: tokens/s (median over the rounds) and the ratios, then the
# TeraPipe plans bench_gpt used.
#   bench/gpt_vs_torch.sh [BUILD_DIR] [ROUNDS]
# PyTorch: $TORCH_PYTHON, else /work/venv-torch/bin/python, else python3 (it must import torch).
# Run it on an otherwise idle machine: on 2 cores, one compile halves every figure.
set -euo pipefail
build=${1:-build}
rounds=${2:-2}
here=$(cd "$(dirname "$0")" && pwd)
bench=$build/bench/bench_gpt
[ -x "$bench" ] || { echo "gpt_vs_torch.sh: no $bench (build the bench_gpt target)" >&2; exit 1; }
py=${TORCH_PYTHON:-}
if [ -z "$py" ]; then
  if [ -x /work/venv-torch/bin/python ]; then py=/work/venv-torch/bin/python; else py=python3; fi
fi
"$py" -c 'import torch' 2>/dev/null || { echo "gpt_vs_torch.sh: $py cannot import torch (set TORCH_PYTHON)" >&2; exit 1; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc) CPUs; $rounds rounds" >&2
# Each (model, threads) pair runs back to back, ours then PyTorch's, so that both see the same
# moment of a shared machine; then the pipelined configurations of that model.
models=(default long wide)
for r in $(seq "$rounds"); do
  for m in 0 1 2; do
    for t in 1 2; do
      "$bench" --benchmark_filter="^gpt_step/model:$m/threads:$t/config:0" --benchmark_format=json \
        >"$out/gpt.$r.$m.$t.json"
      "$py" "$here/gpt_torch.py" --steps 10 --warmup 3 --models "${models[$m]}" --threads "$t" >>"$out/torch.$r.jsonl"
    done
    "$bench" --benchmark_filter="^gpt_step/model:$m/threads:2/config:[123]" --benchmark_format=json \
      >"$out/gpt.$r.$m.pipe.json"
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
python3 - "$out" "$rounds" <<'EOF'
import glob, json, re, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
names = ["default", "long", "wide"]
ours = {}    # (model, threads, config) -> [tokens/s]
torch = {}   # (model, threads) -> [tokens/s]
for r in range(1, rounds + 1):
    runs = [b for f in sorted(glob.glob(f"{out}/gpt.{r}.*.json")) for b in json.load(open(f))["benchmarks"]]
    for b in runs:
        m = re.match(r"gpt_step/model:(\d+)/threads:(\d+)/config:(\d+)", b["name"])
        if m and "tokens_per_s" in b:
            ours.setdefault(tuple(map(int, m.groups())), []).append(b["tokens_per_s"])
    for line in open(f"{out}/torch.{r}.jsonl"):
        d = json.loads(line)
        torch.setdefault((names.index(d["model"]), d["threads"]), []).append(d["tokens_per_s"])
shape = {0: "4 layers, d 128, seq 128, batch 4", 1: "4 layers, d 128, seq 1024, batch 1", 2: "6 layers, d 256, seq 256, batch 4"}
med = lambda xs: statistics.median(xs) if xs else float("nan")
print("| model | train_gpt 1 stage, 1 / 2 threads | PyTorch eager, 1 / 2 threads | ratio 1 / 2 threads | "
      "2 stages, 2 threads: microbatches / token slices / TeraPipe-planned | best pipelined / best 1 stage |")
print("|---|---|---|---|---|---|")
for m in range(3):
    o1, o2 = med(ours.get((m, 1, 0), [])), med(ours.get((m, 2, 0), []))
    t1, t2 = med(torch.get((m, 1), [])), med(torch.get((m, 2), []))
    p1, p2, p3 = (med(ours.get((m, 2, c), [])) for c in (1, 2, 3))
    print(f"| {shape[m]} | {o1:.0f} / {o2:.0f} | {t1:.0f} / {t2:.0f} | {o1 / t1:.2f} / {o2 / t2:.2f} | "
          f"{p1:.0f} / {p2:.0f} / {p3:.0f} | {max(p1, p2, p3) / max(o1, o2):.2f} |")
plans = {}
for b in (b for f in sorted(glob.glob(f"{out}/gpt.1.*.pipe.json")) for b in json.load(open(f))["benchmarks"]):
    if re.match(r"gpt_step/model:\d+/threads:2/config:3", b["name"]):
        plans[b["name"]] = b.get("label", "")
print()
for name, label in plans.items():
    print(f"- {label}")
EOF
