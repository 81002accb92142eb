#!/usr/bin/env bash
# Checkpoints of elastic training (train_gpt --elastic): a run resumed from any of its checkpoints
# -- mid-interval, at an interval's end, on threads or under mpirun -- and a run SIGKILLed at
# random moments and restarted from its newest checkpoint until it finishes, end with the
# weights of the run that saved them, bitwise.
#   elastic_resume.sh TRAIN_GPT threads
#   elastic_resume.sh TRAIN_GPT mpi MPIEXEC "MPIEXEC_FLAGS"
# Plans follow measured unit times, which a checkpoint keeps: every run here plans with the
# reference run's (a resumed run reads them), so all choose its microbatches and replicas.
set -u
train=$1 mode=$2 mpiexec=${3:-} mpiflags=${4:-}
steps=100
args=(--elastic --untied --layers 4 --d-model 64 --heads 2 --seq-len 64 --batch 4 --steps $steps --freeze-every 10
      --alpha 0.5 --max-frozen 3 --threads 2 --json)
launch=() over=()  # how the resumed and crashed runs are launched
if [ "$mode" = mpi ]; then
  # shellcheck disable=SC2206
  launch=("$mpiexec" -np 2 $mpiflags)
  over=(--transport mpi --devices 2)
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
weights() { grep -o '"weights_fnv":"[0-9a-f]*"' "$1" | tail -1 | cut -d'"' -f4; }

# The reference, on threads: saves every 4 steps, all kept.
"$train" "${args[@]}" --save "$work/ref" --save-every 4 > "$work/ref.log" 2>&1 ||
  { cat "$work/ref.log"; fail "the reference run failed"; }
want=$(weights "$work/ref.log")
[ -n "$want" ] || { cat "$work/ref.log"; fail "no weights in the reference run"; }

# Resumed from a step inside an interval (12, 36) and at an interval's end (20).
for at in 12 20 36; do
  ck=$(printf '%s/ref/step-%08d' "$work" $at)
  "${launch[@]}" "$train" "${args[@]}" "${over[@]}" --resume "$ck" > "$work/resume$at.log" 2>&1 ||
    { cat "$work/resume$at.log"; fail "the run resumed from step $at failed"; }
  got=$(weights "$work/resume$at.log")
  [ "$got" = "$want" ] || fail "resumed from step $at ($mode): weights $got, the saving run's $want"
  echo "resumed from step $at ($mode): weights $got, bitwise the saving run's"
done

# The last checkpoint resumed: the run is done (exit 0, the saved weights); a shorter run refuses it.
last=$(printf '%s/ref/step-%08d' "$work" $steps)
"$train" "${args[@]}" --resume "$last" > "$work/done.log" 2> "$work/done.err" || { cat "$work/done.err"; fail "resuming the finished run failed"; }
[ "$(weights "$work/done.log")" = "$want" ] || fail "the finished run's checkpoint gives other weights"
"$train" "${args[@]/#$steps/99}" --resume "$last" > /dev/null 2> "$work/short.err"  # --steps 99
rc=$?
[ $rc -eq 2 ] && grep -q "has trained $steps steps, more than this run's 99" "$work/short.err" ||
  fail "a checkpoint past --steps: exit $rc, $(head -1 "$work/short.err")"

# Crash test: from the reference's first checkpoint, SIGKILL each run at a random moment and
# restart it from its newest checkpoint until it finishes: once the run has committed 1 or 2
# checkpoints past the one it started from (kill_on_progress).
source "$(dirname "${BASH_SOURCE[0]}")/../kill_on_progress.sh"
mkdir "$work/ck" && cp -r "$work/ref/step-00000004" "$work/ck/"
RANDOM=${CRASH_SEED:-4242}
kills=0
for attempt in $(seq 1 60); do
  log="$work/run$attempt.log"
  target=$(( $(newest_checkpoint "$work/ck") + 4 * (1 + RANDOM % 2) ))
  "${launch[@]}" "$train" "${args[@]}" "${over[@]}" --resume "$work/ck" --save "$work/ck" --save-every 4 --keep 2 > "$log" 2>&1 &
  pid=$!
  kill_on_progress "attempt $attempt:" $pid "$work/ck" $target "$mode" "$train"
  case $? in
    0) kills=$((kills + 1)) ;;
    2) kill -9 $pid 2> /dev/null && kills=$((kills + 1)) &&  # no rank process left: mpiexec itself
         echo "attempt $attempt: SIGKILL to mpiexec after checkpoint $target" ;;
  esac
  { wait $pid; } 2> /dev/null
  rc=$?
  if [ $rc -eq 0 ] && grep -q '"summary":true' "$log"; then
    got=$(weights "$log")
    echo "finished after $kills kill(s): weights $got, uninterrupted $want"
    [ $kills -ge 2 ] || fail "fewer than 2 kills landed; the test did not test"
    [ "$got" = "$want" ] || fail "the restarted run's final weights differ"
    echo PASS
    exit 0
  fi
  if [ $rc -ne 137 ] && [ "$mode" = threads ]; then cat "$log"; fail "run $attempt exited $rc"; fi
done
fail "not finished after 60 restarts"
