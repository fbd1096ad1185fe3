"""Per-op pass counts of the ONNX node tests, and the conformance manifest.

    slmcc onnx-test DIR --manifest testdata/onnx_conformance/candidates.txt --json OUT.json
    python testdata/onnx_conformance/report.py OUT.json            # per-op table
    python testdata/onnx_conformance/report.py OUT.json --write-manifest
    python testdata/onnx_conformance/report.py OUT.json --opsets-22-24 [--write-manifest]

Reads the groups of candidates.txt (`# Op (n), opsets ...` headings) and the
`slmcc onnx-test --json` results, prints for every op how many of its
candidate tests pass, and with --write-manifest rewrites manifest.txt: the
passing tests, grouped the same way, each group headed by its op and counts.
The manifest is what CI requires to pass; a test leaves it only by a
deliberate edit. With --opsets-22-24 the files are candidates-opset22-24.txt
and manifest-opset22-24.txt (the node tests of testdata/requirements-ci-new.txt's
onnx at opsets 22 to 24). Needs only the standard library.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


NEW = "--opsets-22-24" in sys.argv
CANDIDATES = "candidates-opset22-24.txt" if NEW else "candidates.txt"
MANIFEST = "manifest-opset22-24.txt" if NEW else "manifest.txt"
SOURCE = "onnx==1.23.2, see testdata/requirements-ci-new.txt" if NEW else \
    "onnx==1.16.2, see testdata/requirements-ci.txt"


def groups() -> list[tuple[str, list[str]]]:
    out: list[tuple[str, list[str]]] = []
    for line in (HERE / CANDIDATES).read_text().splitlines():
        line = line.strip()
        if line.startswith("# ") and "(" in line and "opsets" in line:
            out.append((line[2:].split(" (")[0], []))
        elif line and not line.startswith("#") and out:
            out[-1][1].append(line)
    return out


def main() -> None:
    results = json.loads(Path(sys.argv[1]).read_text())
    status = {t["name"]: t for t in results["tests"]}
    rows, manifest = [], []
    total_pass = total = 0
    for op, tests in groups():
        passing = [t for t in tests if status.get(t, {}).get("status") == "pass"]
        total_pass += len(passing)
        total += len(tests)
        rows.append((op, len(passing), len(tests)))
        if passing:
            manifest.append(f"\n# {op}: {len(passing)} of {len(tests)} candidates")
            manifest.extend(passing)
    width = max(len(op) for op, _, _ in rows)
    for op, p, n in rows:
        print(f"{op:<{width}}  {p:>3} / {n:<3}")
    print(f"{'total':<{width}}  {total_pass:>3} / {total}")
    if "--write-manifest" in sys.argv:
        head = [
            f"# ONNX backend node tests ({SOURCE}) that",
            "# `slmcc onnx-test` must pass; CI fails if any listed test fails. Written by",
            "# testdata/onnx_conformance/report.py from the candidates that passed.",
            f"# {total_pass} tests.",
        ]
        (HERE / MANIFEST).write_text("\n".join(head + manifest) + "\n")


if __name__ == "__main__":
    main()
