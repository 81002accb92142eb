#!/usr/bin/env bash
# The reference GPT trained over MPI processes equals the same training on threads (tensor ranks
# too: --tp, whose fingerprint is of the shares put together): same loss
# and bitwise-equal final weights (weights_fnv; each process holds its stages only, the
# fingerprint runs over the pipeline's ranks in order), and --check passes in both (D replicas of batch
# B match one replica of batch D*B within --check-tol; replicas bitwise identical). With a 4th
# argument "ucx" (train_gpt built with UCX), some configurations run a third time with the payloads
# over UCX (--link ucx): threads = MPI = UCX bitwise.
#   gpt_threads_vs_processes.sh MPIEXEC "FLAGS" TRAIN_GPT [ucx]
set -u
mpiexec=$1 flags=$2 gpt=$3 ucx=${4:-}
common="--layers 4 --d-model 32 --heads 2 --seq-len 32 --batch 4 --steps 3 --threads 2 --json --check"
summary() { grep '"summary"' | tail -1 | python3 -c 'import json,sys; d=json.loads(sys.stdin.read()); print(d["weights_fnv"], repr(d["last_loss"]), d["check_ok"], d["replicas_identical"])'; }
status=0
while read -r links np cfg; do
  threads=$("$gpt" $common $cfg </dev/null 2>&1 | summary)
  over=mpi
  [ "$ucx" = ucx ] && [ "$links" = mpi+ucx ] && over="mpi ucx"
  for link in $over; do
    procs=$(timeout 300 "$mpiexec" -np "$np" $flags "$gpt" $common $cfg --transport mpi --link $link </dev/null 2>&1 | summary)
    verdict=ok
    [ -n "$threads" ] && [ "$threads" = "$procs" ] && [[ "$threads" == *"True True" ]] || { verdict=MISMATCH; status=1; }
    echo "$verdict  P*D=$np $cfg: threads [$threads] processes over $link [$procs]"
  done
done <<'CONFIGS'
mpi+ucx 2 --stages 2 --schedule 1f1b
mpi 2 --stages 2 --schedule zb-h1
mpi+ucx 3 --stages 3 --schedule terapipe-1f1b --slicer tokens:8,8,16
mpi 4 --stages 2 --dp 2 --schedule interleaved
mpi 2 --stages 1 --dp 2 --schedule gpipe --slicer microbatch:2
mpi 2 --stages 2 --schedule terapipe-gpipe --slicer tokens:16,8,8
mpi 2 --stages 2 --schedule 1f1b --untied
mpi 4 --stages 4 --schedule zb-h1 --recompute
mpi+ucx 6 --stages 2 --dp 3 --schedule interleaved --shard-optimizer
mpi 4 --tp 2 --stages 2 --schedule terapipe-1f1b --slicer grid:2:8,8,16
mpi 4 --tp 2 --stages 2 --schedule zb-h1 --slicer microbatch:2 --scatter-gather
mpi 4 --tp 2 --dp 2 --stages 1 --schedule 1f1b --slicer microbatch:2 --shard-optimizer
mpi+ucx 4 --tp 2 --stages 2 --schedule terapipe-1f1b --slicer grid:2:7,9,16 --sequence-parallel
CONFIGS
exit $status
