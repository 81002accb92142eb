#!/usr/bin/env python3
"""Checks docs/errors.md against the programs: every row's command, run from the repository root,
must fail (exit status != 0) and print the row's message as the first line of its stderr.

    check_errors.py REPO_ROOT TPIPE_PLAN TRAIN_GPT [MPIEXEC "MPIEXEC_FLAGS"]

A `...` in a message stands for text that depends on the machine (its memory size). A row whose
command starts with `mpirun` (processes that disagree) runs under MPIEXEC with MPIEXEC_FLAGS,
every `train_gpt` in it being the given one, and any line of stderr may be the message (every
process prints it; mpiexec may interleave their output); without MPIEXEC those rows are skipped.
Exit status 0 when every row matches, 1 naming each row that does not.
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


def json_documents(block):
    """The top-level JSON values of a ```json block, one after another."""
    decoder, at, out = json.JSONDecoder(), 0, []
    while True:
        while at < len(block) and block[at].isspace():
            at += 1
        if at >= len(block):
            return out
        value, at = decoder.raw_decode(block, at)
        out.append(value)


def check_doc_models(root, plan):
    """Every latency model shown in docs/*.md loads and plans (a documented example must work)."""
    import glob
    import os
    import tempfile
    bad = 0
    for doc in sorted(glob.glob(f"{root}/docs/*.md")):
        with open(doc, encoding="utf-8") as f:
            blocks = re.findall(r"```json\n(.*?)```", f.read(), re.S)
        for block in blocks:
            for model in json_documents(block):
                if not isinstance(model, dict) or model.get("kind") not in ("polynomial", "table", "analytic"):
                    continue
                with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
                    json.dump(model, f)
                try:
                    run = subprocess.run([plan, "slice", "--model", f.name, "--stages", "2", "--seq-len", "256",
                                          "--granularity", "128"], cwd=root, capture_output=True, timeout=120)
                finally:
                    os.unlink(f.name)
                if run.returncode != 0:
                    print(f"FAIL {os.path.basename(doc)}: the documented model {json.dumps(model)[:80]}... does not "
                          f"plan: {run.stderr.decode('utf-8', 'replace').strip()}")
                    bad += 1
    return bad


def check_environment_rows(root, plan, gpt):
    """Refusals that depend on what a command line cannot show: the environment, where stdout goes,
    bytes a terminal would obey."""
    import os
    bad = 0

    def expect(what, run, needle):
        nonlocal bad
        err = run.stderr.decode("utf-8", "replace")
        if run.returncode == 0 or needle not in err:
            print(f"FAIL {what}\n  exit status {run.returncode}\n  expected: {needle}\n  got:      {err.strip()[:300]}")
            bad += 1
        return err

    # One of several processes an MPI launcher started, without --transport mpi.
    env = dict(os.environ, OMPI_COMM_WORLD_SIZE="2")
    expect("train_gpt under mpirun without --transport",
           subprocess.run([gpt, "--steps", "1"], cwd=root, env=env, capture_output=True, timeout=120),
           "train_gpt: this train_gpt is one of 2 processes started by a launcher (OMPI_COMM_WORLD_SIZE=2), but "
           "--transport is threads: every process would train its own model independently; add --transport mpi, "
           "or start one process")
    # A save directory another job holds (its lock), or one holding another run's checkpoints.
    import fcntl
    import shutil
    import tempfile
    small = ["--layers", "2", "--d-model", "16", "--heads", "2", "--seq-len", "16", "--steps", "1", "--save-every", "1"]
    work = tempfile.mkdtemp()
    try:
        held = os.path.join(work, "held")
        os.mkdir(held)
        with open(os.path.join(held, ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            lock.write("pid 4242 on host elsewhere")
            lock.flush()
            expect("train_gpt --save DIR that another job holds",
                   subprocess.run([gpt, *small, "--save", held], cwd=root, capture_output=True, timeout=120),
                   f'train_gpt: checkpoint directory "{held}" is in use by another job (pid 4242 on host elsewhere): '
                   "two jobs saving into one directory would mix their checkpoints; save into another directory, or "
                   "wait until that job ends")
        other = os.path.join(work, "other")
        shutil.copytree(os.path.join(root, "tests/errors/inputs/ckpt_truncated"), os.path.join(other, "step-00000003"))
        expect("train_gpt --save DIR holding another run's checkpoints",
               subprocess.run([gpt, *small, "--save", other], cwd=root, capture_output=True, timeout=120),
               f'train_gpt: checkpoint directory "{other}" holds step-00000003 (written before runs were recorded), '
               "not of this run (")
    finally:
        shutil.rmtree(work)
    # A stack size limit its threads would overflow: refused with a sentence, not SIGSEGV.
    import resource

    def small_stack():
        resource.setrlimit(resource.RLIMIT_STACK, (32 << 10, resource.getrlimit(resource.RLIMIT_STACK)[1]))
    expect("train_gpt under ulimit -s 32",
           subprocess.run([gpt, "--steps", "1"], cwd=root, capture_output=True, timeout=120, preexec_fn=small_stack),
           "train_gpt: the stack size limit (ulimit -s) is 32 KiB; train_gpt needs at least 1024 KiB (its threads take "
           "their stack size from it): raise it, e.g. ulimit -s 8192")
    # Standard output that cannot be written (a full disk): an error, not exit status 0.
    with open("/dev/full", "w") as full:
        expect("tpipe-plan simulate > /dev/full",
               subprocess.run([plan, "simulate", "--schedule", "1f1b"], cwd=root, stdout=full, stderr=subprocess.PIPE,
                              timeout=60),
               "tpipe-plan simulate: failed while writing the standard output: No space left on device")
    # An escape sequence in a value is shown escaped, never sent to the terminal.
    err = expect("tpipe-plan simulate --schedule 1f1b<ESC>[2J",
                 subprocess.run([plan, "simulate", "--schedule", "1f1b\x1b[2J\r"], cwd=root, capture_output=True,
                                timeout=60),
                 'unknown schedule "1f1b\\x1b[2J\\r"')
    if "\x1b" in err or "\r" in err:
        print(f"FAIL the escape sequence reached the terminal: {err!r}")
        bad += 1
    return bad


def main():
    root, plan, gpt = sys.argv[1:4]
    mpiexec = sys.argv[4:6] if len(sys.argv) > 4 else None
    programs = {"tpipe-plan": plan, "train_gpt": gpt}
    with open(f"{root}/docs/errors.md", encoding="utf-8") as f:
        table = list(rows(f.read()))
    if len(table) < 10:
        print(f"docs/errors.md: found only {len(table)} table rows; the table format changed?")
        return 1
    bad = skipped = 0
    for cls, cmd, msg in table:
        argv = shlex.split(cmd)
        if argv[0] == "mpirun":
            if not mpiexec:
                print(f"skipped [{cls}] {cmd}: no mpiexec given")
                skipped += 1
                continue
            argv = [mpiexec[0]] + shlex.split(mpiexec[1]) + [gpt if a == "train_gpt" else a for a in argv[1:]]
        elif argv[0] not in programs:
            print(f"FAIL [{cls}] {cmd}: the command must start with tpipe-plan or train_gpt")
            bad += 1
            continue
        else:
            argv[0] = programs[argv[0]]
        try:
            run = subprocess.run(argv, cwd=root, capture_output=True, timeout=120, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            print(f"FAIL [{cls}] {cmd}: still running after 120 s (a refusal must be immediate)")
            bad += 1
            continue
        lines = run.stderr.decode("utf-8", "replace").splitlines()
        got = lines[0] if lines else ""
        pattern = ".*".join(re.escape(part) for part in msg.split("..."))
        if argv[0] != programs["train_gpt"] and argv[0] != plan:  # mpirun: every process prints it, and
            # their lines may interleave: a line may end with the message after another process's prefix
            # ("train_gpt: train_gpt: the processes ..."), so the message is searched whole at a line's end
            got = next((m.group(1) for l in lines if (m := re.fullmatch(".*?(" + pattern + ")", l))), got)
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
    bad += check_doc_models(root, plan)
    bad += check_environment_rows(root, plan, gpt)
    print(f"docs/errors.md: {len(table) - skipped - bad} of {len(table) - skipped} refusals print the documented message"
          + (f" ({skipped} skipped)" if skipped else ""))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
