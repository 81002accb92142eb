#!/usr/bin/env bash
# Where train_gpt's checkpoints go (docs/checkpoint.md, "The save directory"): one job per
# directory, one run per directory, --keep deleting only this run's older checkpoints, special
# files refused without blocking, a file size limit and a closed standard output as errors (not
# deaths by signal), and a --save that fails on one MPI process ending the whole job with its
# reason. Every command runs under `timeout`: a hang fails the test instead of stalling it.
#   save_dir.sh TRAIN_GPT [MPIEXEC "MPIEXEC_FLAGS"]
set -u
train=$1 mpiexec=${2:-} mpiflags=${3:-}
data=$(cd "$(dirname "${BASH_SOURCE[0]}")/../../apps/gpt/data" && pwd)/tiny_corpus.txt  # train_gpt's default --data
work=$(mktemp -d)
chmod 755 "$work"  # the mode-000 check runs as nobody
trap 'rm -rf "$work"' EXIT
args=(--layers 2 --d-model 16 --heads 2 --seq-len 16 --batch 2 --stages 2 --threads 2 --json)
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
pass() { echo "ok: $*"; }
# expect LABEL STATUS NEEDLE FILE: the command's exit status and a line of its stderr.
expect() {
  local label=$1 want=$2 needle=$3 file=$4 rc=$5
  if [ "$rc" -ne "$want" ]; then fail "$label: exit status $rc, want $want"; sed 's/^/  | /' "$file" | tail -5; return; fi
  if ! grep -qF -- "$needle" "$file"; then fail "$label: stderr lacks: $needle"; sed 's/^/  | /' "$file" | tail -5; return; fi
  pass "$label"
}
steps_in() { (cd "$1" 2> /dev/null && ls -d step-* 2> /dev/null | tr '\n' ' '); }

# 1. Two jobs saving into one directory at once: the second is refused, naming the first.
"$train" "${args[@]}" --steps 100000 --save "$work/ck" --save-every 5 > "$work/first.log" 2> "$work/first.err" &
first=$!
trap 'kill -9 $first 2> /dev/null; rm -rf "$work"' EXIT
for _ in $(seq 1 600); do [ -n "$(steps_in "$work/ck")" ] && break; sleep 0.05; done
timeout 60 "$train" "${args[@]}" --steps 10 --save "$work/ck" --save-every 5 > /dev/null 2> "$work/second.err"
rc=$?
expect "a second job saving into the directory is refused" 1 \
  "is in use by another job (pid $first on host $(hostname))" "$work/second.err" $rc
kill -TERM "$first"
wait "$first"
rc=$?
[ $rc -eq 143 ] || fail "the first job, stopped by SIGTERM, exited $rc (want 143)"
first_steps=$(steps_in "$work/ck")
[ -n "$first_steps" ] || fail "the first job saved nothing"

# 2. Another run (another seed, no --resume) saving into that directory: refused, nothing deleted.
timeout 60 "$train" "${args[@]}" --steps 4 --seed 2 --save "$work/ck" --save-every 1 --keep 1 > /dev/null 2> "$work/other.err"
expect "another run's checkpoints: the directory is refused" 1 ", not of this run (" "$work/other.err" $?
[ "$(steps_in "$work/ck")" = "$first_steps" ] || fail "the other run changed the directory: $(steps_in "$work/ck")"
# The same run, resumed into it, goes on.
last=$(ls -d "$work"/ck/step-* | tail -1 | sed 's/.*step-0*//')
timeout 60 "$train" "${args[@]}" --steps $((last + 2)) --save "$work/ck" --save-every 1 --resume "$work/ck" \
  > /dev/null 2> "$work/same.err" || fail "the same run, resumed into its directory, failed: $(cat "$work/same.err")"

# 3. A run resumed from an older step, --keep 1: deletes its older checkpoints, keeps the newer.
timeout 60 "$train" "${args[@]}" --steps 9 --save "$work/old" --save-every 3 > /dev/null 2>&1 || fail "saving steps 3, 6, 9 failed"
timeout 60 "$train" "${args[@]}" --steps 6 --save "$work/old" --save-every 3 --keep 1 --resume "$work/old/step-00000003" \
  > /dev/null 2> "$work/older.err" || fail "the resume from step 3 failed: $(cat "$work/older.err")"
got=$(steps_in "$work/old")
[ "$got" = "step-00000006 step-00000009 " ] && pass "resumed from an older step, --keep 1 kept the newer step 9" ||
  fail "after a resume from step 3 with --keep 1: $got (want step-00000006 step-00000009)"

# 4. A symlinked step-* is not deleted through, nor does it make --keep delete the real ones.
ln -s "$work/old/step-00000009" "$work/old/step-00000099"
timeout 60 "$train" "${args[@]}" --steps 9 --save "$work/old" --save-every 3 --keep 1 --resume "$work/old/step-00000006" \
  > /dev/null 2> "$work/link.err" || fail "the resume beside a symlinked step failed: $(cat "$work/link.err")"
got=$(steps_in "$work/old")
[ "$got" = "step-00000009 step-00000099 " ] && [ -f "$work/old/step-00000009/manifest.json" ] &&
  pass "a symlinked step-00000099: --keep 1 kept step 9 and the link" || fail "with a symlinked step-00000099: $got"

