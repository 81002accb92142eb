#!/usr/bin/env bash
# Crash test of train_gpt's checkpoints: SIGKILLs a run at random steps and restarts it from
# its newest checkpoint until it finishes; its final weights must be bitwise those of the same
# run without interruption.
#   crash_resume.sh TRAIN_GPT threads
#   crash_resume.sh TRAIN_GPT mpi MPIEXEC "MPIEXEC_FLAGS"
# Under MPI one rank process is killed (Open MPI then ends the whole job), as a lost node would.
set -u
train=$1 mode=$2 mpiexec=${3:-} mpiflags=${4:-}
steps=24
args=(--layers 2 --d-model 32 --heads 2 --seq-len 32 --batch 4 --steps $steps --threads 2 --json --stages 2)
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

RANDOM=${CRASH_SEED:-12345}
kills=0
for attempt in $(seq 1 100); do
  resume=()
  ls -d "$work"/ck/step-* > /dev/null 2>&1 && resume=(--resume "$work/ck")
  log="$work/run$attempt.log"
  "${launch[@]}" "$train" "${args[@]}" --save "$work/ck" --save-every 3 --keep 2 "${resume[@]}" > "$log" 2>&1 &
  pid=$!
  # Kill once the run has printed a step 1..8 steps past its newest checkpoint.
  target=$(( $(ls -d "$work"/ck/step-* 2>/dev/null | tail -1 | sed 's/.*step-0*//;s/^$/0/') + 1 + RANDOM % 8 ))
  while kill -0 $pid 2> /dev/null; do
    if grep -q "\"step\":$target," "$log"; then
      victim=$pid what=train_gpt
      if [ "$mode" = mpi ]; then  # a rank process, child of mpiexec
        kids=($(pgrep -P $pid -x "$(basename "$train")"))
        [ ${#kids[@]} -gt 0 ] || { echo "FAIL: no rank process under mpiexec $pid"; exit 1; }
        victim=${kids[$((RANDOM % ${#kids[@]}))]} what="a rank process of mpiexec"
      fi
      kill -9 "$victim" 2> /dev/null && kills=$((kills + 1)) && echo "attempt $attempt: SIGKILL to $what at step $target"
      break
    fi
    sleep 0.02
  done
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
