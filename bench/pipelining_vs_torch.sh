#!/usr/bin/env bash
# tpipe's pipelining of libtorch modules against PyTorch's own (torch.distributed.pipelining),
# with the same kernels: train_libtorch_gpt built against the PyPI wheel's libtorch, the library
# PyTorch's pipelining runs on. Same GPT shape (apps/libtorch_gpt/gpt.hpp and its twin.py),
# 2 processes x 1 intra-op thread, equal microbatches, AdamW, no gradient clipping on either side.
# tpipe runs over MPI (mpirun -np 2 ... --transport mpi), PyTorch over gloo
# (bench/torch_pipelining.py). Each schedule runs tpipe then PyTorch back to back, `rounds` times
# alternately, at two shapes; prints the Markdown table of docs/libtorch.md (median tokens/s over
# the rounds, the spread, tpipe / PyTorch at the same schedule, best against best).
#   bench/pipelining_vs_torch.sh [ROUNDS] [STEPS]
# PyTorch: $TORCH_PYTHON if set (a Python that imports torch), else the venv
# ${TPIPE_TORCH_VENV:-$HOME/.cache/tpipe/venv-torch}, made on first use (pip install torch numpy).
# The wheel's build of train_libtorch_gpt: ${TPIPE_TORCHWHEEL_BUILD:-build-torchwheel}, configured
# and built on first use (the train_libtorch_gpt target only). CI does not run this script.
# Run it on an otherwise idle machine: on 2 cores, one compile halves every figure.
set -euo pipefail
rounds=${1:-3}
steps=${2:-10}
root=$(cd "$(dirname "$0")/.." && pwd)
build=${TPIPE_TORCHWHEEL_BUILD:-$root/build-torchwheel}

py=${TORCH_PYTHON:-}
if [ -z "$py" ]; then
  venv=${TPIPE_TORCH_VENV:-$HOME/.cache/tpipe/venv-torch}
  if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import torch' 2>/dev/null; then
    echo "pipelining_vs_torch.sh: making $venv (pip install torch numpy: a few GB)" >&2
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q torch numpy
  fi
  py=$venv/bin/python
fi
"$py" -c 'import torch.distributed.pipelining' 2>/dev/null ||
  { echo "pipelining_vs_torch.sh: $py cannot import torch.distributed.pipelining (set TORCH_PYTHON to a Python with torch >= 2.4)" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "pipelining_vs_torch.sh: no mpirun (tpipe's side runs over MPI)" >&2; exit 1; }

