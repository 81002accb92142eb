#!/usr/bin/env bash
# Resume and reshard of train_gpt's checkpoints: a run saved at step 6 and resumed to step 12
# in the same shape, or in another (stages, schedule, transport, optimizer sharding), ends with weights bitwise
# those of the uninterrupted run; pipeline stages, schedules and threads vs processes change no
# bit of the arithmetic (the slicing and the replica count do, so those resume into themselves;
# so do the stages with 3+ replicas, whose all-reduce order follows each stage's buckets).
#   resume_shapes.sh TRAIN_GPT [MPIEXEC "MPIEXEC_FLAGS"]
set -u
train=$1 mpiexec=${2:-} mpiflags=${3:-}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
base=(--layers 4 --d-model 32 --heads 2 --seq-len 32 --batch 4 --steps 12 --threads 2 --json)
fail=0
weights() { grep -o '"weights_fnv":"[0-9a-f]*"' "$1" | tail -1 | cut -d'"' -f4; }
run() {  # run NAME [mpi] ARGS...: the weights fingerprint of a train_gpt run
  local name=$1; shift
  local launch=()
  # shellcheck disable=SC2206
  if [ "$1" = mpi ]; then shift; launch=("$mpiexec" -np "$1" $mpiflags); shift; set -- --transport mpi "$@"; fi
  if ! "${launch[@]}" "$train" "${base[@]}" "$@" > "$work/$name.log" 2>&1; then
    { echo "FAIL: $name exited non-zero"; cat "$work/$name.log"; } >&2
  fi
  weights "$work/$name.log"
}
expect() {  # expect WHAT GOT WANT
  if [ -n "$2" ] && [ "$2" = "$3" ]; then echo "ok   $1 ($2)"; else echo "FAIL $1: $2 != $3"; fail=1; fi
}

ref=$(run ref --stages 2)
expect "saving perturbs nothing" "$(run saved --stages 2 --save "$work/p2" --save-every 6)" "$ref"
ck="$work/p2/step-00000006"
[ -f "$ck/manifest.json" ] || { echo "FAIL: no checkpoint at step 6"; exit 1; }
expect "resume, same shape (2 stages)" "$(run same --stages 2 --resume "$ck")" "$ref"
expect "reshard to 4 stages" "$(run p4 --stages 4 --resume "$ck")" "$ref"
expect "reshard to 1 stage, gpipe" "$(run p1 --stages 1 --schedule gpipe --resume "$ck")" "$ref"
expect "reshard to interleaved (2 ranks x 2)" "$(run inter --stages 2 --schedule interleaved --resume "$ck")" "$ref"

# TeraPipe token slices: the same slices before and after.
slices=(--stages 2 --schedule terapipe-1f1b --slicer grid:2:16,16)
tref=$(run tref "${slices[@]}")
run tsave "${slices[@]}" --save "$work/tp" --save-every 6 > /dev/null
expect "TeraPipe-sliced resume" "$(run tres "${slices[@]}" --resume "$work/tp/step-00000006")" "$tref"

# Data parallel: 2 replicas before and after, their pipelines resharded.
dref=$(run dref --stages 2 --dp 2)
run dsave --stages 2 --dp 2 --save "$work/dp" --save-every 6 > /dev/null
expect "data-parallel resume, 2 -> 1 stage" "$(run dres --stages 1 --dp 2 --resume "$work/dp/step-00000006")" "$dref"
# Another replica count changes the arithmetic: it must load and train, not match a run.
grow=$(run grow --stages 2 --dp 2 --resume "$ck")
[ -n "$grow" ] && echo "ok   1 -> 2 replicas trains on ($grow)" || { echo "FAIL: 1 -> 2 replicas"; fail=1; }

# Sharded optimizer (ZeRO-1): the replicated run's bits; its checkpoint holds each replica's
# moments ("rank-R-dp-d.bin") and resumes into any sharding and pipeline.
zref=$(run zref --stages 2 --dp 3)
expect "sharded optimizer = replicated (3 replicas)" "$(run zrun --stages 2 --dp 3 --shard-optimizer)" "$zref"
run zsave --stages 2 --dp 3 --shard-optimizer --save "$work/z" --save-every 6 > /dev/null
zck="$work/z/step-00000006"
n=$(ls "$zck"/rank-*-dp-*.bin 2> /dev/null | wc -l)
[ "$n" = 6 ] && echo "ok   one shard per rank and replica" || { echo "FAIL: $n sharded shards, want 6"; fail=1; }
expect "sharded resume, same shape" "$(run zsame --stages 2 --dp 3 --shard-optimizer --resume "$zck")" "$zref"
expect "sharded -> replicated" "$(run zrep --stages 2 --dp 3 --resume "$zck")" "$zref"
run zrsave --stages 2 --dp 3 --save "$work/zr" --save-every 6 > /dev/null
expect "replicated -> sharded" "$(run zsh --stages 2 --dp 3 --shard-optimizer --resume "$work/zr/step-00000006")" "$zref"
# With 3+ replicas the all-reduce adds in an order set by each stage's gradient buckets, so
# another cut trains other bits: it must load the shards and train on.
z4=$(run z4 --stages 4 --dp 3 --shard-optimizer --resume "$zck")
[ -n "$z4" ] && echo "ok   sharded, 2 -> 4 stages trains on ($z4)" || { echo "FAIL: sharded 2 -> 4 stages"; fail=1; }

if [ -n "$mpiexec" ]; then
  expect "sharded, threads -> MPI (6 processes)" "$(run zmpi mpi 6 --stages 2 --dp 3 --shard-optimizer --resume "$zck")" "$zref"
  expect "threads -> MPI (2 processes)" "$(run tompi mpi 2 --stages 2 --resume "$ck")" "$ref"
  run msave mpi 2 --stages 2 --save "$work/mp" --save-every 6 > /dev/null
  expect "MPI -> threads (1 stage)" "$(run frommpi --stages 1 --resume "$work/mp/step-00000006")" "$ref"
  n=$(ls "$work/mp/step-00000006"/rank-*.bin | wc -l)
  [ "$n" = 2 ] && echo "ok   one shard per MPI rank" || { echo "FAIL: $n shards"; fail=1; }
fi
exit $fail
