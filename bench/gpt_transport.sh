#!/usr/bin/env bash
# The reference GPT over MPI processes against the same training on threads, and data-parallel
# replicas against one replica (same per-replica batch and threads per replica), measured in
# one run: median step time after the warm-up steps, tokens/s, and the ratios.
#   bench/gpt_transport.sh [BUILD_DIR] [STEPS]      (needs a build with -DTPIPE_ENABLE_MPI=ON)
# Run it while the machine is otherwise idle: on 2 cores, one compile halves every figure.
set -euo pipefail
build=${1:-build}
steps=${2:-30}
gpt=$build/apps/gpt/train_gpt
mpirun=(mpirun --oversubscribe --allow-run-as-root)
model="--layers 4 --d-model 128 --heads 4 --seq-len 128 --batch 4 --steps $steps --json"
median() {  # median step_s over the steps after the first 5, and tokens/s of one step
  python3 -c '
import json, sys, statistics
steps = [d for d in map(json.loads, filter(str.strip, sys.stdin)) if "step" in d and "summary" not in d]
t = statistics.median(s["step_s"] for s in steps[5:])
tokens = steps[0]["tokens_per_s"] * steps[0]["step_s"]
print("%.2f %.0f" % (t * 1e3, tokens / t))'
}
declare -A ms_of
row() {  # key, name, command...
  local key=$1 name=$2; shift 2
  read -r ms tps < <("$@" </dev/null 2>/dev/null | median)
  ms_of[$key]=$ms
  printf '%-58s %10s ms/step %10s tok/s\n' "$name" "$ms" "$tps"
}
ratio() { python3 -c "print(f'{$1 / $2:.3f}')"; }
echo "train_gpt: 4 layers, d_model 128, seq 128, batch 4 per replica, $steps steps (median of steps 6..$steps)"
row mb_threads "P=2 1f1b microbatch:4, threads (2 ranks, 1 thread each)" "$gpt" $model --stages 2 --threads 2
row mb_mpi "P=2 1f1b microbatch:4, 2 MPI processes" "${mpirun[@]}" -np 2 "$gpt" $model --stages 2 --threads 2 --transport mpi
row tp_threads "P=2 terapipe-1f1b tokens:32x4, threads" "$gpt" $model --stages 2 --threads 2 --schedule terapipe-1f1b --slicer tokens:32,32,32,32 --batch 1
row tp_mpi "P=2 terapipe-1f1b tokens:32x4, 2 MPI processes" "${mpirun[@]}" -np 2 "$gpt" $model --stages 2 --threads 2 --schedule terapipe-1f1b --slicer tokens:32,32,32,32 --batch 1 --transport mpi
row d1 "D=1 P=1, 1 thread" "$gpt" $model --stages 1 --threads 1
row d2_threads "D=2 P=1, threads (1 thread per replica)" "$gpt" $model --stages 1 --dp 2 --threads 2
row d2_mpi "D=2 P=1, 2 MPI processes" "${mpirun[@]}" -np 2 "$gpt" $model --stages 1 --dp 2 --threads 2 --transport mpi
echo "step time, processes / threads: 1f1b $(ratio ${ms_of[mb_mpi]} ${ms_of[mb_threads]}), terapipe $(ratio ${ms_of[tp_mpi]} ${ms_of[tp_threads]})"
echo "step time, D=2 / D=1 (same batch and threads per replica): threads $(ratio ${ms_of[d2_threads]} ${ms_of[d1]}), MPI $(ratio ${ms_of[d2_mpi]} ${ms_of[d1]})"
