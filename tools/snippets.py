#!/usr/bin/env python3
"""Keeps the code shown in docs/*.md equal to the compiled sources it comes from.

In a doc (docs/*.md and README.md), a fenced block right after a marker line

    <!-- snippet: apps/libtorch_gpt/training.cpp#step -->

must hold the lines of that file between `// [snippet:step]` and `// [/snippet]` (dedented).
    tools/snippets.py           check every doc; exit 1 naming each block that drifted
    tools/snippets.py --write   rewrite the blocks from the sources
"""
import pathlib
import re
import sys
import textwrap

ROOT = pathlib.Path(__file__).resolve().parent.parent
MARKER = re.compile(r"^<!-- snippet: (\S+)#(\S+) -->$")


def region(path, name):
    lines = (ROOT / path).read_text().splitlines()
    begin = [i for i, l in enumerate(lines) if l.strip() == f"// [snippet:{name}]"]
    if len(begin) != 1:
        raise SystemExit(f"{path}: {len(begin)} '// [snippet:{name}]' markers, need exactly one")
    end = next((i for i in range(begin[0] + 1, len(lines)) if lines[i].strip() == "// [/snippet]"), None)
    if end is None:
        raise SystemExit(f"{path}: '// [snippet:{name}]' has no '// [/snippet]' after it")
    return textwrap.dedent("\n".join(lines[begin[0] + 1:end])).splitlines()


def main():
    write = "--write" in sys.argv[1:]
    drifted = []
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        lines = doc.read_text().splitlines()
        out, i = [], 0
        while i < len(lines):
            out.append(lines[i])
            m = MARKER.match(lines[i])
            i += 1
            if not m:
                continue
            if i >= len(lines) or not lines[i].startswith("```"):
                raise SystemExit(f"{doc.relative_to(ROOT)}:{i}: a snippet marker must be followed by a ``` fence")
            fence = lines[i]
            close = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), None)
            if close is None:
                raise SystemExit(f"{doc.relative_to(ROOT)}:{i + 1}: unclosed fence")
            want = region(m.group(1), m.group(2))
            if lines[i + 1:close] != want:
                drifted.append(f"{doc.relative_to(ROOT)}:{i + 1}: differs from {m.group(1)}#{m.group(2)}")
            out += [fence, *want, lines[close]]
            i = close + 1
        if write:
            doc.write_text("\n".join(out) + "\n")
    if drifted and not write:
        print("\n".join(drifted) + "\nrun tools/snippets.py --write to copy the sources into the docs")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
