#!/usr/bin/env python3
"""Live check against PyTorch 2.15: tpipe's PyTorch-dialect CSVs load into PyTorch and come back equal.

Usage: pytorch_live_roundtrip.py TPIPE_PLAN
Exit 0: passed; 1: failed (says what); 77: skipped (PyTorch >= 2.15 with torch.distributed.pipelining
is not installed; the reason is printed). CTest runs it with the Python in $TPIPE_PYTHON if set.

For each schedule and size, `tpipe-plan simulate ... --csv F --pytorch` writes the compute-only
and the lowered program; PyTorch must
  - load the compute-only one (`_load_csv(format="compute_only")`, which validates and lowers it)
    and hold the same order;
  - load the lowered one verbatim (`format="compute_comms"`, which checks every send has its
    WAIT_SEND and every REDUCE_GRAD its wait), write it back byte for byte, and run its sends,
    receives and computes through its own dry-run simulator (`_simulate_comms_compute`) without a
    deadlock (that simulator reads no other kinds, and no OVERLAP_F_B groups).
"""
import os
import subprocess
import sys
import tempfile

try:
    import torch
    from torch.distributed.pipelining import schedules as S
except Exception as e:  # noqa: BLE001 - any import failure means: no usable PyTorch here
    print(f"SKIP: PyTorch with torch.distributed.pipelining is not importable ({e}); "
          "pip install torch (>= 2.15) and set TPIPE_PYTHON to that interpreter")
    sys.exit(77)
if not hasattr(S, "WAIT_SEND_F"):
    print(f"SKIP: torch {torch.__version__} predates PyTorch 2.15's CSV dialect (no WAIT_SEND_F)")
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures"))
from make_pytorch_fixtures import loop_stages, v_stages  # noqa: E402

CASES = [  # (tpipe schedule, P, M, stages per rank, placement)
    ("gpipe", 4, 8, 1, "loop"), ("1f1b", 4, 8, 1, "loop"), ("zb-h1", 4, 8, 1, "loop"),
    ("interleaved", 4, 8, 2, "loop"), ("interleaved", 4, 6, 2, "loop"), ("looped-bfs", 3, 6, 2, "loop"),
    ("interleaved-zb", 4, 8, 2, "loop"), ("zb-v", 4, 8, 2, "v"), ("zb-v", 6, 12, 2, "v"),
    ("dualpipe-v", 4, 8, 2, "v"),
]


SIMULATED = (S.F, S.B, S.I, S.W, S.OVERLAP_F_B, S.SEND_F, S.RECV_F, S.SEND_B, S.RECV_B, S.WAIT_SEND_F, S.WAIT_SEND_B)


def runtime(P, M, per_rank, style):
    stages = v_stages(0, P) if style == "v" else loop_stages(0, P, per_rank)
    return S._PipelineScheduleRuntime(stages, M, loss_fn=lambda y, t: y.sum())


def cells(path):
    with open(path, newline="") as f:
        return [[c for c in line.rstrip("\r\n").split(",") if c] for line in f]


def main():
    plan = sys.argv[1]
    failures = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, P, M, per_rank, style in CASES:
            what = f"{name} P={P} M={M}"
            compute, lowered = os.path.join(tmp, "c.csv"), os.path.join(tmp, "l.csv")
            base = [plan, "simulate", "--schedule", name, "--stages", str(P), "--microbatches", str(M), "--json"]
            subprocess.run(base + ["--csv", compute, "--pytorch"], check=True, stdout=subprocess.DEVNULL)
            subprocess.run(base + ["--csv", lowered, "--lowered", "--pytorch"], check=True, stdout=subprocess.DEVNULL)
            try:
                rt = runtime(P, M, per_rank, style)
                rt._load_csv(compute, format="compute_only")
                got = [[str(a) for a in rt.pipeline_order[r] if a is not None] for r in range(P)]
                assert got == cells(compute), "PyTorch holds a different compute-only order"
                rt = runtime(P, M, per_rank, style)
                rt._load_csv(lowered, format="compute_comms")
                back = os.path.join(tmp, "back.csv")
                rt._dump_csv(back, format="compute_comms")
                assert open(back, "rb").read() == open(lowered, "rb").read(), "PyTorch writes the lowered CSV back differently"
                # PyTorch's dry-run simulator knows computes, sends, receives and their waits only
                # (it refuses even PyTorch's own lowered programs, which hold UNSHARD): give it those.
                p2p = {r: [a for a in acts if a.computation_type in SIMULATED] for r, acts in
                       rt.pipeline_order_with_comms.items()}
                if any(a.computation_type == S.OVERLAP_F_B for acts in p2p.values() for a in acts):
                    print(f"ok   {what} (not dry-run: PyTorch's simulator cannot read OVERLAP_F_B groups)")
                    continue
                S._simulate_comms_compute(p2p, lambda s: rt.stage_index_to_group_rank[s], P * per_rank)
                print(f"ok   {what}")
            except Exception as e:  # noqa: BLE001 - report every case, then fail
                failures += 1
                print(f"FAIL {what}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    print(f"torch {torch.__version__}: {len(CASES) - failures}/{len(CASES)} passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
