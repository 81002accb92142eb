# What the cmake -P checks of tpipe-plan share (tests/elastic/cli_check.cmake,
# tests/plan/slice_stages_check.cmake): TPIPE_PLAN is the tool.
#   plan(out ARGS...)        runs tpipe-plan ARGS, which must exit 0; its standard output into `out`
#   refused(pattern ARGS...) tpipe-plan ARGS must fail (with REFUSAL_STATUS where the includer set
#                            it) and print to stderr a refusal matching `pattern`
#   expect(what got want)    `got` must equal `want`
function(plan out)
  execute_process(COMMAND ${TPIPE_PLAN} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE text ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "tpipe-plan ${ARGN} failed (${rc}): ${err}")
  endif()
  set(${out} "${text}" PARENT_SCOPE)
endfunction()

function(refused pattern)
  execute_process(COMMAND ${TPIPE_PLAN} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE text ERROR_VARIABLE err)
  if(DEFINED REFUSAL_STATUS)
    set(wrong_status NOT rc EQUAL ${REFUSAL_STATUS})
  else()
    set(wrong_status rc EQUAL 0)
  endif()
  if(${wrong_status} OR NOT err MATCHES "${pattern}")
    message(FATAL_ERROR "tpipe-plan ${ARGN}: expected exit ${REFUSAL_STATUS} (non-zero) and a refusal matching '${pattern}', "
                        "got rc ${rc}: ${err}")
  endif()
endfunction()

function(expect what got want)
  if(NOT "${got}" STREQUAL "${want}")
    message(FATAL_ERROR "${what}: got '${got}', want '${want}'")
  endif()
endfunction()
