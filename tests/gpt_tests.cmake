# Tests of the reference GPT (apps/gpt). Included from tests/CMakeLists.txt.
# tpipe_gpt and train_gpt are defined later (apps/ is added after tests/); they are linked
# and run by name, which CMake resolves when it generates the build.
if(TPIPE_BUILD_EXAMPLES)
  file(GLOB gpt_test_sources CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/gpt/test_*.cpp)
  add_executable(tpipe_tests_gpt ${gpt_test_sources})
  target_link_libraries(tpipe_tests_gpt PRIVATE tpipe_catch_main tpipe_gpt)
  target_compile_definitions(tpipe_tests_gpt PRIVATE TPIPE_GPT_TEST_DIR="${CMAKE_CURRENT_SOURCE_DIR}/gpt")
  add_test(NAME gpt COMMAND tpipe_tests_gpt)
  set_tests_properties(gpt PROPERTIES TIMEOUT 600)
  # The CUDA GPT's kernel bodies and shape checks on the host, against the CPU GPT (every build).
  tpipe_test_suite(gpt_cuda tpipe_gpt tpipe_gpt_cuda_kernels)

  # train_gpt end to end: a TeraPipe-planned 2-stage run checked against the non-pipelined one,
  # and the refusals (bad flag, missing data file) exit non-zero with a message.
  add_test(NAME gpt_train_terapipe
           COMMAND train_gpt --layers 2 --d-model 32 --heads 2 --seq-len 32 --batch 2 --steps 3 --stages 2
                   --schedule terapipe-1f1b --slicer terapipe --granularity 8 --check --json)
  set_tests_properties(gpt_train_terapipe PROPERTIES TIMEOUT 300 PASS_REGULAR_EXPRESSION "\"check_ok\":true")
  # Elastic training (PipeTransformer) on threads: 2 devices, 4 layers freezing by alpha = 1/2
  # every 80 steps, more than an epoch so that the cache serves; bitwise equal to the same
  # freezing without pipelines, replicas or a cache.
  set(TPIPE_GPT_ELASTIC_ARGS --elastic --untied --layers 4 --d-model 32 --heads 2 --seq-len 32 --batch 4
      --steps 400 --freeze-every 80 --alpha 0.5 --check --json)
  add_test(NAME gpt_train_elastic COMMAND train_gpt ${TPIPE_GPT_ELASTIC_ARGS})
  set_tests_properties(gpt_train_elastic PROPERTIES TIMEOUT 300 PASS_REGULAR_EXPRESSION "\"check_ok\":true")
  # A tied LM head (the token embedding) freezes with layer 0; the head reads it frozen.
  set(TPIPE_GPT_ELASTIC_TIED_ARGS ${TPIPE_GPT_ELASTIC_ARGS})
  list(REMOVE_ITEM TPIPE_GPT_ELASTIC_TIED_ARGS --untied)
  add_test(NAME gpt_train_elastic_tied COMMAND train_gpt ${TPIPE_GPT_ELASTIC_TIED_ARGS})
  set_tests_properties(gpt_train_elastic_tied PROPERTIES TIMEOUT 300 PASS_REGULAR_EXPRESSION "\"frozen\":4.*\"check_ok\":true")
  # TeraPipe inside it: every re-plan re-slices tokens for the new depth on the profiled per-layer
  # latencies; bitwise equal to the same freezing run unit by unit with the same slices. Whether
  # the DP cuts a sequence at all depends on the latencies profiled on this machine at this moment
  # (on a loaded CI machine it once chose whole sequences in every interval), so this end-to-end
  # run asserts the equality only; tests/gpt/test_elastic_terapipe.cpp plans on fixed latencies
  # and asserts that the slices are there.
  add_test(NAME gpt_train_elastic_terapipe COMMAND train_gpt ${TPIPE_GPT_ELASTIC_ARGS} --slicer terapipe)
  set_tests_properties(gpt_train_elastic_terapipe PROPERTIES TIMEOUT 300
                       PASS_REGULAR_EXPRESSION "\"check_ok\":true")
  # Without AutoPipe the pipeline keeps its stages: freezing stops where each would lose its last
  # active unit (here 3 of 4 layers on 2 stages), instead of failing.
  add_test(NAME gpt_train_elastic_no_autopipe COMMAND train_gpt ${TPIPE_GPT_ELASTIC_ARGS} --no-autopipe)
  set_tests_properties(gpt_train_elastic_no_autopipe PROPERTIES TIMEOUT 300
                       PASS_REGULAR_EXPRESSION "\"frozen\":3.*\"check_ok\":true")
  # --device cuda: a flag that does not apply is refused in every build; with CUDA, a checked
  # 2-stage token-sliced run on one GPU, which CTest reports skipped where there is no GPU.
  add_test(NAME gpt_train_cuda_bad_flag COMMAND train_gpt --device cuda --dp 2)
  set_tests_properties(gpt_train_cuda_bad_flag PROPERTIES WILL_FAIL TRUE)
  if(TPIPE_ENABLE_CUDA)
    add_test(NAME gpt_train_cuda
             COMMAND train_gpt --device cuda --layers 2 --d-model 32 --heads 2 --seq-len 32 --batch 4 --steps 3
                     --stages 2 --schedule terapipe-1f1b --slicer tokens:8,8,16 --check --json)
    set_tests_properties(gpt_train_cuda PROPERTIES TIMEOUT 300 LABELS gpu PASS_REGULAR_EXPRESSION "\"check_ok\":true"
                         SKIP_REGULAR_EXPRESSION "no usable CUDA GPU")
    add_test(NAME gpt_train_cuda_bf16
             COMMAND train_gpt --device cuda --precision bf16 --layers 2 --d-model 32 --heads 2 --seq-len 32 --batch 4
                     --steps 3 --stages 2 --schedule 1f1b --slicer microbatch:4 --check --json)
    set_tests_properties(gpt_train_cuda_bf16 PROPERTIES TIMEOUT 300 LABELS gpu PASS_REGULAR_EXPRESSION "\"check_ok\":true"
                         SKIP_REGULAR_EXPRESSION "no usable CUDA GPU")
  endif()
  # What the demo predicts beside its measurements (the TeraPipe iteration, the elastic intervals'
  # and runs' samples/s), within 2x of what its runs at reduced length measure. Alone on the
  # machine (RUN_SERIAL): a parallel test would take the cores the measurement counts on.
  add_test(NAME gpt_predictions COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/gpt/predictions.sh $<TARGET_FILE:train_gpt> 2)
  set_tests_properties(gpt_predictions PROPERTIES TIMEOUT 300 RUN_SERIAL TRUE)
  add_test(NAME gpt_train_bad_flag COMMAND train_gpt --no-such-flag)
  set_tests_properties(gpt_train_bad_flag PROPERTIES WILL_FAIL TRUE)
  add_test(NAME gpt_train_missing_data COMMAND train_gpt --data ${CMAKE_CURRENT_BINARY_DIR}/no/such/file.txt)
  set_tests_properties(gpt_train_missing_data PROPERTIES WILL_FAIL TRUE)
