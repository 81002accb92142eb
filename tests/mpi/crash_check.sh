#!/usr/bin/env bash
# A process that throws, exits or is killed mid-iteration: the whole job must end (non-zero)
# within the watchdog time, and what it prints must name the failed rank.
#   crash_check.sh MPIEXEC "FLAGS" CRASH_EXE throw|exit|kill|uncaught|stop_at_end|stop_before_STEP|stop_inside_split|stop_while_busy
set -u
mpiexec=$1 flags=$2 exe=$3 how=$4
start=$(date +%s)
out=$(timeout 60 "$mpiexec" -np 2 $flags "$exe" "$how" 2>&1 </dev/null)
rc=$?
took=$(( $(date +%s) - start ))
stopped=$(grep -o "stopping.*, pid [0-9]*" <<<"$out" | grep -o "[0-9]*$")
[ -n "$stopped" ] && kill -9 "$stopped" 2> /dev/null  # a stopped process must not outlive the test
echo "$out"
echo "crash_check: '$how': exit status $rc after ${took} s"
fail() { echo "crash_check: FAILED: $*"; exit 1; }
[ "$rc" -ne 0 ] || fail "the job exited 0"
[ "$rc" -ne 124 ] || fail "the job hung (killed by timeout after 60 s)"
[ "$took" -le 20 ] || fail "the job took ${took} s, longer than the watchdog (5 s) allows"
case $how in
  throw) grep -q "process 0: the iteration failed on process 1 (replica 0): rank 1" <<<"$out" || fail "process 0 did not name rank 1"
         grep -q "process 1: rank 1 .*injected fault (throw)" <<<"$out" || fail "process 1 did not report its fault" ;;
  exit)  grep -Eq "rank 1|\[\[[0-9]+,1\],1\]" <<<"$out" || fail "nothing names the process that exited" ;;
  uncaught) grep -q "process 1: uncaught: rank 1 .*injected fault (throw)" <<<"$out" || fail "process 1 did not print its error"
            ! grep -q "Process received signal" <<<"$out" || fail "Open MPI's signal handler ran (std::abort)" ;;
  stop_at_end) grep -q "process 1: finished" <<<"$out" || fail "the run did not finish before the stop"
               grep -q "process 0: the job's other processes did not all reach MPI_Finalize within the watchdog bound (2.0 s)" <<<"$out" ||
                 fail "process 0 did not name the wait in MPI_Finalize" ;;
  stop_before_*|stop_inside_split)
         step=${how#stop_before_} where=before
         [ "$how" = stop_inside_split ] && step=split where=inside
         case $step in
           launch) waits="tpipe::mpi::agree" ;;
           world) waits="tpipe::mpi::communicator (MPI_Comm_dup)" ;;
           nccl_id) waits="tpipe::nccl::exchange_through_mpi (MPI_Ibcast of the ncclUniqueId)" ;;
           split) waits="tpipe::mpi::communicator::split" ;;
           transport) waits="tpipe::mpi::transport (the layout agreement)" ;;
           runner) waits="tpipe::mpi::transport::agree (the runner's program)" ;;
           *) fail "unknown set-up step '$step'" ;;
         esac
         grep -q "process 1: stopping $where $step" <<<"$out" || fail "process 1 did not stop $where $step"
         grep -Fq "process 0: watchdog: process 0 waits in $waits #" <<<"$out" || fail "process 0 did not name its wait in $waits"
         grep -Eq "made no progress for 2\.[0-9] s \(the bound is 2\.0 s\); process 1 is silent: not in this collective" <<<"$out" ||
           fail "process 0 did not name process 1 as silent within the bound" ;;
  stop_while_busy)
         grep -q "process 1: stopping while busy" <<<"$out" || fail "process 1 did not stop"
         grep -Fq "process 0: watchdog: process 0 waits in tpipe::mpi::communicator::broadcast #1" <<<"$out" ||
           fail "process 0 did not name its wait in the broadcast"
         grep -Eq "process 1 \(last heard profiling the plan \(for [0-9.]+ s\)\) is silent" <<<"$out" ||
           fail "process 0 did not name process 1 as silent, with what it was doing" ;;
  kill)  grep -Eq "rank 1 .*signal 9|\[\[[0-9]+,1\],1\]" <<<"$out" || fail "nothing names the killed process" ;;
esac
echo "crash_check: '$how' ok"
