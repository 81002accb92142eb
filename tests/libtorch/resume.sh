#!/usr/bin/env bash
# Save and resume of train_libtorch_gpt (tpipe/adapters/libtorch/checkpoint.hpp): a run stopped
# after its last checkpoint and resumed from it ends with the uninterrupted run's weights,
# bitwise; so does a resume under another shape (one stage instead of two, and, given MPIEXEC,
# MPI processes instead of threads), since each tensor is read by name whatever cut saved it.
# A checkpoint of another model is refused, naming both.
#   resume.sh TRAIN_LIBTORCH_GPT [MPIEXEC "MPIEXEC_FLAGS"]
set -u
train=$1 mpiexec=${2:-} mpiflags=${3:-}
model=(--layers 2 --d-model 32 --heads 2 --seq-len 16 --batch 4 --slicer grid:2:8,8 --threads 1 --json)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
weights() { grep -o '"weights_fnv":"[0-9a-f]*"' "$1" | cut -d'"' -f4; }
fail() { echo "FAIL: $*"; for f in "$work"/*.log; do echo "--- $f"; cat "$f"; done; exit 1; }

"$train" "${model[@]}" --steps 8 > "$work/reference.log" 2>&1 || fail "the uninterrupted run failed"
want=$(weights "$work/reference.log")
[ -n "$want" ] || fail "no weights in the uninterrupted run"

# Steps 1..5 with a checkpoint every 3: the newest is step 3, so steps 4 and 5 are run again.
"$train" "${model[@]}" --steps 5 --save "$work/ck" --save-every 3 > "$work/saved.log" 2>&1 || fail "the saving run failed"
[ -d "$work/ck/step-00000003" ] || fail "no checkpoint of step 3 in $(ls "$work/ck")"

check() {  # check NAME LAUNCH... -- FLAGS...
  local name=$1; shift
  "$@" --steps 8 --resume "$work/ck" > "$work/$name.log" 2>&1 || fail "$name: the resumed run failed"
  grep -q '"first_step":4,' "$work/$name.log" || fail "$name: did not resume at step 4"
  got=$(weights "$work/$name.log")
  [ "$got" = "$want" ] || fail "$name: resumed weights $got, uninterrupted $want"
  echo "PASS $name: resumed at step 4, final weights bitwise the uninterrupted run's ($got)"
}
check same_shape "$train" "${model[@]}"
check one_stage "$train" "${model[@]}" --stages 1
if [ -n "$mpiexec" ]; then
  # shellcheck disable=SC2086
  check mpi "$mpiexec" -np 2 $mpiflags "$train" "${model[@]}" --transport mpi
fi

"$train" --layers 3 --d-model 32 --heads 2 --seq-len 16 --batch 4 --steps 8 --resume "$work/ck" > "$work/other.log" 2>&1 &&
  fail "a checkpoint of another model was accepted"
grep -q 'holds the model .*"layers":2.*this run.s is .*"layers":3' "$work/other.log" ||
  fail "the refusal of another model does not name both"
echo "PASS: another model's checkpoint refused"