endif()

if(TPIPE_BUILD_EXAMPLES)
  # SIGTERM stops elastic training at a step boundary (over MPI: one signalled process stops both).
  add_test(NAME gpt_elastic_stop_threads COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/gpt/elastic_stop.sh $<TARGET_FILE:train_gpt> threads)
  set_tests_properties(gpt_elastic_stop_threads PROPERTIES TIMEOUT 300 PROCESSORS 2)
  if(TPIPE_ENABLE_MPI)
    add_test(NAME gpt_elastic_stop_mpi COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/gpt/elastic_stop.sh $<TARGET_FILE:train_gpt> mpi
                                               ${MPIEXEC_EXECUTABLE} "${TPIPE_MPIEXEC_FLAGS_TEXT}")
    set_tests_properties(gpt_elastic_stop_mpi PROPERTIES TIMEOUT 300 PROCESSORS 2)
  endif()
  # Elastic checkpoints: resumed mid-interval, at an interval's end and after SIGKILLs, the weights
  # of the run that saved them, bitwise (under MPI: resumed from the threads' checkpoints).
  add_test(NAME gpt_elastic_resume_threads COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/gpt/elastic_resume.sh $<TARGET_FILE:train_gpt> threads)
  set_tests_properties(gpt_elastic_resume_threads PROPERTIES TIMEOUT 300 PROCESSORS 2)
  if(TPIPE_ENABLE_MPI)
    add_test(NAME gpt_elastic_resume_mpi COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/gpt/elastic_resume.sh $<TARGET_FILE:train_gpt> mpi
                                                 ${MPIEXEC_EXECUTABLE} "${TPIPE_MPIEXEC_FLAGS_TEXT}")
    set_tests_properties(gpt_elastic_resume_mpi PROPERTIES TIMEOUT 300 PROCESSORS 2)
  endif()
  # A recorded elastic run replayed (--record-plan, then --plan-from): the same plans and the same
  # weights, bit for bit; with TeraPipe slices the token tables are replayed too; over MPI every
  # process plans from the file.
  set(TPIPE_GPT_REPLAY_ARGS --elastic --untied --layers 4 --d-model 32 --heads 2 --seq-len 32 --batch 4
      --steps 60 --freeze-every 20 --alpha 0.5 --check)
  add_test(NAME gpt_elastic_replay_threads
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/elastic/replay.sh $<TARGET_FILE:train_gpt> -- ${TPIPE_GPT_REPLAY_ARGS})
  add_test(NAME gpt_elastic_replay_terapipe
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/elastic/replay.sh $<TARGET_FILE:train_gpt> -- ${TPIPE_GPT_REPLAY_ARGS}
                   --slicer terapipe)
  set_tests_properties(gpt_elastic_replay_threads gpt_elastic_replay_terapipe PROPERTIES TIMEOUT 300 PROCESSORS 2
                       PASS_REGULAR_EXPRESSION "PASS: another model's plan inputs refused")
  if(TPIPE_ENABLE_MPI)
    add_test(NAME gpt_elastic_replay_mpi
             COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/elastic/replay.sh ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2
                     ${TPIPE_MPIEXEC_FLAGS} $<TARGET_FILE:train_gpt> -- --transport mpi --devices 2 ${TPIPE_GPT_REPLAY_ARGS})
    set_tests_properties(gpt_elastic_replay_mpi PROPERTIES TIMEOUT 300 PROCESSORS 2
                         PASS_REGULAR_EXPRESSION "PASS: another model's plan inputs refused")
  endif()
