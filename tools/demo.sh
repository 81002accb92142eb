#!/usr/bin/env bash
# tpipe's main demonstration, with built-in defaults:
#   1. every schedule simulated on the same 4-rank pipeline, timelines side by side;
#   2. the TeraPipe planner on GPT-3 175B (48 stages, 2048 tokens, batch 2 per pipeline);
#   3. a pipelined iteration really run on CPU threads, its timeline next to the simulated one;
#   4. the reference GPT trained with a TeraPipe-planned token-level pipeline on CPU threads,
#      checked against the same training without a pipeline.
#   5. the reference GPT trained elastically (PipeTransformer): freezing, a shorter pipeline, a
#      new replica, one line per re-plan, and the speedup over the same run without freezing.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh libopenblas-pthread-dev  # the reference GPT's GEMMs
build=${BUILD_DIR:-build}
cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DTPIPE_BUILD_EXAMPLES=ON >/dev/null
echo "building tpipe-plan and train_gpt in $build/ ..."
cmake --build "$build" -j "$(nproc)" --target tpipe-plan train_gpt >/dev/null
plan="$build/tools/tpipe-plan"
section() { printf '\n\033[1m### %s\033[0m\n\n' "$*"; }

section "1. Schedules: 4 pipeline ranks, 8 microbatches; per rank F = I = W = 1 (a transformer block's forward, input-gradient and weight-gradient backward take about the same time)"
"$plan" compare --stages 4 --microbatches 8 --svg-dir "$build/demo"
echo
echo "(SVG pictures of these timelines: $build/demo/*.svg)"

section "2. TeraPipe planner: GPT-3 175B, 48 pipeline stages, 2048 tokens, 2 sequences per pipeline (built-in analytic model, V100, tensor parallel 8)"
"$plan" slice --model gpt3-175b --stages 48 --seq-len 2048 --batch 2 --tensor-parallel 8

section "3. A 1F1B iteration run on CPU threads (stages spin 1 ms per action): simulated and measured timelines"
"$plan" run --schedule 1f1b --stages 2 --microbatches 4 --spin-us 1000

section "4. The reference GPT (4 layers, d=128, byte-level corpus) trained for 100 steps with a TeraPipe-planned token-level 1F1B pipeline on 2 CPU threads, checked against the same training without a pipeline"
"$build/apps/gpt/train_gpt" --stages 2 --schedule terapipe-1f1b --slicer terapipe --batch 1 --seq-len 256 --steps 100 --check

section "5. PipeTransformer: the reference GPT (4 layers, d=64) trained elastically for 3 epochs on 2 CPU threads: layers freeze every epoch, the pipeline shortens, the freed device becomes a data-parallel replica (one line per re-plan), then the same run without freezing"
mkdir -p "$build/demo"
elastic=(--elastic --untied --layers 4 --d-model 64 --heads 4 --seq-len 64 --batch 8 --devices 2 --epochs 3 --alpha 0.5)
"$build/apps/gpt/train_gpt" "${elastic[@]}" | tee "$build/demo/elastic.txt"
"$build/apps/gpt/train_gpt" "${elastic[@]}" --max-frozen 0 >"$build/demo/elastic_no_freezing.txt"
rate() { sed -n 's/^elastic run: \([0-9.e+]*\) samples\/s.*/\1/p' "$1"; }
predicted() { sed -n 's/^elastic run: .*(predicted \([0-9]*\)).*/\1/p' "$1"; }
awk -v a="$(rate "$build/demo/elastic.txt")" -v b="$(rate "$build/demo/elastic_no_freezing.txt")" \
  -v pa="$(predicted "$build/demo/elastic.txt")" -v pb="$(predicted "$build/demo/elastic_no_freezing.txt")" \
  'BEGIN { printf "\nwithout freezing: %.0f samples/s (predicted %.0f); elastic: %.0f samples/s (predicted %.0f); speedup %.2fx (predicted %.2fx)\n", b, pb, a, pa, a / b, pa / pb }'
