# tpipe-plan, train_gpt and train_libtorch_gpt read their flags with one reader
# (tools/cli/flag_reader.hpp): the same mistake gets the same sentence and exit status 2 from each.
# Run: cmake -DTPIPE_PLAN=... -DTRAIN_GPT=... [-DTRAIN_LIBTORCH_GPT=...] -P flags_check.cmake
# `program`: the executable and the words before the flags (a list).
function(refused program message)
  execute_process(COMMAND ${program} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  string(REGEX REPLACE "\n.*" "" first "${err}")
  list(GET program 0 exe)
  get_filename_component(name "${exe}" NAME)
  if(NOT rc EQUAL 2 OR NOT first MATCHES "^${name}( [a-z]+)?: ${message}$")
    message(FATAL_ERROR "${name} ${ARGN}: expected exit status 2 and '${message}', got ${rc}: ${first}")
  endif()
endfunction()

# The rules every command shares. tpipe-plan's flags follow its command's name.
foreach(cmd "${TPIPE_PLAN};simulate;--schedule;1f1b" "${TRAIN_GPT}" "${TRAIN_LIBTORCH_GPT}")
  if(cmd STREQUAL "")
    continue()
  endif()
  # Repeated, also through the --name=value form.
  refused("${cmd}" "--stages is given 2 times; give it once" --stages=2 --stages 2)
  refused("${cmd}" "--stages needs a value" --stages)
  refused("${cmd}" "--stages must be an integer in 1\\.\\.[0-9]+, got '2x'" --stages 2x)
  refused("${cmd}" "unexpected argument \"--stage\"; this command knows: .*--stages.*" --stage 2)
  refused("${cmd}" "unexpected argument \"stray\"; this command knows: .*" stray)
endforeach()

# Flags that apply only with another one, in both trainers alike.
foreach(trainer "${TRAIN_GPT}" "${TRAIN_LIBTORCH_GPT}")
  if(trainer STREQUAL "")
    continue()
  endif()
  refused("${trainer}" "--check-tol applies with --check" --check-tol 0.1)
  refused("${trainer}" "--keep applies with --save" --keep 2)
  refused("${trainer}" "--save DIR and --save-every N go together" --save ckpt)
  refused("${trainer}" "--lr needs a positive finite number, got \"inf\"" --lr inf)
  refused("${trainer}" "--steps is given 2 times; give it once" --steps 1 --steps=2)
endforeach()

# What issue 23 found train_libtorch_gpt accepting.
if(NOT TRAIN_LIBTORCH_GPT STREQUAL "")
  refused("${TRAIN_LIBTORCH_GPT}" "--schedule does not apply with --transport none \\(plain libtorch, no pipeline\\)"
          --transport none --schedule zb-v)
  refused("${TRAIN_LIBTORCH_GPT}" "--stages 3 for 2 layers: every stage needs at least one layer \\(raise --layers\\)"
          --stages 3 --layers 2)
endif()
