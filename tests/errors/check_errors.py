#!/usr/bin/env python3
"""Checks docs/errors.md against the programs: every row's command, run from the repository root,
must fail (exit status != 0) and print the row's message as the first line of its stderr.

    check_errors.py REPO_ROOT TPIPE_PLAN TRAIN_GPT

A `...` in a message stands for text that depends on the machine (its memory size). Exit status 0
when every row matches, 1 naming each row that does not.
"""
import json
import re
import shlex
import subprocess
import sys

ROW = re.compile(r"^\|\s*(?P<cls>[^|]*?)\s*\|\s*`(?P<cmd>[^`]+)`\s*\|\s*`(?P<msg>[^`]+)`\s*\|\s*$")


def rows(markdown):
    for line in markdown.splitlines():
        m = ROW.match(line)
        if m:
            yield m.group("cls"), m.group("cmd"), m.group("msg")


def main():
    root, plan, gpt = sys.argv[1:4]
    programs = {"tpipe-plan": plan, "train_gpt": gpt}
    with open(f"{root}/docs/errors.md", encoding="utf-8") as f:
        table = list(rows(f.read()))
    if len(table) < 10:
        print(f"docs/errors.md: found only {len(table)} table rows; the table format changed?")
        return 1
    bad = 0
    for cls, cmd, msg in table:
        argv = shlex.split(cmd)
        if argv[0] not in programs:
            print(f"FAIL [{cls}] {cmd}: the command must start with tpipe-plan or train_gpt")
            bad += 1
            continue
        argv[0] = programs[argv[0]]
        try:
            run = subprocess.run(argv, cwd=root, capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            print(f"FAIL [{cls}] {cmd}: still running after 120 s (a refusal must be immediate)")
            bad += 1
            continue
        first = run.stderr.decode("utf-8", "replace").splitlines()[:1]
        got = first[0] if first else ""
        pattern = ".*".join(re.escape(part) for part in msg.split("..."))
        if run.returncode == 0 or run.returncode < 0 or not re.fullmatch(pattern, got):
            print(f"FAIL [{cls}] {cmd}\n  exit status {run.returncode}\n  expected: {msg}\n  got:      {got}")
            bad += 1
    # Output that claims to be JSON is JSON (UTF-8) even when the input it quotes is not UTF-8.
    out = subprocess.run([plan, "validate", "tests/errors/inputs/not_utf8.csv", "--json"], cwd=root,
                         capture_output=True, timeout=60).stdout
    try:
        json.loads(out.decode("utf-8"))
    except ValueError as e:
        print(f"FAIL validate --json on a file that is not UTF-8 printed something that is not JSON: {e}: {out!r}")
        bad += 1
    print(f"docs/errors.md: {len(table) - bad} of {len(table)} refusals print the documented message")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
