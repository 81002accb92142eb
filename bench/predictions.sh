#!/usr/bin/env bash
# Predictions against measurements, as a table for docs/elastic.md: runs the demo's own runs
# (tests/gpt/predictions.sh: the TeraPipe iteration of section 4, the elastic intervals and runs
# of section 5) ROUNDS times and prints, per prediction, measured / predicted (median, min, max).
# Run it on an idle machine: on 2 cores, one compile halves every measurement.
#   bench/predictions.sh [BUILD_DIR] [ROUNDS]
set -euo pipefail
build=${1:-build}
rounds=${2:-5}
here=$(cd "$(dirname "$0")" && pwd)
train=$build/apps/gpt/train_gpt
[ -x "$train" ] || { echo "predictions.sh: no $train (build the train_gpt target)" >&2; exit 1; }
echo "$(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; load average before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
for r in $(seq "$rounds"); do
  bash "$here/../tests/gpt/predictions.sh" "$train" 1e9 | grep 'measured/predicted' >>"$out"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
python3 - "$out" "$rounds" <<'EOF'
import re, statistics, sys
rows = {}
for line in open(sys.argv[1]):
    m = re.match(r"(.*): predicted (\S+), measured (\S+), measured/predicted (\S+)", line.strip())
    if m:
        rows.setdefault(m[1], []).append((float(m[2]), float(m[3]), float(m[4])))
print(f"| prediction ({sys.argv[2]} rounds) | predicted (median) | measured (median) | measured / predicted: median | min | max |")
print("|---|---|---|---|---|---|")
for name, xs in rows.items():
    p, m, r = (statistics.median(x[i] for x in xs) for i in range(3))
    print(f"| {name} | {p:.4g} | {m:.4g} | {r:.2f} | {min(x[2] for x in xs):.2f} | {max(x[2] for x in xs):.2f} |")
EOF
