#!/usr/bin/env bash
# The elastic libtorch GPT's speedup over the same run without freezing (--max-frozen 0), both
# through tpipe's elastic driver: REPEATS runs of each, alternating, and the median samples/s
# (one run's intervals swing by tens of percent on a 2-core machine; take the /work/MEASURING
# lock on a shared one). Usage: measure_elastic.sh BIN [REPEATS] [TRANSPORT] [extra flags...]
set -euo pipefail
bin=$1 repeats=${2:-3} transport=${3:-threads}
shift $(( $# < 3 ? $# : 3 ))
run=(--elastic --layers 6 --d-model 64 --heads 4 --seq-len 64 --batch 8 --epochs 3 --threads 1 --json "$@")
launch=("$bin")
[ "$transport" = mpi ] && launch=(mpirun --oversubscribe --allow-run-as-root -np 2 "$bin" --transport mpi)
rate() { sed -n 's/.*"samples_per_s":\([0-9.]*\).*/\1/p' | tail -1; }
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
elastic=() frozen0=()
for ((i = 0; i < repeats; ++i)); do
  elastic+=("$("${launch[@]}" "${run[@]}" | rate)")
  frozen0+=("$("${launch[@]}" "${run[@]}" --max-frozen 0 | rate)")
done
e=$(printf '%s\n' "${elastic[@]}" | median) b=$(printf '%s\n' "${frozen0[@]}" | median)
echo "elastic (freezing, AutoPipe, AutoDP, AutoCache): ${elastic[*]} samples/s, median $e"
echo "no freezing (--max-frozen 0):                    ${frozen0[*]} samples/s, median $b"
awk -v e="$e" -v b="$b" 'BEGIN { printf "speedup %.2fx\n", e / b }'
