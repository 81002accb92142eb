# Additions to the test suites owned by the runtime (exec) area. Included from
# tests/CMakeLists.txt after the suites are defined; it adds no target and no flag.
#
# Sanitizer builds (.ci/sanitizers.sh) configure a separate build with -fsanitize=...; when
# ctest runs the exec suite there, these options make any report fail the test.
if(TARGET tpipe_tests_exec)
  set_tests_properties(exec PROPERTIES
    ENVIRONMENT "TSAN_OPTIONS=halt_on_error=1 second_deadlock_stack=1;ASAN_OPTIONS=detect_leaks=1:abort_on_error=1;UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1")
endif()
