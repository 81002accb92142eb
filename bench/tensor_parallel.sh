#!/usr/bin/env bash
# Three axes measured: train_gpt over MPI at (t, K, d) = (1,2,1) (2,1,1) (2,2,1) (2,1,2), process
# 0's peak RSS (GNU time) beside the memory model's prediction, tokens/s, and the bytes the
# tensor communicator sent per step beside the closed form. Four processes on a 2-core machine
# are oversubscribed: the tokens/s compare configurations on this machine only.
#   bash bench/tensor_parallel.sh [build dir] [extra train_gpt flags]
set -euo pipefail
build=${1:-build}; shift || true
gpt=$build/examples/gpt/train_gpt
mpi=(mpiexec --oversubscribe); [ "$(id -u)" -eq 0 ] && mpi+=(--allow-run-as-root)
shape="--layers 4 --d-model 256 --heads 8 --seq-len 256 --batch 8 --steps 12 --slicer microbatch:4 --threads 2 --json"
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
printf '%-10s %5s %12s %16s %16s %18s %18s\n' "t,K,d" "procs" "tokens/s" "RSS p0 MiB" "predicted MiB" "tensor B/step" "closed form B"
for cfg in "1 2 1" "2 1 1" "2 2 1" "2 1 2"; do
  read -r t K d <<<"$cfg"
  n=$((t * K * d))
  "${mpi[@]}" -np "$n" bash -c '/usr/bin/time -f "rss %M" -o "$0/rss.$OMPI_COMM_WORLD_RANK" "$@"' "$out" \
    "$gpt" --transport mpi --tp "$t" --stages "$K" --dp "$d" $shape "$@" >"$out/log" 2>&1 || { cat "$out/log"; exit 1; }
  python3 - "$out" "$t,$K,$d" "$n" <<'PY'
import glob, json, sys
out, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
s = [json.loads(l) for l in open(out + "/log") if '"summary"' in l][-1]
rss = int(open(out + "/rss.0").read().split()[-1]) / 1024  # process 0's, as its prediction is
sent, closed = s.get("tensor_bytes_sent_per_step", 0), s.get("tensor_bytes_closed_form", 0)
print(f"{name:<10} {n:5d} {s['tokens_per_s']:12.0f} {rss:16.1f} {s['predicted_peak_bytes'] / 2**20:16.1f} {sent:18.0f} {closed:18.0f}")
PY
  rm -f "$out"/rss.*
done
