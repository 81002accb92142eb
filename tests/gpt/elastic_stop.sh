#!/usr/bin/env bash
# SIGTERM to an elastic train_gpt run (PipeTransformer, --elastic) after its first interval: it
# stops at a step boundary, saves that step's checkpoint (its --save-every is far away), says
# after which step, and exits 128 + 15. Under mpirun the signal reaches one rank process only;
# both stop at the same step.
#   elastic_stop.sh TRAIN_GPT threads
#   elastic_stop.sh TRAIN_GPT mpi MPIEXEC "MPIEXEC_FLAGS"
set -u
train=$1 mode=$2 mpiexec=${3:-} mpiflags=${4:-}
steps=100000  # far more than the seconds the test waits: only the signal ends it
args=(--elastic --untied --layers 4 --d-model 32 --heads 2 --seq-len 32 --batch 4 --steps $steps --freeze-every 40
      --alpha 0.5 --json)
launch=()
if [ "$mode" = mpi ]; then
  # shellcheck disable=SC2206
  launch=("$mpiexec" -np 2 $mpiflags)
  args+=(--transport mpi --devices 2)
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; for f in "$work"/*; do echo "--- $f"; cat "$f"; done; exit 1; }

"${launch[@]}" "$train" "${args[@]}" --save "$work/ck" --save-every 50000 > "$work/run.log" 2> "$work/run.err" &
pid=$!
for _ in $(seq 1 1200); do grep -q '"epoch":0,' "$work/run.log" && break; sleep 0.05; done
grep -q '"epoch":0,' "$work/run.log" || { kill -9 $pid; fail "the run never finished its first interval"; }
victim=$pid
if [ "$mode" = mpi ]; then  # one rank process, child of mpiexec
  kids=($(pgrep -P $pid -x "$(basename "$train")"))
  [ ${#kids[@]} -eq 2 ] || { kill -9 $pid; fail "expected 2 rank processes under mpiexec $pid, found ${#kids[@]}"; }
  victim=${kids[1]}
fi
kill -TERM "$victim"
for _ in $(seq 1 600); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
kill -0 $pid 2>/dev/null && { kill -9 $pid; fail "still running 60 s after SIGTERM"; }
wait $pid
rc=$?
at=$(sed -n "s/.*SIGTERM received.*: stopped at the step boundary after step \([0-9]*\) of $steps, saved in .*/\1/p" "$work/run.err" | head -1)
[ -n "$at" ] || fail "no 'stopped at the step boundary ... of $steps, saved in' line (exit $rc)"
[ -f "$(printf '%s/ck/step-%08d/manifest.json' "$work" "$at")" ] || fail "no checkpoint of step $at: $(ls "$work/ck")"
[ "$at" -ge 40 ] && [ "$at" -lt $steps ] || fail "stopped after step $at, want 40..$((steps - 1))"
if [ "$mode" = threads ]; then
  [ $rc -eq 143 ] || fail "exit status $rc, want 143 (128 + SIGTERM)"
else
  [ $rc -ne 0 ] || fail "a stopped run exited 0"
  # The signalled process and process 0 (one line if they are the same) name one step.
  steps_named=$(sed -n 's/.*stopped at the step boundary after step \([0-9]*\) of.*/\1/p' "$work/run.err" | sort -u)
  [ "$steps_named" = "$at" ] || fail "the processes stopped after different steps: $(echo $steps_named)"
fi
echo "PASS: SIGTERM stopped the elastic run after step $at (exit $rc)"
