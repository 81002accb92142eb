#!/usr/bin/env bash
# Measures the reference GPT's training throughput on this machine's CPU threads: sequential
# vs 2-stage pipelines at batch 1 with a 1024-token sequence (microbatch-only vs token-level,
# uniform and TeraPipe-planned), and the planner check (planned T vs measured iteration).
#
#   examples/gpt/measure.sh [path/to/train_gpt] [steps] [rounds]
#
# Prints a Markdown table; docs/gpt.md holds a run. See measure.py for the method.
set -euo pipefail
exec python3 "$(dirname "$0")/measure.py" "$@"
