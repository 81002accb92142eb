# Installs tpipe into a scratch prefix and builds a tiny project that finds it with
# find_package(tpipe CONFIG), then runs it. Fails loudly at the first step that fails.
file(REMOVE_RECURSE ${WORK_DIR})
function(step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "step failed: ${ARGN}\n${out}\n${err}")
  endif()
endfunction()
step(${CMAKE_COMMAND} -S ${SOURCE_DIR} -B ${WORK_DIR}/build -DTPIPE_BUILD_TESTS=OFF -DTPIPE_BUILD_BENCHMARKS=OFF
     -DTPIPE_BUILD_EXAMPLES=OFF -DCMAKE_INSTALL_PREFIX=${WORK_DIR}/prefix)
step(${CMAKE_COMMAND} --install ${WORK_DIR}/build)
step(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/install_consumer -B ${WORK_DIR}/consumer
     -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DCMAKE_CXX_COMPILER=${CXX})
step(${CMAKE_COMMAND} --build ${WORK_DIR}/consumer)
step(${WORK_DIR}/consumer/consumer)
