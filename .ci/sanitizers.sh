#!/usr/bin/env bash
# Builds the test suites that run code under AddressSanitizer + UndefinedBehaviorSanitizer and
# under ThreadSanitizer, MPI included, each in its own build directory at -O1, and runs them.
# Each kind builds and runs only what it can find (a full instrumented build of everything twice
# took CI past its time):
# - address: every suite that runs code, and the programs the tests start (train_gpt, the soak
#   and fuzz-corpus programs, the MPI crash program). Not concepts (its checks are
#   static_asserts; it runs nothing), gpt_cuda (the CUDA GPT's kernel bodies checked on the host
#   against the CPU GPT: arithmetic, no memory management of its own), of the three elastic
#   train_gpt runs only the first (the other two take the same code paths with other plans), and
#   not the tpipe-plan CLI nor the tests that run it (errors_table, elastic_cli,
#   plan_slice_recompute): its commands are flag parsing over the planners, which the plan, sim
#   and elastic suites run here, and its parsers are fuzzed under ASan (tools/fuzz.sh: cli, csv,
#   json, ...); it was 10 % of this build (measured 2026-12-06).
# - thread: tpipe's own threaded code: the runtime (exec), the thread and ring communicators
#   (comm), the elastic driver, the checkpoint's background writer (state), the MPI suite with
#   its progress thread, and the NCCL host logic, whose fake runs its kernels and copies on the
#   driver double's device thread (it found a buffer freed under a pending copy). Not the
#   single-threaded planners, schedules, simulator and parsers, nor the programs built on the
#   threaded parts (the GPT, the CUDA engine against its fake), whose threads are the runtime's
#   and the communicators'.
# Never here: install_consumer (builds a consumer with the plain compiler), diagnostics_*
# (compile-only), pytorch_* (PyTorch runs the CSVs), state_crash_* (SIGKILL restart loops: what
# they check, bitwise resume, runs instrumented in state_resume_shapes), libtorch_* (libtorch
# itself is not instrumented), docs_snippets (a Python check).
#
#   .ci/sanitizers.sh                 # both
#   .ci/sanitizers.sh thread          # only TSan
#   .ci/sanitizers.sh address         # only ASan + UBSan
#
# Open MPI's own leaks and races (its progress engine and shared-memory transport are not
# instrumented) are suppressed by library only: .ci/lsan.supp and .ci/tsan.supp name libmpi,
# libopen-pal and libopen-rte frames and nothing of tpipe.
#
# Environment: BUILD_ROOT (default: <repo>/build-sanitizers), JOBS (default: 2).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_root=${BUILD_ROOT:-$root/build-sanitizers}
jobs=${JOBS:-2}
kinds=("$@")
[[ ${#kinds[@]} -eq 0 ]] && kinds=(address thread)
# Per kind: the suites (tpipe_tests_<suite>), the other programs, and the CTest entries.
address_suites=(core slice schedule sim plan exec comm elastic cuda nccl state mpi gpt fuzz_corpus)
address_programs=(tpipe_mpi_crash tpipe_soak train_gpt)
address_tests='^(core|slice|schedule|sim|plan|exec|comm|elastic|cuda|nccl|state|mpi_.*|gpt|gpt_train_terapipe|gpt_train_elastic|gpt_train_(cuda_)?bad_flag|gpt_train_missing_data|gpt_mpi_.*|state_resume_shapes|fuzz_corpus|soak_rss)$'
thread_suites=(exec comm elastic state mpi nccl)
thread_programs=()
thread_tests='^(exec|comm|elastic|state|nccl|mpi_np.*|mpi_progress_.*)$'

export LSAN_OPTIONS="suppressions=$root/.ci/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
for kind in "${kinds[@]}"; do
  case $kind in
    thread)  flags="-fsanitize=thread"
             # ignore_noninstrumented_modules: accesses made inside Open MPI (e.g. its progress
             # thread's memcpy into a receive buffer) are synchronised by atomics TSan cannot see;
             # tpipe's own code stays fully checked.
             export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ignore_noninstrumented_modules=1 suppressions=$root/.ci/tsan.supp"
             ;;
    address) flags="-fsanitize=address,undefined -fno-sanitize-recover=undefined"
             export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:detect_stack_use_after_return=1"
             ;;
    *) echo "sanitizers.sh: unknown kind '$kind' (use thread or address)" >&2; exit 2 ;;
  esac
  dir=$build_root/$kind
  start=$(date +%s)
  echo "== $kind: configure $dir"
  # Warnings are checked by the regular -Werror build; sanitizer builds must not fail on
  # sanitizer-specific diagnostics (e.g. GCC's -Wtsan). -Wmaybe-uninitialized is off here: GCC
  # 12's flow analysis at -O1 through the instrumentation reports about 24 false positives inside
  # std::function, std::variant and std::vector (Catch's main among them), none of which the
  # regular build, which keeps the warning, reports.
  cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=None \
        -DCMAKE_CXX_FLAGS="-O1 -g1 $flags -fno-omit-frame-pointer -Wno-maybe-uninitialized" \
        -DCMAKE_EXE_LINKER_FLAGS="$flags" \
        -DTPIPE_WERROR=OFF -DTPIPE_BUILD_TESTS=ON -DTPIPE_BUILD_EXAMPLES=ON -DTPIPE_BUILD_BENCHMARKS=OFF \
        -DTPIPE_ENABLE_MPI=ON >/dev/null
  suites_var=${kind}_suites[@]; programs_var=${kind}_programs[@]; tests_var=${kind}_tests
  targets="${!programs_var}"
  for suite in "${!suites_var}"; do targets+=" tpipe_tests_$suite"; done
  tests=${!tests_var}
  echo "== $kind: build $targets"
  # shellcheck disable=SC2086
  cmake --build "$dir" -j"$jobs" --target $targets
  built=$(date +%s)
  echo "== $kind: ctest -R '$tests'"
  if [[ $kind == address ]]; then
    # tpipe_tests_mpi's runs (mpi_np*, mpi_progress_*) end with leaks that LeakSanitizer cannot
    # attribute (Open MPI's plugins are unloaded at MPI_Finalize: "<unknown module>", which no
    # suppression can name): there, addresses and UB are checked, leaks are not. Every other
    # test, the other MPI programs included, runs with the leak check.
    ctest --test-dir "$dir" --output-on-failure -j"$jobs" -R "$tests" -E '^(mpi_np.*|mpi_progress_.*)$'
    ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0" ctest --test-dir "$dir" --output-on-failure -j"$jobs" -R '^(mpi_np.*|mpi_progress_.*)$'
  else
    ctest --test-dir "$dir" --output-on-failure -j"$jobs" -R "$tests"
  fi
  echo "== $kind: built in $((built - start)) s, tested in $(( $(date +%s) - built )) s"
done
echo "== sanitizers: clean (${kinds[*]})"