endif()

# The reference GPT over MPI processes equals the same training on threads, bitwise.
if(TPIPE_BUILD_EXAMPLES AND TPIPE_ENABLE_MPI)
  add_test(NAME gpt_mpi_equals_threads
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/mpi/gpt_threads_vs_processes.sh ${MPIEXEC_EXECUTABLE}
                   "${TPIPE_MPIEXEC_FLAGS_TEXT}" $<TARGET_FILE:train_gpt> $<$<BOOL:${TPIPE_ENABLE_UCX}>:ucx>)
  set_tests_properties(gpt_mpi_equals_threads PROPERTIES TIMEOUT 600 PROCESSORS 2)
  # Tensor-parallel stages (--tp) over T x P x D processes, checked against the model at T = 1.
  add_test(NAME gpt_mpi_tensor_parallel
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/mpi/gpt_tensor_parallel.sh ${MPIEXEC_EXECUTABLE}
                   "${TPIPE_MPIEXEC_FLAGS_TEXT}" $<TARGET_FILE:train_gpt>)
  set_tests_properties(gpt_mpi_tensor_parallel PROPERTIES TIMEOUT 600 PROCESSORS 2 FAIL_REGULAR_EXPRESSION "FAIL")
  # A TeraPipe plan profiled on process 0 and broadcast (plans depend on timings, so this run is
  # checked against the non-pipelined reference rather than against a thread run).
  add_test(NAME gpt_mpi_terapipe_planned
           COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 ${TPIPE_MPIEXEC_FLAGS} $<TARGET_FILE:train_gpt>
                   --transport mpi --layers 2 --d-model 32 --heads 2 --seq-len 32 --batch 2 --steps 3 --stages 2
                   --schedule terapipe-1f1b --slicer terapipe --granularity 8 --check --json)
  set_tests_properties(gpt_mpi_terapipe_planned PROPERTIES TIMEOUT 300 PROCESSORS 2 PASS_REGULAR_EXPRESSION "\"check_ok\":true")
  # Elastic training with one device per process: the 2-stage pipeline becomes 2 replicas in 2
  # processes (transport and communicators re-formed, state broadcast); bitwise the reference's.
  add_test(NAME gpt_mpi_elastic
           COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 ${TPIPE_MPIEXEC_FLAGS} $<TARGET_FILE:train_gpt>
                   --transport mpi --devices 2 ${TPIPE_GPT_ELASTIC_ARGS})
  set_tests_properties(gpt_mpi_elastic PROPERTIES TIMEOUT 300 PROCESSORS 2 PASS_REGULAR_EXPRESSION "\"check_ok\":true")
  if(TPIPE_ENABLE_UCX)  # the same, tied, with its payloads over UCX: every plan's transport gets a UCX engine
    add_test(NAME gpt_mpi_elastic_ucx
             COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 ${TPIPE_MPIEXEC_FLAGS} $<TARGET_FILE:train_gpt>
                     --transport mpi --link ucx --devices 2 ${TPIPE_GPT_ELASTIC_TIED_ARGS})
    set_tests_properties(gpt_mpi_elastic_ucx PROPERTIES TIMEOUT 300 PROCESSORS 2
                         PASS_REGULAR_EXPRESSION "\"check_ok\":true[^\n]*\"link\":\"ucx\"")
  endif()
  # TeraPipe inside it over MPI: process 0 profiles the token latencies and shares them
  # (tpipe::mpi::share_plan_inputs), so both processes plan the same slices.
  add_test(NAME gpt_mpi_elastic_terapipe
           COMMAND ${MPIEXEC_EXECUTABLE} ${MPIEXEC_NUMPROC_FLAG} 2 ${TPIPE_MPIEXEC_FLAGS} $<TARGET_FILE:train_gpt>
                   --transport mpi --devices 2 ${TPIPE_GPT_ELASTIC_ARGS} --slicer terapipe)
  set_tests_properties(gpt_mpi_elastic_terapipe PROPERTIES TIMEOUT 300 PROCESSORS 2 PASS_REGULAR_EXPRESSION "\"check_ok\":true")
endif()
