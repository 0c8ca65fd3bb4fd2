"""Smoke test of ``benchmarks/p2p.py``: it runs and prints a complete table.

Only the shape of the output is checked: benchmark numbers are measurements,
never assertions.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROWS = ["pickled int", "8 B buffer", "1 KiB buffer", "64 KiB", "1 MiB", "16 MiB"]
NUMBER = r"\d+(?:\.\d+)?"
PAIR = rf"{NUMBER} / {NUMBER}"


def test_p2p_quick_prints_every_row() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "p2p.py"), "--quick", "--no-mpi4py"],
        capture_output=True,
        text=True,
        timeout=45,
        cwd=str(ROOT),
    )
    detail = f"exit {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    assert proc.returncode == 0, detail
    lines = proc.stdout.splitlines()
    assert any(line.startswith("one-way latency") for line in lines), detail
    assert any(line.startswith("bandwidth") for line in lines), detail
    row_format = re.compile(
        rf"^  (?P<label>.+?)\s+(?P<ipympi>{PAIR})\s+(?P<raw>{PAIR})\s+n/a"
        rf"\s+(?P<ratio>{NUMBER})x\s+n/a$"
    )
    found = {}
    for line in lines:
        match = row_format.match(line)
        if match:
            found[match["label"]] = match
    assert list(found) == ROWS, detail
    for match in found.values():
        assert float(match["ratio"]) > 0, detail
