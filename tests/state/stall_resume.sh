#!/usr/bin/env bash
# A stopped process never hangs an MPI job: SIGSTOPs one rank process of
# `mpirun -np 2 train_gpt --transport mpi --watchdog W` at a random moment (0-20 ms after a target
# checkpoint, as the crash tests time their SIGKILL), requires the job to end within W + slack
# seconds, non-zero, with the watchdog's report naming the stopped process as silent (or, stopped
# inside the pipeline's run, the runner's watchdog naming the step it waits for); then resumes
# from the newest checkpoint until the run finishes, with the weights of the uninterrupted run,
# bitwise.
#   stall_resume.sh TRAIN_GPT MPIEXEC "MPIEXEC_FLAGS" classic|elastic [STOPS]
set -u
train=$1 mpiexec=$2 mpiflags=$3 kind=$4 stops=${5:-3}
W=3            # --watchdog
slack=20       # the report, MPI_Abort and mpiexec's teardown, on a loaded 2-core machine
# shellcheck disable=SC2206
launch=("$mpiexec" -np 2 $mpiflags)
if [ "$kind" = elastic ]; then
  steps=60 every=4
  args=(--elastic --untied --layers 4 --d-model 64 --heads 2 --seq-len 64 --batch 4 --steps $steps --freeze-every 10
        --alpha 0.5 --max-frozen 3 --threads 2 --json --transport mpi --devices 2)
else
  steps=60 every=3
  args=(--layers 2 --d-model 64 --heads 2 --seq-len 64 --batch 8 --steps $steps --threads 2 --json --stages 2 --transport mpi)
fi
work=$(mktemp -d)
victim=
cleanup() {  # a stopped process must not outlive the test
  [ -n "$victim" ] && { kill -CONT "$victim"; kill -9 "$victim"; } 2> /dev/null
  if [ -n "${pid:-}" ]; then  # timeout -> mpiexec -> rank processes, leaves first
    local mp; mp=$(pgrep -P "$pid" | head -1)
    [ -n "$mp" ] && { pkill -9 -P "$mp"; kill -9 "$mp"; } 2> /dev/null
    kill -9 "$pid" 2> /dev/null
  fi
  rm -rf "$work"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
weights() { grep -o '"weights_fnv":"[0-9a-f]*"' "$1" | tail -1 | cut -d'"' -f4; }
source "$(dirname "${BASH_SOURCE[0]}")/../kill_on_progress.sh"  # newest_checkpoint
newest() { local n; n=$(newest_checkpoint "$1"); echo "${n:-0}"; }

# The elastic planner follows measured times, so two runs may plan two ways (and round apart):
# the reference records its plan inputs and every run after it replays them (--plan-from).
record=()
[ "$kind" = elastic ] && record=(--record-plan "$work/plan.json")
timeout 300 "${launch[@]}" "$train" "${args[@]}" --watchdog $W "${record[@]}" > "$work/reference.log" 2>&1 ||
  { cat "$work/reference.log"; fail "the reference run failed"; }
want=$(weights "$work/reference.log")
[ -n "$want" ] || { cat "$work/reference.log"; fail "no weights in the reference run"; }

RANDOM=${STALL_SEED:-2718}
stopped=0 reported=0
for attempt in $(seq 1 40); do
  resume=()
  ls -d "$work"/ck/step-* > /dev/null 2>&1 && resume=(--resume "$work/ck")
  replay=()  # a resumed run plans from the times its checkpoint saved (the replayed ones)
  [ "$kind" = elastic ] && [ ${#resume[@]} -eq 0 ] && replay=(--plan-from "$work/plan.json")
  log="$work/run$attempt.log"
  target=$(( $(newest "$work/ck") + every * (1 + RANDOM % 2) ))
  timeout 300 "${launch[@]}" "$train" "${args[@]}" --watchdog $W --save "$work/ck" --save-every $every --keep 2 "${resume[@]}" "${replay[@]}" \
    > "$log" 2>&1 &
  pid=$!
  victim=
  # Well before the end: a process stopped after its last collective leaves the others waiting
  # in MPI_Finalize, which no watchdog bounds (docs/runtime.md).
  if [ $stopped -lt "$stops" ] && [ $target -le $((steps - 5 * every)) ]; then
    while kill -0 $pid 2> /dev/null && [ "$(newest "$work/ck")" -lt $target ]; do sleep 0.005; done
    sleep "0.0$(printf '%02d' $((RANDOM % 21)))"
    kids=($(pgrep -P "$(pgrep -P $pid | head -1)" -x "$(basename "$train")"))  # timeout -> mpiexec -> ranks
    if [ ${#kids[@]} -gt 0 ] && kill -0 $pid 2> /dev/null; then
      victim=${kids[$((RANDOM % ${#kids[@]}))]}
      kill -STOP "$victim" && t0=$(now_ms)
      echo "attempt $attempt: SIGSTOP to process $victim after checkpoint $target (newest: $(newest "$work/ck"))"
    fi
  fi
  if [ -n "$victim" ]; then
    while kill -0 $pid 2> /dev/null; do
      if [ $(( $(now_ms) - t0 )) -gt $(( (W + slack) * 1000 )) ]; then
        tail -3 "$log" | cut -c1-200; fail "attempt $attempt: the job still runs $(( $(now_ms) - t0 )) ms after a process was stopped (watchdog $W s)"
      fi
      sleep 0.1
    done
    { wait $pid; } 2> /dev/null
    rc=$? pid=
    took="$(( $(now_ms) - t0 )) ms"
    kill -CONT "$victim" 2> /dev/null; kill -9 "$victim" 2> /dev/null; victim=
    if [ $rc -eq 0 ] && grep -q '"summary":true' "$log"; then  # stopped after its last collective
      echo "attempt $attempt: finished before the stop mattered"
    else
      [ $rc -ne 0 ] || fail "attempt $attempt: the stopped job exited 0 without finishing"
      # The others name the silent process (a collective's watchdog) or the step they wait for
      # in the pipeline (the runner's). A stop that lands while the process talks to mpiexec can
      # make mpiexec itself end the job first (Open MPI: "ORTE_ERROR_LOG: Data unpack would read
      # past end of buffer ... show_help.c"): ended in time too, but not by the watchdog.
      stopped=$((stopped + 1))
      if grep -q "is silent: not in this collective\|watchdog: no rank started a new action" "$log"; then
        reported=$((reported + 1))
        echo "attempt $attempt: the job ended (exit $rc) $took after the stop: $(grep -m1 -o 'watchdog: .\{0,160\}' "$log")"
      elif grep -q "ORTE_ERROR_LOG" "$log"; then
        echo "attempt $attempt: mpiexec ended the job (exit $rc) $took after the stop: $(grep -m1 ORTE_ERROR_LOG "$log")"
      else
        grep -v '^{' "$log"; fail "attempt $attempt: the job ended (exit $rc) $took after the stop without a watchdog report"
      fi
    fi
    continue
  fi
  { wait $pid; } 2> /dev/null
  rc=$? pid=
  [ $rc -eq 0 ] || { cat "$log"; fail "run $attempt (not stopped) exited $rc"; }
  if grep -q '"summary":true' "$log"; then
    got=$(weights "$log")
    echo "finished after $stopped stop(s), $reported reported by the watchdog: weights $got, uninterrupted $want"
    [ $reported -ge 2 ] || fail "fewer than 2 stops were reported by the watchdog; the test did not test"
    [ "$got" = "$want" ] || fail "the resumed run's final weights differ"
    echo PASS
    exit 0
  fi
done
fail "not finished after 40 runs"
