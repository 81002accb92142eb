"""Prints the GPU check's table (tests/gpu/run.sh): every GPU test suite with its status, and
every benchmark with its time and counters (or the reason it skipped)."""
import json
import pathlib
import sys
import xml.etree.ElementTree as ET

out = pathlib.Path(sys.argv[1])
print("| GPU test suite | status | seconds |")
print("| --- | --- | --- |")
junit = out / "gpu-tests.xml"
if junit.exists():
    for case in ET.parse(junit).getroot().iter("testcase"):
        status = case.get("status") or ("failed" if case.find("failure") is not None else "run")
        if case.find("skipped") is not None:
            status = "skipped"
        print(f"| {case.get('name')} | {status} | {float(case.get('time', 0)):.1f} |")
else:
    print("| (no JUnit file: the suites did not run) | | |")

for bench in sorted(out.glob("bench_*.json")):
    print()
    print(f"| {bench.stem} | time | counters |")
    print("| --- | --- | --- |")
    for b in json.loads(bench.read_text()).get("benchmarks", []):
        if b.get("error_occurred"):
            print(f"| {b['name']} | skipped | {b.get('error_message', '')} |")
            continue
        skip = {"name", "run_name", "run_type", "repetitions", "repetition_index", "threads", "iterations",
                "real_time", "cpu_time", "time_unit", "family_index", "per_family_instance_index",
                "aggregate_name", "aggregate_unit", "label", "error_occurred", "error_message"}
        counters = ", ".join(f"{k}={v:.4g}" for k, v in b.items() if k not in skip and isinstance(v, (int, float)))
        print(f"| {b['name']} | {b['real_time']:.4g} {b['time_unit']} | {counters} |")
