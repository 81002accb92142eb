# tpipe-plan freeze / partition / elastic: the JSON each prints has the documented shape and
# agrees with the closed forms; bad input fails with a reason.
# Run: cmake -DTPIPE_PLAN=path/to/tpipe-plan -DWORK_DIR=scratch-dir -P cli_check.cmake
include(${CMAKE_CURRENT_LIST_DIR}/../plan/plan_cli.cmake)

# freeze: ceil(12 (1 - (2/3)^e)) = 0 4 7 9 10 11 11 12 (4 exactly at e = 1).
plan(j freeze --layers 12 --alpha 1/3 --epochs 8 --json)
string(JSON frozen GET "${j}" frozen)
expect("freeze --json frozen" "${frozen}" "[ 0, 4, 7, 9, 10, 11, 11, 12 ]")

# partition: 1..6 into 3 stages: the optimum is 9 ([1 2 3] [4 5] [6]).
plan(j partition --costs 1,2,3,4,5,6 --stages 3 --json)
string(JSON b GET "${j}" boundaries)
string(JSON m GET "${j}" max_stage_cost)
string(JSON n LENGTH "${j}" stage_costs)
expect("partition boundaries" "${b}" "[ 0, 3, 5, 6 ]")
expect("partition max_stage_cost" "${m}" "9")
expect("partition stage_costs length" "${n}" "3")

# elastic: one record per epoch with the re-plan keys, devices = stages x replicas, a speedup.
plan(j elastic --model vit-b16 --devices 16 --alpha 1/3 --epochs 9 --ablation --json)
string(JSON epochs LENGTH "${j}" epochs)
expect("elastic epochs" "${epochs}" "9")
math(EXPR last "${epochs} - 1")
foreach(e RANGE ${last})
  foreach(key epoch frozen stages replicas microbatches predicted_throughput measured_throughput seconds cache)
    string(JSON v ERROR_VARIABLE missing GET "${j}" epochs ${e} ${key})
    if(missing)
      message(FATAL_ERROR "elastic epoch ${e} has no \"${key}\": ${missing}")
    endif()
  endforeach()
  string(JSON k GET "${j}" epochs ${e} stages)
  string(JSON r GET "${j}" epochs ${e} replicas)
  math(EXPR used "${k} * ${r}")
  expect("elastic epoch ${e} stages x replicas" "${used}" "16")
  string(JSON f GET "${j}" epochs ${e} frozen)
endforeach()
string(JSON f GET "${j}" epochs 1 frozen)
expect("elastic epoch 1 frozen" "${f}" "4")
string(JSON rows LENGTH "${j}" ablation)
expect("elastic ablation rows" "${rows}" "4")
string(JSON s GET "${j}" speedup)
string(JSON s4 GET "${j}" ablation 3 speedup)
expect("elastic speedup is the last ablation row" "${s}" "${s4}")

# --lines: one re-plan record per epoch.
plan(text elastic --model vit-b16 --devices 16 --alpha 1/3 --epochs 3 --lines)
string(REGEX MATCHALL "[^\n]+" lines "${text}")
list(LENGTH lines n)
expect("elastic --lines count" "${n}" "3")
list(GET lines 1 line)
string(JSON f GET "${line}" frozen)
expect("elastic --lines epoch 1 frozen" "${f}" "4")

# A model from JSON: two blocks and a head on 2 devices; alpha = 1/2 freezes both by epoch 2,
# so the pipeline shrinks to one stage and the head trains on 2 replicas.
file(WRITE ${WORK_DIR}/tiny_elastic.json [=[
{"name": "tiny", "layers": 2, "samples_per_epoch": 64, "batch": 8, "seconds_per_param": 1e-6,
 "per_microbatch_seconds": 1e-3,
 "units": [{"params": 100, "block": 0}, {"params": 100, "block": 1}, {"params": 10, "block": 2}]}
]=])
plan(j elastic --model ${WORK_DIR}/tiny_elastic.json --devices 2 --alpha 1/2 --epochs 3 --json)
string(JSON k GET "${j}" epochs 2 stages)
string(JSON r GET "${j}" epochs 2 replicas)
expect("tiny model last stages" "${k}" "1")
expect("tiny model last replicas" "${r}" "2")
file(WRITE ${WORK_DIR}/bad_elastic.json [=[{"layers": 2, "units": [], "typo": 1}]=])
refused("unknown key" elastic --model ${WORK_DIR}/bad_elastic.json --devices 2 --alpha 1/2 --epochs 3)

refused("alpha must lie in" freeze --layers 12 --alpha 0 --epochs 3)
refused("--policy must be" freeze --layers 12 --alpha 1/3 --epochs 3 --policy greedy)
refused("use fewer stages" partition --costs 1,2 --stages 3)
refused("--costs expects" partition --costs 1,,2 --stages 1)
refused("must be >= 1 and divide" elastic --model vit-b16 --devices 12 --stages 8 --alpha 1/3 --epochs 2)
refused("unknown elastic model" elastic --model gpt9 --devices 8 --alpha 1/3 --epochs 2)
refused("unexpected argument" elastic --model vit-b16 --devices 8 --alpha 1/3 --epochs 2 --bogus)

# --token-slicing: four cases on one model; on GPT-3 175B (48 stages, batch 2) TeraPipe and
# PipeTransformer each beat no freezing, and both together beat either alone. ViT-B/16 says that
# token slicing does not apply and plans PipeTransformer alone.
plan(t elastic --token-slicing --model gpt3-175b --devices 48 --stages 48 --batch 2 --alpha 1/3 --epochs 4 --json)
foreach(i 0 1 2 3)
  string(JSON c${i} GET "${t}" cases ${i} case)
  string(JSON s${i} GET "${t}" cases ${i} seconds)
endforeach()
expect("token slicing cases" "${c0},${c1},${c2},${c3}" "none,TeraPipe alone,PipeTransformer alone,both")
if(NOT (s1 LESS s0 AND s2 LESS s0 AND s3 LESS s1 AND s3 LESS s2))
  message(FATAL_ERROR "token slicing: expected both < each alone < none, got ${s0} ${s1} ${s2} ${s3}")
endif()
string(JSON sl GET "${t}" cases 3 epochs 0 max_slices)
if(sl LESS 2)
  message(FATAL_ERROR "token slicing: the 48-stage pipeline should be sliced, got ${sl} slice(s)")
endif()
plan(v elastic --token-slicing --model vit-b16 --devices 16 --stages 8 --alpha 1/3 --epochs 3 --json)
string(JSON why GET "${v}" token_slicing)
if(NOT why MATCHES "does not apply")
  message(FATAL_ERROR "vit-b16 with --token-slicing should say token slicing does not apply, got: ${why}")
endif()
refused("not a file" elastic --token-slicing --model ${WORK_DIR}/tiny_elastic.json --devices 2 --alpha 1/2 --epochs 3)
