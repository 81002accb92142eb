#!/usr/bin/env bash
# Compiles a user's translation units with another compiler than the build's, at a user's flags,
# and fails on any warning (-Werror). tests/consumer/consumer.cmake runs it as the ctest
# consumer_warnings.
#   check.sh CXX FLAGS SYSTEM_INCLUDE_DIRS(:-separated: MPI, CUDA, NCCL) DEFINES(:-separated) SOURCE...
set -euo pipefail
cxx=$1 flags=$2 includes=$3 defines=$4
shift 4
if [[ -z $cxx || $cxx == *NOTFOUND ]]; then
  echo "consumer_warnings: skipped: no second C++ compiler (clang++ beside GCC, or g++ beside Clang) on this machine"
  exit 77
fi
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
args=(-std=c++20 $flags -c -o /dev/null -I"$root/include")  # tpipe's headers: -I, so that their warnings show
IFS=: read -r -a dirs <<<"$includes"
for d in "${dirs[@]}"; do [[ -n $d ]] && args+=(-isystem "$d"); done
IFS=: read -r -a defs <<<"$defines"
for d in "${defs[@]}"; do [[ -n $d ]] && args+=(-D"$d"); done
echo "consumer_warnings: $("$cxx" --version | head -1), flags: $flags"
status=0
for src in "$@"; do
  echo "== $(basename "$src")"
  "$cxx" "${args[@]}" "$src" || status=1
done
exit $status
