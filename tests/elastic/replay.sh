#!/usr/bin/env bash
# A recorded elastic run replayed: the first run measures the planner's inputs and records them
# (--record-plan), the second plans from them (--plan-from) and must plan every interval alike
# and end with the same weights, bit for bit (the full 16-digit hash). The replay records what
# it planned from too, which must be the recorded file byte for byte (a replay that measured
# again would record other times). A file of another model is refused, naming the unit counts.
#   replay.sh [LAUNCH...] TRAINER -- TRAINER_FLAGS...   (LAUNCH: mpiexec -np N ..., or nothing)
set -u
launch=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do launch+=("$1"); shift; done
shift
flags=("$@")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; for f in "$work"/*.log; do echo "--- $f"; cat "$f"; done; exit 1; }
# The hash, the plan of every interval (what precedes the throughput) and its token slices.
weights() { sed -n 's/^elastic run: .*; weights \([0-9a-f]*\),.*/\1/p' "$1"; }
plans() { sed -n 's/^\(interval [^;]*\);.*/\1/p; s/.*\(token slices [^;]*\).*/\1/p' "$1"; }

"${launch[@]}" "${flags[@]}" --record-plan "$work/recorded.json" > "$work/record.log" 2>&1 ||
  fail "the recording run failed (exit $?)"
[ -s "$work/recorded.json" ] || fail "the recording run wrote no plan inputs"
want=$(weights "$work/record.log")
[[ "$want" =~ ^[0-9a-f]{16}$ ]] || fail "the weights' hash '$want' is not 16 hex digits"
[[ "$want" == 00000000* ]] && fail "the weights' hash $want starts with eight zeros (a 32-bit value printed as 64 bits)"
[ -n "$(plans "$work/record.log")" ] || fail "no interval lines in the recording run's output"

"${launch[@]}" "${flags[@]}" --plan-from "$work/recorded.json" --record-plan "$work/replayed.json" > "$work/replay.log" 2>&1 ||
  fail "the replaying run failed (exit $?)"
cmp -s "$work/recorded.json" "$work/replayed.json" || fail "the replay planned from other inputs than the recorded ones"
[ "$(plans "$work/replay.log")" = "$(plans "$work/record.log")" ] || fail "the replay planned other intervals"
got=$(weights "$work/replay.log")
[ "$got" = "$want" ] || fail "the replay ended with weights $got, the recording run with $want"
echo "PASS: replayed $(plans "$work/record.log" | grep -c '^interval') interval plan(s); weights $got both times"

# The recorded inputs of this model do not fit a model with one layer more.
layers=$(printf '%s\n' "${flags[@]}" | sed -n '/^--layers$/{n;p}')
other=()
for ((i = 0; i < ${#flags[@]}; i++)); do
  if [ "${flags[$i]}" = --layers ]; then other+=(--layers $((layers + 1))); i=$((i + 1)); else other+=("${flags[$i]}"); fi
done
"${launch[@]}" "${other[@]}" --plan-from "$work/recorded.json" > "$work/other.log" 2>&1 &&
  fail "plan inputs of another model were accepted"
grep -q 'plan inputs file .*recorded.json.*unit times; this model has [0-9]* units' "$work/other.log" ||
  fail "the refusal of another model's plan inputs does not name the file and the unit counts"
echo "PASS: another model's plan inputs refused"