bin=$build/apps/libtorch_gpt/train_libtorch_gpt
torch_dir=$("$py" -c 'import os, torch; print(os.path.dirname(torch.__file__))')
if [ ! -x "$bin" ]; then
  echo "pipelining_vs_torch.sh: building train_libtorch_gpt against $torch_dir in $build" >&2
  # The wheel's libraries first (CMAKE_PREFIX_PATH: not a system libtorch of another version);
  # a CUDA wheel's libtorch_cuda needs its NVIDIA libraries at link time (rpath-link).
  nvidia=$(ls -d "$torch_dir"/../nvidia/*/lib 2>/dev/null | paste -sd: || true)
  cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTPIPE_BUILD_LIBTORCH_EXAMPLES=ON -DTPIPE_ENABLE_MPI=ON \
    -DCMAKE_PREFIX_PATH="$torch_dir" -DTorch_DIR="$torch_dir/share/cmake/Torch" \
    ${nvidia:+-DCMAKE_EXE_LINKER_FLAGS=-Wl,-rpath-link,$nvidia} >/dev/null
  cmake --build "$build" -j2 --target train_libtorch_gpt >/dev/null
fi
# Not a silent mix of libraries: the binary must load the wheel's libtorch.
ldd "$bin" | grep -q "$torch_dir/lib/libtorch_cpu.so" ||
  { echo "pipelining_vs_torch.sh: $bin does not load $torch_dir/lib/libtorch_cpu.so (remove $build to rebuild)" >&2; exit 1; }

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
export OMP_NUM_THREADS=1
# shape name | model flags (both sides) | microbatches | tpipe's TeraPipe slicings (token slices)
shapes=(
  "short|--layers 4 --d-model 256 --heads 4 --seq-len 256 --batch 8|8|grid:4:128,128 grid:2:96,88,72"
  "long|--layers 4 --d-model 256 --heads 4 --seq-len 1024 --batch 4|4|grid:2:384,352,288 tokens:320,272,232,200"
)
same=(1f1b interleaved interleaved-zb zb-v)  # schedules both run
ours_only=(zb-h1)                           # tpipe's, with a stage per rank
sliced=(1f1b interleaved)                   # tpipe's schedules run with the token slicings
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg); $(nproc --all) CPUs; $rounds rounds of $steps steps;" \
  "torch $("$py" -c 'import torch; print(torch.__version__)')" >&2
tpipe_run() {  # shape-name schedule slicer model-flags...
  local name=$1 sched=$2 slicer=$3; shift 3
  mpirun --oversubscribe --allow-run-as-root -np 2 "$bin" --transport mpi --stages 2 --threads 1 --steps "$steps" \
    --schedule "$sched" --slicer "$slicer" "$@" --json | tail -1 |
    sed "s/^{/{\"side\":\"tpipe\",\"shape\":\"$name\",\"config\":\"$sched $slicer\",/" >>"$out/runs.jsonl"
}
torch_run() {  # shape-name schedule microbatches model-flags...
  local name=$1 sched=$2 m=$3; shift 3
  "$py" "$root/bench/torch_pipelining.py" --schedule "$sched" --microbatches "$m" --threads 1 --steps "$steps" "$@" |
    tail -1 | sed "s/^{/{\"side\":\"pytorch\",\"shape\":\"$name\",\"config\":\"$sched microbatch:$m\",/" >>"$out/runs.jsonl"
}
for r in $(seq "$rounds"); do
  for s in "${shapes[@]}"; do
    IFS='|' read -r name model m slicings <<<"$s"
    for sched in "${same[@]}"; do
      tpipe_run "$name" "$sched" "microbatch:$m" $model
      torch_run "$name" "$sched" "$m" $model
    done
    for sched in "${ours_only[@]}"; do tpipe_run "$name" "$sched" "microbatch:$m" $model; done
    for slicer in $slicings; do
      for sched in "${sliced[@]}"; do tpipe_run "$name" "$sched" "$slicer" $model; done
    done
  done
  echo "round $r done; load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
python3 - "$out/runs.jsonl" "${shapes[@]}" <<'EOF'
import json, statistics, sys
runs = [json.loads(l) for l in open(sys.argv[1])]
for spec in sys.argv[2:]:
    name, model, m, _ = spec.split("|")
    rate = {}
    for d in runs:
        if d["shape"] == name:
            rate.setdefault((d["side"], d["config"]), []).append(d["tokens_per_s"])
    med = {k: statistics.median(v) for k, v in rate.items()}
    fmt = lambda k: f"{med[k]:.0f} ({min(rate[k]):.0f}-{max(rate[k]):.0f})" if k in med else "-"
    print(f"\n**{name}**: {model.replace('--', '').replace(' ', ' ')}, {m} microbatches; "
          f"tokens/s, median (min-max) of {len(next(iter(rate.values())))} runs\n")
    print("| schedule, slicing | tpipe | PyTorch | tpipe / PyTorch |")
    print("|---|---|---|---|")
    configs = sorted({c for _, c in rate}, key=lambda c: (not any(("pytorch", c) == k for k in rate), c))
    for c in configs:
        t, p = ("tpipe", c), ("pytorch", c)
        ratio = f"{med[t] / med[p]:.2f}" if t in med and p in med else "-"
        print(f"| {c} | {fmt(t)} | {fmt(p)} | {ratio} |")
    bt = max((k for k in med if k[0] == "tpipe"), key=med.get)
    bp = max((k for k in med if k[0] == "pytorch"), key=med.get)
    print(f"| **best against best** | {bt[1]}: {med[bt]:.0f} | {bp[1]}: {med[bp]:.0f} | **{med[bt] / med[bp]:.2f}** |")
EOF
