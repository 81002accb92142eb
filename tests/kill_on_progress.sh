# Sourced by the crash tests (tests/state/crash_resume.sh, tests/gpt/elastic_resume.sh): they
# SIGKILL a training run at a moment that follows its progress on disk, not its log (mpiexec
# forwards output late) nor the clock (a fast machine finishes a run before a fixed delay).

# newest_checkpoint DIR: the step of DIR's newest step-* checkpoint, 0 if there is none.
newest_checkpoint() { ls -d "$1"/step-* 2> /dev/null | tail -1 | sed 's/.*step-0*//;s/^$/0/'; }

# kill_on_progress LABEL PID DIR TARGET MODE PROGRAM: once DIR holds checkpoint TARGET or a later
# one, 0-20 ms later (within the next steps, or during a save), SIGKILLs PID, or under MODE mpi
# (PID is mpiexec) one of its PROGRAM rank processes at random, and says so after LABEL.
# Returns 0 when a kill landed, 1 when PID ended first, 2 when mpiexec had no rank process left.
kill_on_progress() {
  local label=$1 pid=$2 dir=$3 target=$4 mode=$5 program=$6 victim what kids
  while kill -0 "$pid" 2> /dev/null; do
    if [ "$(newest_checkpoint "$dir")" -ge "$target" ]; then
      sleep "0.0$(printf '%02d' $((RANDOM % 21)))"
      victim=$pid what=$(basename "$program")
      if [ "$mode" = mpi ]; then
        kids=($(pgrep -P "$pid" -x "$(basename "$program")"))
        [ ${#kids[@]} -gt 0 ] || return 2
        victim=${kids[$((RANDOM % ${#kids[@]}))]} what="a rank process of mpiexec"
      fi
      kill -9 "$victim" 2> /dev/null || return 1
      echo "$label SIGKILL to $what after checkpoint $target (newest checkpoint: $(ls "$dir" | tail -1))"
      return 0
    fi
    sleep 0.005
  done
  return 1
}
