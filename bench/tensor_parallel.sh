#!/usr/bin/env bash
# Three axes measured: train_gpt over MPI at (t, K, d) = (1,1,1) (1,2,1) (2,1,1) (2,2,1) (2,1,2), and
# (2,1,1) (2,2,1) with --sequence-parallel (sp), process
# 0's peak RSS (GNU time) beside the memory model's prediction for it (predicted_peak_bytes) and
# its error, its floor (the same job with a negligible model), tokens/s, and the bytes the
# tensor communicator sent per step beside the closed form. Use a CPU-only build
# (-DTPIPE_ENABLE_CUDA=OFF): a CUDA-enabled train_gpt maps about 210 MiB of CUDA libraries, which
# the model does not price. Four processes on a 2-core machine are oversubscribed: the tokens/s
# compare configurations on this machine only.
#   bash bench/tensor_parallel.sh [build dir] [extra train_gpt flags]
set -euo pipefail
build=${1:-build}; shift || true
gpt=$build/apps/gpt/train_gpt
mpi=(mpiexec --oversubscribe); [ "$(id -u)" -eq 0 ] && mpi+=(--allow-run-as-root)
shape="--layers 4 --d-model 256 --heads 8 --seq-len 256 --batch 8 --steps 12 --slicer microbatch:4 --threads 2 --json"
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
printf '%-10s %5s %10s %10s %10s %7s %10s %14s %14s\n' "t,K,d" "procs" "tokens/s" "RSS MiB" "predicted" "error" "floor" "tensor B/step" "closed form"
for cfg in "1 1 1" "1 2 1" "2 1 1" "2 2 1" "2 1 2" "2 1 1 sp" "2 2 1 sp"; do
  read -r t K d sp <<<"$cfg"
  name="$t,$K,$d${sp:+ $sp}" flags=(); [ -n "$sp" ] && flags=(--sequence-parallel)
  n=$((t * K * d))
  run() {  # process 0's peak RSS in $out/rss.0, the log in $out/$1
    local log=$1; shift
    "${mpi[@]}" -np "$n" bash -c '/usr/bin/time -f "rss %M" -o "$0/rss.$OMPI_COMM_WORLD_RANK" "$@"' "$out" \
      "$gpt" --transport mpi --tp "$t" --stages "$K" --dp "$d" "$@" >"$out/$log" 2>&1 || { cat "$out/$log"; exit 1; }
  }
  run floor.log --layers "$K" --d-model 32 --heads 2 --seq-len 32 --batch 2 --steps 2 --threads 2 --json
  mv "$out/rss.0" "$out/floor.0"
  run log $shape "${flags[@]}" "$@"
  python3 - "$out" "$name" "$n" <<'PY'
import glob, json, sys
out, name, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
s = [json.loads(l) for l in open(out + "/log") if '"summary"' in l][-1]
rss = int(open(out + "/rss.0").read().split()[-1]) / 1024  # process 0's, as its prediction is
floor = int(open(out + "/floor.0").read().split()[-1]) / 1024
sent, closed = s.get("tensor_bytes_sent_per_step", 0), s.get("tensor_bytes_closed_form", 0)
predicted = s["predicted_peak_bytes"] / 2**20
error = f"{100 * (predicted - rss) / rss:+.1f}%"
print(f"{name:<10} {n:5d} {s['tokens_per_s']:10.0f} {rss:10.1f} {predicted:10.1f} {error:>7} {floor:10.1f} {sent:14.0f} {closed:14.0f}")
PY
  rm -f "$out"/rss.*
done