# 5. Special files where a shard is expected: refused by name, at once.
cp -r "$work/old/step-00000009" "$work/special"
mkfifo "$work/fifo"
for kind in fifo link-to-fifo dev-zero directory; do
  rm -rf "$work/special/rank-0.bin"
  case $kind in
    fifo) mkfifo "$work/special/rank-0.bin"; want="is a FIFO (named pipe), not a regular file" ;;
    link-to-fifo) ln -s "$work/fifo" "$work/special/rank-0.bin"; want="is a FIFO (named pipe), not a regular file" ;;
    dev-zero) ln -s /dev/zero "$work/special/rank-0.bin"; want="is a character device, not a regular file" ;;
    directory) mkdir "$work/special/rank-0.bin"; want="is a directory, not a regular file" ;;
  esac
  timeout 30 "$train" "${args[@]}" --steps 10 --resume "$work/special" > /dev/null 2> "$work/special.err"
  expect "a shard that is a $kind" 1 "checkpoint shard \"$work/special/rank-0.bin\" $want" "$work/special.err" $?
done

# 6. A checkpoint directory of mode 000 (checked as nobody: root reads it anyway).
if [ "$(id -u)" -eq 0 ] && command -v setpriv > /dev/null; then
  cp -r "$work/old/step-00000009" "$work/closed"
  chmod 000 "$work/closed"
  # The trainer and its data as copies in $work: nobody may not traverse the checkout's folders.
  cp "$train" "$work/train_gpt"
  cp "$data" "$work/corpus.txt"
  timeout 30 setpriv --reuid=65534 --regid=65534 --clear-groups "$work/train_gpt" "${args[@]}" --data "$work/corpus.txt" \
    --steps 10 --resume "$work/closed" \
    > /dev/null 2> "$work/closed.err"
  expect "a checkpoint directory of mode 000" 1 "checkpoint directory \"$work/closed\" cannot be read: Permission denied" \
    "$work/closed.err" $?
  chmod 755 "$work/closed"
else
  echo "skipped: mode 000 (needs root and setpriv to check as another user)"
fi

# 7. A file size limit below a shard's size: an error naming it, the previous checkpoint whole.
timeout 60 "$train" "${args[@]}" --steps 2 --save "$work/fsize" --save-every 2 > /dev/null 2>&1 || fail "saving step 2 failed"
(ulimit -f 16; exec timeout 60 "$train" "${args[@]}" --steps 4 --save "$work/fsize" --save-every 2 --resume "$work/fsize" \
  > /dev/null 2> "$work/fsize.err")
expect "ulimit -f 16 (KiB): an error, not SIGXFSZ" 1 "File too large (the file size limit, ulimit -f, is below the shard's size)" \
  "$work/fsize.err" $?
[ "$(steps_in "$work/fsize")" = "step-00000002 " ] || fail "after the failed save: $(steps_in "$work/fsize")"
timeout 60 "$train" "${args[@]}" --steps 2 --resume "$work/fsize" > /dev/null 2> "$work/fsize2.err" ||
  fail "the checkpoint before the failed save does not load: $(cat "$work/fsize2.err")"

# 8. Standard output closed early: stops at the step boundary after saving that step, exit 141.
set -o pipefail
timeout 60 "$train" "${args[@]}" --steps 100000 --save "$work/pipe" --save-every 100000 2> "$work/pipe.err" | head -c 300 > /dev/null
rc=$?
set +o pipefail
expect "stdout closed (| head -c 300)" 141 "the standard output was closed (EPIPE): stopped at the step boundary after step" \
  "$work/pipe.err" $rc
at=$(sed -n 's/.*stopped at the step boundary after step \([0-9]*\) of.*/\1/p' "$work/pipe.err")
[ -n "$at" ] && [ -f "$work/pipe/$(printf 'step-%08d' "$at")/manifest.json" ] &&
  pass "stdout closed: step $at saved" || fail "stdout closed: no checkpoint of the step it stopped after ($at)"

# 9. --save-every beyond --steps: allowed (a save on a signal only), never silent.
timeout 60 "$train" "${args[@]}" --steps 3 --save "$work/never" --save-every 100 > /dev/null 2> "$work/never.err"
rc=$?
[ $rc -eq 0 ] && grep -qF "warning: --save-every 100 is more than --steps 3: no checkpoint will be saved unless SIGINT or SIGTERM" \
  "$work/never.err" && pass "--save-every 100 --steps 3 warns" || fail "--save-every 100 --steps 3: exit $rc, stderr: $(cat "$work/never.err")"

# 10. Over MPI, a --save that cannot be created on process 0: every process ends, the reason printed.
if [ -n "$mpiexec" ]; then
  echo x > "$work/a_file"
  for bad in "$work/a_file" /proc/tpipe_cannot_exist; do
    start=$(date +%s)
    # shellcheck disable=SC2086
    timeout 90 "$mpiexec" -np 2 $mpiflags "$train" "${args[@]}" --transport mpi --steps 4 --save "$bad" --save-every 1 \
      > "$work/mpi.out" 2>&1 < /dev/null
    rc=$?
    took=$(( $(date +%s) - start ))
    if [ $rc -eq 124 ]; then fail "mpirun --save $bad: hung (killed by timeout after 90 s)"; continue; fi
    if [ $rc -eq 0 ]; then fail "mpirun --save $bad exited 0"; continue; fi
    expect "mpirun -np 2 --save $bad (ended in ${took} s, exit $rc)" $rc \
      "train_gpt: cannot create the checkpoint directory \"$bad\"" "$work/mpi.out" $rc
  done
fi

[ $failures -eq 0 ] && echo "PASS: the save directory's rules hold" || { echo "$failures check(s) failed"; exit 1; }
