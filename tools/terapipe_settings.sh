#!/usr/bin/env bash
# Prints docs/planner.md's "Against TeraPipe's published results" table: every parallel setting
# of the official repository (docs/papers.md 4.3) planned by `tpipe-plan slice` with the
# built-in calibrated V100 model, 8-token granularity, shared cut.
# Usage: tools/terapipe_settings.sh   (after building tpipe-plan; BUILD_DIR overrides build/)
set -euo pipefail
cd "$(dirname "$0")/.."
plan=${BUILD_DIR:-build}/tools/tpipe-plan
# model preset idx b mp K dp L paper-without paper-with (seconds, from flop_model.py; - if none)
while read -r name model idx b mp K dp L paper_wo paper_w; do
  out=$("$plan" slice --model "$model" --stages "$K" --seq-len "$L" --batch "$b" --tensor-parallel "$mp" \
        --granularity 8 --shared-cut --json)
  python3 - "$name" "$idx" "$b" "$mp" "$K" "$dp" "$L" "$paper_wo" "$paper_w" "$out" <<'PY'
import sys, json
name, idx, b, mp, K, dp, L, pwo, pw, out = sys.argv[1:]
o = json.loads(out)
paper = f"{pwo} → {pw} s ({float(pwo) / float(pw):.2f}x)" if pwo != '-' else ''
mode = 'shared' if o['exact'] else f"shared, balanced (≤ {100 * (o['objective'] / o['lower_bound'] - 1):.2f} %)"
print(f"| {name} | {idx} | {b} | {mp} | {K} | {dp} | {L} | {mode} | {o['microbatch_only_objective']:.3f} → "
      f"{o['objective']:.3f} s ({o['speedup_over_microbatch_only']:.2f}x) | {len(o['microbatches'])} mb × "
      f"{len(o['slices'])} slices | {paper} |")
PY
done <<'T'
gpt3-1b gpt3-1b 0 8 1 24 8 2048 - -
gpt3-1b gpt3-1b 1 16 1 24 8 2048 - -
gpt3-1b gpt3-1b 2 36 8 12 2 2048 - -
gpt3-1b gpt3-1b 3 48 8 24 1 2048 - -
gpt3-1b gpt3-1b 4 48 8 12 2 2048 - -
gpt3-1b gpt3-1b 5 72 8 24 1 2048 0.913 0.913
gpt3-13b gpt3-13b 0 2 1 40 8 2048 - -
gpt3-13b gpt3-13b 1 4 1 40 8 2048 - -
gpt3-13b gpt3-13b 2 7 1 40 8 2048 - -
gpt3-13b gpt3-13b 3 12 8 20 2 2048 - -
gpt3-13b gpt3-13b 4 16 8 20 2 2048 - -
gpt3-13b gpt3-13b 5 20 8 40 1 2048 - -
gpt3-13b gpt3-13b 6 20 8 20 2 2048 - -
gpt3-13b gpt3-13b 7 32 8 40 1 2048 1.863 1.328
gpt3-44b gpt3-44b 0 8 8 48 1 2048 - -
gpt3-44b gpt3-44b 1 4 8 24 2 2048 - -
gpt3-44b gpt3-44b 2 2 1 96 4 2048 - -
gpt3-175b gpt3-175b 0 2 8 48 1 2048 5.822 1.160
gpt3-175b gpt3-175b 1 2 4 96 1 2048 - -
gpt3-13b-4096 gpt3-13b 0 8 8 40 1 4096 - -
gpt3-13b-6144 gpt3-13b 0 4 8 40 1 6144 - -
gpt3-13b-8192 gpt3-13b 0 2 8 40 1 8192 - -
T
