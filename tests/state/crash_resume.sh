#!/usr/bin/env bash
# Crash test of train_gpt's checkpoints: SIGKILLs a run at random moments and restarts it from
# its newest checkpoint until it finishes; its final weights must be bitwise those of the same
# run without interruption.
#   crash_resume.sh TRAIN_GPT threads
#   crash_resume.sh TRAIN_GPT mpi MPIEXEC "MPIEXEC_FLAGS"
# Under MPI one rank process is killed (Open MPI then ends the whole job), as a lost node would.
set -u
train=$1 mode=$2 mpiexec=${3:-} mpiflags=${4:-}
steps=36
# A model big enough for a few ms a step: the kills must land before a run ends.
args=(--layers 2 --d-model 64 --heads 2 --seq-len 64 --batch 8 --steps $steps --threads 2 --json --stages 2)
launch=()
if [ "$mode" = mpi ]; then
  # shellcheck disable=SC2206
  launch=("$mpiexec" -np 2 $mpiflags)
  args+=(--transport mpi)
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
weights() { grep -o '"weights_fnv":"[0-9a-f]*"' "$1" | tail -1 | cut -d'"' -f4; }

"${launch[@]}" "$train" "${args[@]}" > "$work/reference.log" 2>&1 || { cat "$work/reference.log"; exit 1; }
want=$(weights "$work/reference.log")
[ -n "$want" ] || { echo "no weights in the reference run"; cat "$work/reference.log"; exit 1; }

# Each run is killed once it has committed 1 or 2 checkpoints past the one it started from
# (kill_on_progress). A target too close to the end (a run finishes in well under a second) is
# not waited for.
source "$(dirname "${BASH_SOURCE[0]}")/../kill_on_progress.sh"
RANDOM=${CRASH_SEED:-12345}
kills=0
for attempt in $(seq 1 100); do
  resume=()
  ls -d "$work"/ck/step-* > /dev/null 2>&1 && resume=(--resume "$work/ck")
  log="$work/run$attempt.log"
  target=$(( $(newest_checkpoint "$work/ck") + 3 * (1 + RANDOM % 2) ))
  "${launch[@]}" "$train" "${args[@]}" --save "$work/ck" --save-every 3 --keep 2 "${resume[@]}" > "$log" 2>&1 &
  pid=$!
  if [ $target -le $((steps - 9)) ]; then
    kill_on_progress "attempt $attempt:" $pid "$work/ck" $target "$mode" "$train"
    case $? in
      0) kills=$((kills + 1)) ;;
      2) echo "FAIL: no rank process under mpiexec $pid"; exit 1 ;;
    esac
  fi
  { wait $pid; } 2> /dev/null
  rc=$?
  if [ $rc -eq 0 ] && grep -q '"summary":true' "$log"; then
    got=$(weights "$log")
    echo "finished after $kills kill(s): weights $got, uninterrupted $want"
    [ $kills -ge 2 ] || { echo "FAIL: fewer than 2 kills landed; the test did not test"; exit 1; }
    [ "$got" = "$want" ] && { echo PASS; exit 0; }
    echo "FAIL: the resumed run's final weights differ"; exit 1
  fi
  # A non-kill failure (a refusal, a crash of our own) fails the test.
  if [ $rc -ne 137 ] && [ "$mode" = threads ]; then echo "FAIL: run $attempt exited $rc"; cat "$log"; exit 1; fi
done
echo "FAIL: not finished after 100 restarts"; exit 1
