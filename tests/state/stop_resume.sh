#!/usr/bin/env bash
# Preemption test of train_gpt: SIGTERM (what a scheduler sends before it takes the nodes back)
# mid-run. The run must stop at a step boundary, save that step although it is not a multiple of
# --save-every, exit 128 + 15 saying so; resumed, it must finish with the weights of the run that
# was never stopped, bitwise.
#   stop_resume.sh TRAIN_GPT threads
#   stop_resume.sh TRAIN_GPT mpi MPIEXEC "MPIEXEC_FLAGS"   # the signal reaches one rank process only
set -u
train=$1 mode=$2 mpiexec=${3:-} mpiflags=${4:-}
# ~80 ms a step on 2 cores: after step 3 the run has seconds left for the signal to arrive.
steps=40
args=(--layers 4 --d-model 128 --heads 2 --seq-len 128 --batch 4 --steps $steps --threads 2 --json --stages 2)
launch=()
if [ "$mode" = mpi ]; then
  # shellcheck disable=SC2206
  launch=("$mpiexec" -np 2 $mpiflags)
  args+=(--transport mpi)
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
weights() { grep -o '"weights_fnv":"[0-9a-f]*"' "$1" | tail -1 | cut -d'"' -f4; }
fail() { echo "FAIL: $*"; for f in "$work"/*.log "$work"/*.err; do echo "--- $f"; cat "$f"; done; exit 1; }

"${launch[@]}" "$train" "${args[@]}" > "$work/reference.log" 2>&1 || fail "the uninterrupted run failed"
want=$(weights "$work/reference.log")
[ -n "$want" ] || fail "no weights in the uninterrupted run"

"${launch[@]}" "$train" "${args[@]}" --save "$work/ck" --save-every 100 > "$work/stopped.log" 2> "$work/stopped.err" &
pid=$!
for _ in $(seq 1 1200); do grep -q '"step":3,' "$work/stopped.log" && break; sleep 0.05; done
grep -q '"step":3,' "$work/stopped.log" || { kill -9 $pid; fail "the run never reached step 3"; }
victim=$pid
if [ "$mode" = mpi ]; then  # one rank process, child of mpiexec: the other must stop at the same step
  kids=($(pgrep -P $pid -x "$(basename "$train")"))
  [ ${#kids[@]} -eq 2 ] || { kill -9 $pid; fail "expected 2 rank processes under mpiexec $pid, found ${#kids[@]}"; }
  victim=${kids[1]}
fi
kill -TERM "$victim"
{ wait $pid; } 2> /dev/null
rc=$?
at=$(sed -n 's/.*stopped at the step boundary after step \([0-9]*\) of.*/\1/p' "$work/stopped.err" | head -1)
[ -n "$at" ] || fail "no 'stopped at the step boundary' line (exit $rc)"
if [ "$mode" = threads ] && [ $rc -ne 143 ]; then fail "exit status $rc, want 143 (128 + SIGTERM)"; fi
[ $rc -ne 0 ] || fail "a stopped run exited 0"
[ "$at" -ge 3 ] && [ "$at" -lt $steps ] || fail "stopped after step $at, want 3..$((steps - 1))"
saved=$(ls -d "$work"/ck/step-* 2>/dev/null | tail -1 | sed 's/.*step-0*//')
[ "$saved" = "$at" ] || fail "the newest checkpoint is step '$saved', want the step it stopped after ($at)"
echo "stopped after step $at (exit $rc), saved step $saved"

"${launch[@]}" "$train" "${args[@]}" --save "$work/ck" --save-every 100 --resume "$work/ck" > "$work/resumed.log" 2>&1 ||
  fail "the resumed run failed"
got=$(weights "$work/resumed.log")
[ "$got" = "$want" ] || fail "resumed weights $got, uninterrupted $want"
echo "PASS: resumed to step $steps with the uninterrupted run's weights ($got)"
