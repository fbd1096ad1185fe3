"""Per-op pass counts of the ONNX node tests, and the conformance manifest.

    slmcc onnx-test DIR --manifest testdata/onnx_conformance/candidates.txt --json OUT.json
    python testdata/onnx_conformance/report.py OUT.json            # per-op table
    python testdata/onnx_conformance/report.py OUT.json --write-manifest

Reads the groups of candidates.txt (`# Op (n), opsets ...` headings) and the
`slmcc onnx-test --json` results, prints for every op how many of its
candidate tests pass, and with --write-manifest rewrites manifest.txt: the
passing tests, grouped the same way, each group headed by its op and counts.
The manifest is what CI requires to pass; a test leaves it only by a
deliberate edit. Needs only the standard library.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def groups() -> list[tuple[str, list[str]]]:
    out: list[tuple[str, list[str]]] = []
    for line in (HERE / "candidates.txt").read_text().splitlines():
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
            "# ONNX backend node tests (onnx==1.16.2, see testdata/requirements-ci.txt) that",
            "# `slmcc onnx-test` must pass; CI fails if any listed test fails. Written by",
            "# testdata/onnx_conformance/report.py from the candidates that passed.",
            f"# {total_pass} tests.",
        ]
        (HERE / "manifest.txt").write_text("\n".join(head + manifest) + "\n")


if __name__ == "__main__":
    main()
