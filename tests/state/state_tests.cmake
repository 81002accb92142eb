# train_gpt's checkpoints end to end (the library's own tests are tests/state/test_*.cpp).
# Included from tests/CMakeLists.txt; train_gpt is resolved by name when the build is generated.
if(TPIPE_BUILD_EXAMPLES)
  set(state_mpi_args)
  if(TPIPE_ENABLE_MPI)
    set(state_mpi_args ${MPIEXEC_EXECUTABLE} "${TPIPE_MPIEXEC_FLAGS_TEXT}")
  endif()
  # Resumed in the same shape and resharded (stages, schedule, threads <-> MPI): bitwise.
  add_test(NAME state_resume_shapes
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/state/resume_shapes.sh $<TARGET_FILE:train_gpt> ${state_mpi_args})
  set_tests_properties(state_resume_shapes PROPERTIES TIMEOUT 600 PROCESSORS 2)
  # SIGKILLed at random steps and restarted until done: the uninterrupted run's weights.
  add_test(NAME state_crash_threads
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/state/crash_resume.sh $<TARGET_FILE:train_gpt> threads)
  set_tests_properties(state_crash_threads PROPERTIES TIMEOUT 600 PROCESSORS 2)
  # The save directory's rules: one job and one run per directory, --keep, special files,
  # ulimit -f, a closed standard output, a --save that fails on one MPI process.
  add_test(NAME state_save_dir
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/state/save_dir.sh $<TARGET_FILE:train_gpt> ${state_mpi_args})
  set_tests_properties(state_save_dir PROPERTIES TIMEOUT 600 PROCESSORS 2)
  # SIGTERM mid-run: stops at a step boundary, saves that step; resumed, the same weights.
  add_test(NAME state_stop_threads
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/state/stop_resume.sh $<TARGET_FILE:train_gpt> threads)
  set_tests_properties(state_stop_threads PROPERTIES TIMEOUT 300 PROCESSORS 2)
  if(TPIPE_ENABLE_MPI)
    add_test(NAME state_stop_mpi
             COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/state/stop_resume.sh $<TARGET_FILE:train_gpt> mpi ${state_mpi_args})
    set_tests_properties(state_stop_mpi PROPERTIES TIMEOUT 300 PROCESSORS 2)
    add_test(NAME state_crash_mpi
             COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/state/crash_resume.sh $<TARGET_FILE:train_gpt> mpi ${state_mpi_args})
    set_tests_properties(state_crash_mpi PROPERTIES TIMEOUT 600 PROCESSORS 2)
    # SIGSTOPed at random moments: the watchdog names the silent process and ends the job within
    # its bound; restarted until done, the uninterrupted run's weights (classic and --elastic).
    foreach(kind classic elastic)
      add_test(NAME state_stall_${kind}_mpi
               COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/state/stall_resume.sh $<TARGET_FILE:train_gpt> ${state_mpi_args} ${kind})
      set_tests_properties(state_stall_${kind}_mpi PROPERTIES TIMEOUT 600 PROCESSORS 2)
    endforeach()
  endif()
endif()
