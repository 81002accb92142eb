# Installs tpipe into a scratch prefix and builds a tiny project that finds it with
# find_package(tpipe CONFIG), then runs it; with TREES (mpi, cuda, nccl: those this build
# enables) it also builds a program against each of those components (and runs the CUDA one,
# which needs no GPU). Fails loudly at the first step that fails.
cmake_minimum_required(VERSION 3.23)  # script mode: policies (IN_LIST)
string(REPLACE "," ";" tree_list "${TREES}")  # passed comma-separated (a ; would split step()'s arguments)
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
     -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix -DCMAKE_CXX_COMPILER=${CXX} "-DTREES=${TREES}")
step(${CMAKE_COMMAND} --build ${WORK_DIR}/consumer)
step(${WORK_DIR}/consumer/consumer)
if("cuda" IN_LIST tree_list)
  step(${WORK_DIR}/consumer/consumer_cuda)
endif()
