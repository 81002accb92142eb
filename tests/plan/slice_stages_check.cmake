# tpipe-plan slice with one latency model per stage (--model given K times): the JSON has the
# documented "stage_models" record, the simulated per-stage makespan is <= the DP's objective
# (equal with K copies of one model, which plan as the model itself), and a count of models other
# than 1 or K is refused naming both numbers.
# Run: cmake -DTPIPE_PLAN=path/to/tpipe-plan -DROOT=repo-root -P slice_stages_check.cmake
set(body ${ROOT}/tests/errors/inputs/stage_body.json)
set(head ${ROOT}/tests/errors/inputs/stage_head.json)
set(problem --stages 4 --seq-len 2048 --granularity 64)

include(${CMAKE_CURRENT_LIST_DIR}/plan_cli.cmake)
set(REFUSAL_STATUS 2)  # a usage error

# Three body stages and a head: the record, and makespan <= objective, strictly here (the head
# is the slowest stage on the early slices, a body stage on the late ones; fill and drain run at
# the faster stages' times).
plan(j slice --model ${body} --model ${body} --model ${body} --model ${head} ${problem} --json)
string(JSON files LENGTH "${j}" stage_models files)
expect("stage_models.files length" "${files}" "4")
string(JSON busy LENGTH "${j}" stage_models stage_busy_seconds)
expect("stage_models.stage_busy_seconds length" "${busy}" "4")
string(JSON schedule GET "${j}" stage_models schedule)
expect("stage_models.schedule" "${schedule}" "gpipe")
string(JSON objective GET "${j}" objective)
string(JSON makespan GET "${j}" stage_models simulated_makespan)
if(NOT makespan LESS objective)
  message(FATAL_ERROR "per-stage makespan ${makespan} is not below the objective ${objective}")
endif()
string(JSON slices GET "${j}" slices)
plan(one slice --model ${head} ${problem} --json)
string(JSON head_slices GET "${one}" slices)
if(slices STREQUAL head_slices)
  message(FATAL_ERROR "the per-stage plan ${slices} is the head-only plan; the fixture no longer has a crossover")
endif()

# The text form prints the simulated makespan next to the objective.
plan(text slice --model ${body} --model ${body} --model ${body} --model ${head} ${problem})
if(NOT text MATCHES "\nsimulated +[0-9.e-]+ s  \\(GPipe, each stage priced by its own model; -[0-9.]+ % from the objective")
  message(FATAL_ERROR "no simulated line in:\n${text}")
endif()

# K copies of one model: the single model's plan, and the makespan is the objective.
plan(single slice --model ${body} ${problem} --json)
plan(copies slice --model ${body} --model ${body} --model ${body} --model ${body} ${problem} --json)
foreach(key slices microbatches objective t_max)
  string(JSON a GET "${single}" ${key})
  string(JSON b GET "${copies}" ${key})
  expect("K copies: ${key}" "${b}" "${a}")
endforeach()
string(JSON objective GET "${copies}" objective)
string(JSON makespan GET "${copies}" stage_models simulated_makespan)
if(NOT makespan EQUAL objective)
  # cmake has no float arithmetic: allow the last bits of rounding, equal to 12 characters
  string(SUBSTRING "${makespan}" 0 13 m12)
  string(SUBSTRING "${objective}" 0 13 o12)
  expect("K copies: simulated makespan (12 digits)" "${m12}" "${o12}")
endif()

# Refusals: a count other than 1 or K, a built-in model among several, --memory-per-device.
refused("--model is given 3 times with --stages 4; give it once \\(one model for every stage\\) or 4 times \\(one model per stage\\)"
        slice --model ${body} --model ${body} --model ${head} ${problem})
refused("--model is given 2 times with --stages 1; give it once"
        slice --model ${body} --model ${head} --stages 1 --seq-len 8)
refused("--model gpt3-13b \\(stage 1\\) is a built-in model"
        slice --model ${body} --model gpt3-13b --stages 2 --seq-len 8)
refused("--memory-per-device needs one transformer's shape; it does not apply with one model per stage"
        slice --model ${body} --model ${head} --stages 2 --seq-len 8 --memory-per-device 16GiB)
