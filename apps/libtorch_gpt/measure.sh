#!/usr/bin/env bash
# tokens/s of the libtorch GPT: PyTorch, plain libtorch, and tpipe-pipelined (threads, MPI), one
# model, one machine, one run each (take the /work/MEASURING lock on a shared machine).
# Usage: measure.sh BIN PYTHON [STEPS]
#   BIN     train_libtorch_gpt (built against the same libtorch as PYTHON's torch, for a fair row)
#   PYTHON  a Python with torch (runs twin.py)
set -euo pipefail
bin=$1 py=$2 steps=${3:-12}
here=$(cd "$(dirname "$0")" && pwd)
model=(--layers 4 --d-model 128 --heads 4 --seq-len 128 --batch 8 --steps "$steps")
row() { printf '%-48s %s\n' "$1" "$(sed -n 's/.*"tokens_per_s":\s*\([0-9.]*\).*/\1/p' | tail -1)"; }
"$py" "$here/twin.py" "${model[@]}" --threads 2 | row "PyTorch $("$py" -c 'import torch;print(torch.__version__)'), 2 threads"
"$py" "$here/twin.py" "${model[@]}" --threads 1 | row "PyTorch, 1 thread"
"$bin" "${model[@]}" --transport none --threads 2 --json | row "plain libtorch, 2 threads"
"$bin" "${model[@]}" --transport none --threads 1 --json | row "plain libtorch, 1 thread"
for run in "1f1b microbatch:4" "zb-h1 microbatch:4" "1f1b grid:4:64,64" "zb-h1 grid:4:64,64" "1f1b tokens:64,32,32"; do
  set -- $run
  "$bin" "${model[@]}" --stages 2 --schedule "$1" --slicer "$2" --threads 1 --json | row "tpipe 2 stages on threads, $1, $2"
done
if mpirun --version >/dev/null 2>&1; then
  mpirun --oversubscribe --allow-run-as-root -np 2 "$bin" "${model[@]}" --transport mpi --stages 2 --schedule 1f1b \
    --slicer microbatch:4 --threads 1 --json | row "tpipe 2 stages on MPI processes, 1f1b, microbatch:4"
fi
