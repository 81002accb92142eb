#!/usr/bin/env bash
# train_libtorch_gpt --tp (tpipe/adapters/libtorch/tensor_parallel.hpp): each run is --check'ed
# against plain libtorch (within 1e-5), and the same (t, K) trains bitwise the same weights on
# threads and over MPI processes (the tensor sums are the communicators', in the ring order
# both use). With a 4th argument "ucx", each MPI run is repeated over UCX's links (--link ucx),
# which must train the same bits again. An MPI job of the wrong size is refused, naming the sizes
# and the -np to use.
#   tensor_parallel.sh TRAIN_LIBTORCH_GPT MPIEXEC "MPIEXEC_FLAGS" [ucx]
set -u
train=$1 mpiexec=$2 mpiflags=$3
links=(mpi)
[ "${4:-}" = ucx ] && links+=(ucx)
model=(--layers 4 --d-model 32 --heads 4 --seq-len 16 --batch 4 --steps 3 --threads 1 --check --json)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
weights() { grep -o '"weights_fnv":"[0-9a-f]*"' "$1" | cut -d'"' -f4; }
fail() { echo "FAIL: $*"; for f in "$work"/*.log; do echo "--- $f"; cat "$f"; done; exit 1; }

compare() {  # compare NAME PROCESSES FLAGS...
  local name=$1 np=$2; shift 2
  "$train" --transport threads "$@" "${model[@]}" > "$work/$name-threads.log" 2>&1 || fail "$name: the threads run failed"
  local link a b
  for link in "${links[@]}"; do
    # shellcheck disable=SC2086
    "$mpiexec" -n "$np" $mpiflags "$train" --transport mpi --link "$link" "$@" "${model[@]}" > "$work/$name-$link.log" 2>&1 ||
      fail "$name: the MPI run over $link links failed"
  done
  for run in threads "${links[@]}"; do
    grep -q '"check_ok":true' "$work/$name-$run.log" || fail "$name ($run): not within --check's tolerance of plain libtorch"
  done
  a=$(weights "$work/$name-threads.log")
  [ -n "$a" ] || fail "$name: the threads run printed no weights"
  for link in "${links[@]}"; do
    b=$(weights "$work/$name-$link.log")
    [ "$a" = "$b" ] || fail "$name: threads trained $a, MPI processes over $link links $b"
  done
  echo "PASS $name: threads = $np MPI processes (links: ${links[*]}) bitwise ($a), all within 1e-5 of plain libtorch"
}

compare "t2xK2-zb-h1-token-slices" 4 --tp 2 --stages 2 --schedule zb-h1 --slicer grid:2:8,8
compare "t4xK1" 4 --tp 4 --stages 1 --slicer microbatch:2
compare "t2xK2-interleaved" 4 --tp 2 --stages 2 --schedule interleaved --slicer microbatch:4

# shellcheck disable=SC2086
"$mpiexec" -n 3 $mpiflags "$train" --transport mpi --tp 2 --stages 2 "${model[@]}" > "$work/refused.log" 2>&1 &&
  fail "3 processes for --tp 2 --stages 2 were accepted"
grep -q "2 tensor ranks x 2 pipeline ranks x 1 replica need 4" "$work/refused.log" || fail "the refusal does not name the sizes"
echo "PASS: 3 processes for --tp 2 --stages 2 refused, naming the 4 it needs"
