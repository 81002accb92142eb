"""tpipe-plan search --json gives, for its best configuration, the train_gpt line that runs it:
-np t*K*d processes, --tp t --stages K --dp d, the model's shape, the pipeline's rows as --batch
and the plan's token slices as a grid slicer (they add up to the sequence).
    search_run_line.py TPIPE_PLAN"""
import json
import re
import subprocess
import sys

plan = sys.argv[1]
out = subprocess.run([plan, "search", "--model", "gpt3-1b", "--gpus", "8", "--batch", "8", "--seq-len", "512", "--json"],
                     check=True, capture_output=True, text=True).stdout
best = json.loads(out)["best"]
t, K, d = best["tensor_parallel"], best["stages"], best["data_parallel"]
run = best["run"]
want = [f"mpirun -np {t * K * d} train_gpt --transport mpi", f"--tp {t} --stages {K} --dp {d}", "--seq-len 512",
        f"--batch {best['rows_per_pipeline']}", f"--slicer grid:{len(best['microbatches'])}:"]
missing = [w for w in want if w not in run]
slices = [int(x) for x in re.search(r"--slicer grid:\d+:([\d,]+)", run).group(1).split(",")]
if missing or sum(slices) != 512 or slices != best["slices"]:
    print(f"FAIL: run line {run!r} lacks {missing} or its slices {slices} are not the plan's {best['slices']}")
    sys.exit(1)
print(f"PASS: t={t} K={K} d={d}: {run}")
