#!/usr/bin/env bash
# PipeTransformer x TeraPipe on the reference GPT (docs/elastic.md): the four cases -- no freezing,
# TeraPipe alone, PipeTransformer alone, both -- with the same model, data, global batch, steps
# and seed, one train_gpt --elastic run each. Usage: measure_elastic_tokens.sh [path/to/train_gpt]
set -u
gpt=${1:-build/apps/gpt/train_gpt}
common=(--elastic --untied --layers 6 --d-model 32 --heads 2 --seq-len 128 --batch 2 --devices 2 --epochs 2 --alpha 0.5 --json)
for c in none terapipe pipetransformer both; do
  extra=()
  case $c in
    none) extra=(--max-frozen 0) ;;
    terapipe) extra=(--max-frozen 0 --slicer terapipe) ;;
    pipetransformer) extra=() ;;
    both) extra=(--slicer terapipe) ;;
  esac
  out=$("$gpt" "${common[@]}" "${extra[@]}")
  echo "== $c: ${extra[*]}"
  echo "$out" | grep '"epoch"' | python3 -c '
import json,sys
for l in sys.stdin:
    r=json.loads(l)
    print("  interval", r["epoch"], "F", r["frozen"], "K", r["stages"], "D", r["replicas"], "M", r["microbatches"], "slices", [ (m["rows"], m["tokens"]) for m in r.get("slices",[])], "measured %.1f predicted %.1f samples/s" % (r["measured_throughput"], r["predicted_throughput"]))'
  echo "$out" | grep '"summary"' | python3 -c 'import json,sys; r=json.loads(sys.stdin.read()); print("  total %.2f s, %.1f samples/s" % (r["seconds"], r["samples_per_s"]))'
done
