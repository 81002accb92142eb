# Reliability checks (docs/errors.md, docs/reliability.md). Included from tests/CMakeLists.txt.

# The fuzz corpus replayed through the fuzz targets (tools/fuzz.sh runs them under libFuzzer).
if(TPIPE_BUILD_EXAMPLES)  # the cli target reads tpipe-plan's options (tools/tpipe-plan/)
  add_executable(tpipe_tests_fuzz_corpus fuzz/test_corpus.cpp)
  target_link_libraries(tpipe_tests_fuzz_corpus PRIVATE tpipe_catch_main tpipe_cli)
  target_compile_definitions(tpipe_tests_fuzz_corpus PRIVATE TPIPE_FUZZ_CORPUS="${CMAKE_CURRENT_SOURCE_DIR}/fuzz/corpus")
  add_test(NAME fuzz_corpus COMMAND tpipe_tests_fuzz_corpus)
  set_tests_properties(fuzz_corpus PROPERTIES TIMEOUT 300)

  # docs/errors.md: every listed command prints its listed message (the mpirun rows under MPI).
  set(errors_mpi_args)
  if(TPIPE_ENABLE_MPI)
    set(errors_mpi_args ${MPIEXEC_EXECUTABLE} "${TPIPE_MPIEXEC_FLAGS_TEXT}")
  endif()
  add_test(NAME errors_table
           COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/errors/check_errors.py ${PROJECT_SOURCE_DIR}
                   $<TARGET_FILE:tpipe-plan> $<TARGET_FILE:train_gpt> ${errors_mpi_args})
  set_tests_properties(errors_table PROPERTIES TIMEOUT 600)
endif()

# The soak program, short: RSS must not grow over the iterations (the full 10,000-iteration
# figures are in docs/reliability.md).
add_executable(tpipe_soak soak/soak.cpp)
target_link_libraries(tpipe_soak PRIVATE tpipe_warnings)
add_test(NAME soak_rss COMMAND tpipe_soak --iterations 2000 --check-rss)
set_tests_properties(soak_rss PROPERTIES TIMEOUT 600)
