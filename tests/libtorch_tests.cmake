# Tests of the libtorch adapter (include/tpipe/adapters/libtorch.hpp) and its example
# (apps/libtorch_gpt). Included from tests/CMakeLists.txt; tpipe_libtorch_gpt and
# train_libtorch_gpt are defined later (apps/ is added after tests/) and used by name.
if(TPIPE_BUILD_LIBTORCH_EXAMPLES AND TPIPE_BUILD_EXAMPLES)
  add_executable(tpipe_tests_libtorch libtorch/test_libtorch.cpp)
  target_link_libraries(tpipe_tests_libtorch PRIVATE tpipe_catch_main tpipe_libtorch_gpt)
  target_compile_definitions(tpipe_tests_libtorch PRIVATE
    TPIPE_TEST_CORPUS="${PROJECT_SOURCE_DIR}/apps/gpt/data/tiny_corpus.txt")
  add_test(NAME libtorch COMMAND tpipe_tests_libtorch)
  set_tests_properties(libtorch PROPERTIES TIMEOUT 600 PROCESSORS 2)
  # Gradients on stage threads: tied parameters, leaves outside a stage's list, the slicing check.
  add_executable(tpipe_tests_libtorch_grads libtorch/test_libtorch_grads.cpp)
  target_link_libraries(tpipe_tests_libtorch_grads PRIVATE tpipe_catch_main tpipe_libtorch_gpt)
  add_test(NAME libtorch_grads COMMAND tpipe_tests_libtorch_grads)
  set_tests_properties(libtorch_grads PROPERTIES TIMEOUT 300 PROCESSORS 2)

  # The example end to end: token slices under ZB-H1 against plain libtorch; a bad flag refused.
  add_test(NAME libtorch_gpt_train
           COMMAND train_libtorch_gpt --layers 2 --d-model 32 --heads 2 --seq-len 16 --batch 4 --steps 3
                   --stages 2 --schedule zb-h1 --slicer grid:2:8,4,4 --check-slicing --check --json)
  set_tests_properties(libtorch_gpt_train PROPERTIES TIMEOUT 300 PASS_REGULAR_EXPRESSION "\"check_ok\":true")
  # Schedules with two stages per rank cut the model into 4 stages for 2 ranks: ZB-V (V-shaped
  # placement) and interleaved 1F1B (looped) against plain libtorch; a model with fewer blocks
  # than stages is refused, naming how many it needs.
  add_test(NAME libtorch_gpt_zbv
           COMMAND train_libtorch_gpt --layers 4 --d-model 32 --heads 2 --seq-len 16 --batch 4 --steps 3
                   --stages 2 --schedule zb-v --slicer microbatch:4 --check --json)
  add_test(NAME libtorch_gpt_interleaved
           COMMAND train_libtorch_gpt --layers 5 --d-model 32 --heads 2 --seq-len 16 --batch 4 --steps 3
                   --stages 2 --schedule interleaved --slicer grid:2:8,8 --check --json)
  set_tests_properties(libtorch_gpt_zbv libtorch_gpt_interleaved PROPERTIES TIMEOUT 300 PROCESSORS 2
                       PASS_REGULAR_EXPRESSION "\"check_ok\":true")
  add_test(NAME libtorch_gpt_zbv_stages
           COMMAND train_libtorch_gpt --layers 2 --d-model 32 --heads 2 --seq-len 16 --batch 4 --steps 1
                   --stages 2 --schedule zb-v)
  set_tests_properties(libtorch_gpt_zbv_stages PROPERTIES TIMEOUT 120
                       PASS_REGULAR_EXPRESSION "--stages 2 with --schedule zb-v makes 4 pipeline stages \\(2 on each rank\\), but the model has 2 blocks: every stage needs at least one \\(raise --layers to 4")
  # Elastic (PipeTransformer) through tpipe's elastic driver: two modules freeze, the pipeline
  # shortens to one stage and the freed device becomes a replica; against plain libtorch with the
  # same freezing and replica split (losses and weights within the tolerance derived from the
  # plans, docs/elastic.md "Checking a run").
  set(libtorch_elastic --elastic --layers 2 --d-model 32 --heads 2 --seq-len 16 --steps 6 --freeze-every 2 --alpha 1/2
                       --check --json)
  add_test(NAME libtorch_gpt_elastic COMMAND train_libtorch_gpt ${libtorch_elastic} --batch 4)
  set_tests_properties(libtorch_gpt_elastic PROPERTIES TIMEOUT 300 PROCESSORS 2 PASS_REGULAR_EXPRESSION
                       "\"final_frozen\":3,\"final_stages\":1,\"final_replicas\":2,.*\"replicas_identical\":true,\"replans_kept_weights\":true.*\"check_ok\":true")
  # With TeraPipe slices re-planned at every re-plan on profiled module tables (whether the DP
  # slices depends on the profile of the moment: the equality is asserted; test_libtorch.cpp
  # "[terapipe]" plans on fixed tables and asserts the slices).
  add_test(NAME libtorch_gpt_elastic_terapipe COMMAND train_libtorch_gpt ${libtorch_elastic} --batch 4 --slicer terapipe)
  set_tests_properties(libtorch_gpt_elastic_terapipe PROPERTIES TIMEOUT 300 PROCESSORS 2
                       PASS_REGULAR_EXPRESSION "\"check_ok\":true")
  # A recorded elastic run replayed (--record-plan, then --plan-from): the same plans and the same
  # weights, bit for bit (tests/elastic/replay.sh), also with TeraPipe's token tables; --check
  # passes within the tolerance derived from the plans.
  set(libtorch_replay --elastic --layers 2 --d-model 32 --heads 2 --seq-len 16 --steps 6 --freeze-every 2 --alpha 1/2
                      --batch 4 --check)
  add_test(NAME libtorch_gpt_elastic_replay
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/elastic/replay.sh $<TARGET_FILE:train_libtorch_gpt> -- ${libtorch_replay})
  add_test(NAME libtorch_gpt_elastic_replay_terapipe
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/elastic/replay.sh $<TARGET_FILE:train_libtorch_gpt> -- ${libtorch_replay}
                   --slicer terapipe)
  set_tests_properties(libtorch_gpt_elastic_replay libtorch_gpt_elastic_replay_terapipe PROPERTIES TIMEOUT 300 PROCESSORS 2
                       PASS_REGULAR_EXPRESSION "PASS: another model's plan inputs refused")
  add_test(NAME libtorch_gpt_bad_flag COMMAND train_libtorch_gpt --no-such-flag)
  set_tests_properties(libtorch_gpt_bad_flag PROPERTIES WILL_FAIL TRUE)

  # Save and resume (adapters/libtorch/checkpoint.hpp): bitwise the uninterrupted run, also
  # resumed on one stage and, with MPI, on two processes.
  set(libtorch_resume_mpi)
  if(TPIPE_ENABLE_MPI)
    set(libtorch_resume_mpi ${MPIEXEC_EXECUTABLE} "${TPIPE_MPIEXEC_FLAGS_TEXT}")
  endif()
  add_test(NAME libtorch_resume
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/libtorch/resume.sh $<TARGET_FILE:train_libtorch_gpt> ${libtorch_resume_mpi})
  set_tests_properties(libtorch_resume PROPERTIES TIMEOUT 300 PROCESSORS 2)

  if(TPIPE_ENABLE_MPI)  # one MPI process per stage, against plain libtorch on every process
    add_test(NAME libtorch_gpt_mpi
             COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 ${TPIPE_MPIEXEC_FLAGS} $<TARGET_FILE:train_libtorch_gpt>
                     --transport mpi --threads 1 --layers 2 --d-model 32 --heads 2 --seq-len 16 --batch 4 --steps 3
                     --stages 2 --schedule zb-h1 --slicer grid:2:8,8 --check --json)
    set_tests_properties(libtorch_gpt_mpi PROPERTIES TIMEOUT 300 PROCESSORS 2 PASS_REGULAR_EXPRESSION "\"check_ok\":true")
    # --trace: each process writes its own ranks' timeline of the last step (FILE.process<k>).
    add_test(NAME libtorch_gpt_mpi_trace
             COMMAND bash -c "rm -f \"$1\".process* && \"$2\" -np 2 $3 \"$4\" --transport mpi --threads 1 --layers 2 --d-model 32 --heads 2 --seq-len 16 --batch 4 --steps 2 --stages 2 --schedule zb-h1 --trace \"$1\" && grep -q '\"name\":\"0W3\"' \"$1\".process0 && grep -q '\"name\":\"1I3\"' \"$1\".process1 && ! grep -q '\"name\":\"1F0\"' \"$1\".process0"
                     _ ${CMAKE_CURRENT_BINARY_DIR}/libtorch_gpt_trace.json ${MPIEXEC_EXECUTABLE} "${TPIPE_MPIEXEC_FLAGS_TEXT}"
                     $<TARGET_FILE:train_libtorch_gpt>)
    set_tests_properties(libtorch_gpt_mpi_trace PROPERTIES TIMEOUT 300 PROCESSORS 2)
    # Two stages per process (ZB-V: stages 0 and 3 on process 0; interleaved: 0 and 2): each
    # process builds and steps its two, and the gathered weights come back in model order.
    foreach(schedule zb-v interleaved)
      add_test(NAME libtorch_gpt_mpi_${schedule}
               COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 ${TPIPE_MPIEXEC_FLAGS} $<TARGET_FILE:train_libtorch_gpt>
                       --transport mpi --threads 1 --layers 4 --d-model 32 --heads 2 --seq-len 16 --batch 4 --steps 3
                       --stages 2 --schedule ${schedule} --slicer microbatch:4 --check --json)
      set_tests_properties(libtorch_gpt_mpi_${schedule} PROPERTIES TIMEOUT 300 PROCESSORS 2
                           PASS_REGULAR_EXPRESSION "\"check_ok\":true")
    endforeach()
    # --tp: Megatron's split of the libtorch GPT (tensor x pipeline), threads against MPI processes
    # (over MPI's links and, built with UCX, UCX's) bitwise and each against plain libtorch
    # (tests/libtorch/tensor_parallel.sh).
    add_test(NAME libtorch_gpt_tensor_parallel
             COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/libtorch/tensor_parallel.sh $<TARGET_FILE:train_libtorch_gpt>
                     ${MPIEXEC_EXECUTABLE} "${TPIPE_MPIEXEC_FLAGS_TEXT}" $<$<BOOL:${TPIPE_ENABLE_UCX}>:ucx>)
    set_tests_properties(libtorch_gpt_tensor_parallel PROPERTIES TIMEOUT 300 PROCESSORS 2)
    # --elastic over MPI (tpipe::mpi::elastic_driver): 3 processes, ending as 3 replicas of 1 stage.
    add_test(NAME libtorch_gpt_elastic_mpi
             COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 3 ${TPIPE_MPIEXEC_FLAGS} $<TARGET_FILE:train_libtorch_gpt>
                     --transport mpi --threads 1 --devices 3 ${libtorch_elastic} --batch 6)
    set_tests_properties(libtorch_gpt_elastic_mpi PROPERTIES TIMEOUT 300 PROCESSORS 2 PASS_REGULAR_EXPRESSION
                         "\"final_frozen\":3,\"final_stages\":1,\"final_replicas\":3,.*\"replicas_identical\":true,\"replans_kept_weights\":true.*\"check_ok\":true")
    # Its re-planned pipelines' payloads cross over UCX where it is built (the one above: MPI's).
    set(libtorch_link mpi)
    if(TPIPE_ENABLE_UCX)
      set(libtorch_link ucx)
    endif()
    add_test(NAME libtorch_gpt_elastic_terapipe_mpi
             COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 ${TPIPE_MPIEXEC_FLAGS} $<TARGET_FILE:train_libtorch_gpt>
                     --transport mpi --link ${libtorch_link} --threads 1 ${libtorch_elastic} --batch 4 --slicer terapipe)
    set_tests_properties(libtorch_gpt_elastic_terapipe_mpi PROPERTIES TIMEOUT 300 PROCESSORS 2
                         PASS_REGULAR_EXPRESSION "\"link\":\"${libtorch_link}\".*\"check_ok\":true")
    # docs/libtorch.md's walk-through (tied head, ZB-H1): on two threads of one process (started
    # without mpirun) and on two processes, each against the plain loop.
    add_test(NAME libtorch_user_model_threads COMMAND libtorch_user_model --check)
    add_test(NAME libtorch_user_model_mpi
             COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 ${TPIPE_MPIEXEC_FLAGS} $<TARGET_FILE:libtorch_user_model> --check)
    set_tests_properties(libtorch_user_model_threads libtorch_user_model_mpi PROPERTIES
                         TIMEOUT 300 PROCESSORS 2 PASS_REGULAR_EXPRESSION "check against the plain loop: MATCH")
  endif()
endif()

# The code shown in docs/*.md is the code compiled here (tools/snippets.py).
add_test(NAME docs_snippets COMMAND python3 ${PROJECT_SOURCE_DIR}/tools/snippets.py)
set_tests_properties(docs_snippets PROPERTIES TIMEOUT 60)
