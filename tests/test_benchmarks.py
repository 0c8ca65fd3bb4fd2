"""Smoke tests of the benchmark drivers ``p2p.py``, ``collectives.py``, ``session.py``,
``faults.py`` and ``startup.py``.

Each runs with ``--quick`` (and ``--no-mpi4py`` or ``--no-ipyparallel``) and prints a
complete table.

Only the shape of the output is checked: benchmark numbers are measurements,
never assertions.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
COLLECTIVE_ROWS = [
    "Barrier, us",
    "Bcast 1 f64, us",
    "Bcast 1 Ki f64, us",
    "Bcast 1 Mi f64, ms",
    "Allreduce 1 f64, us",
    "Allreduce 1 Ki f64, us",
    "Allreduce 1 Mi f64, ms",
    "Reduce 1 f64, us",
    "allreduce int, us",
    "Gather 1 f64, us",
    "Scatter 1 f64, us",
    "Allgather 1 f64, us",
    "Alltoall 1 f64, us",
]
ROWS = ["pickled int", "8 B buffer", "1 KiB buffer", "64 KiB", "1 MiB", "16 MiB"]
NUMBER = r"\d+(?:\.\d+)?"
PAIR = rf"{NUMBER} / {NUMBER}"


def run_benchmark(
    script: str, args: list[str], timeout: float
) -> tuple[subprocess.CompletedProcess[str], str]:
    """Run ``benchmarks/script`` with ``args``; it must succeed. The process and a text
    of its exit status and output for assertion messages."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=str(ROOT),
    )
    detail = f"exit {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    assert proc.returncode == 0, detail
    return proc, detail


def test_p2p_quick_prints_every_row() -> None:
    proc, detail = run_benchmark("p2p.py", ["--quick", "--no-mpi4py"], timeout=45)
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
    tcp = lines[lines.index(next(line for line in lines if line.startswith("Between two hosts"))) :]
    tcp_format = re.compile(rf"^  (?P<label>.+?)\s+{PAIR}\s+{PAIR}\s+{NUMBER}x\s+{NUMBER}x$")
    assert [m["label"] for line in tcp if (m := tcp_format.match(line))] == ROWS, detail


def test_collectives_quick_prints_every_row() -> None:
    proc, detail = run_benchmark(
        "collectives.py", ["--quick", "--no-mpi4py", "--timeout", "40"], timeout=50
    )
    lines = proc.stdout.splitlines()
    assert any(" 2 ranks " in line and " 4 ranks " in line for line in lines), detail
    row_format = re.compile(
        rf"^(?P<label>\S.*?)\s+(?P<two>{PAIR})\s+n/a\s+n/a\s+(?P<four>{PAIR})\s+n/a\s+n/a$"
    )
    found = [match["label"] for match in map(row_format.match, lines) if match]
    assert found == COLLECTIVE_ROWS, detail
    assert "mpi4py: n/a (--no-mpi4py)" in lines, detail


def test_collectives_floor_column_times_the_rows_that_fit_a_slot() -> None:
    rows = "Barrier,Bcast-1,Bcast-1Mi,Allreduce-1,allreduce-int,Alltoall-1"
    args = ["--quick", "--no-mpi4py", "--floor", "--ranks", "2", "--rows", rows]
    proc, detail = run_benchmark("collectives.py", [*args, "--timeout", "40"], timeout=60)
    lines = proc.stdout.splitlines()
    row_format = re.compile(
        rf"^(?P<label>\S.*?)\s+{PAIR}\s+(?P<floor>{PAIR}|n/a)\s+n/a\s+n/a\s+n/a$"
    )
    found = {m["label"]: m["floor"] for m in map(row_format.match, lines) if m}
    assert list(found) == [
        "Barrier, us",
        "Bcast 1 f64, us",
        "Bcast 1 Mi f64, ms",
        "Allreduce 1 f64, us",
        "allreduce int, us",
        "Alltoall 1 f64, us",
    ], detail
    assert found.pop("Bcast 1 Mi f64, ms") == "n/a", detail  # too large for a slot
    assert all(value != "n/a" for value in found.values()), detail
    assert any("floor: bare board traffic in Python" in line for line in lines), detail


SESSION_ROWS = ["session ready, s", "trivial cell, ms", "print on every rank, ms"]


@pytest.mark.timeout(150)
def test_session_quick_prints_every_row() -> None:
    proc, detail = run_benchmark(
        "session.py", ["--quick", "--no-ipyparallel", "--timeout", "40"], timeout=120
    )
    lines = proc.stdout.splitlines()
    row_format = re.compile(
        rf"^(?P<label>\S.*?)\s+(?P<ipympi>{PAIR})\s+(?P<ipykernel>{PAIR})\s+n/a"
        rf"\s+(?P<ratio>{NUMBER})x$"
    )
    found = [match["label"] for match in map(row_format.match, lines) if match]
    assert found == SESSION_ROWS, detail
    assert any(line.startswith("targets: session ready") for line in lines), detail
    assert "IPython Parallel: n/a (--no-ipyparallel)" in lines, detail
    # The ipympi kernel on the mpi4py backend, where mpi4py and an MPI are installed.
    mpi4py_rows = re.compile(rf"^  on mpi4py: (ready, s|trivial, ms)\s+{PAIR}\s+n/a\s+n/a\s+n/a$")
    mpi4py_found = [line for line in lines if mpi4py_rows.match(line)]
    note = [line for line in lines if line.startswith("on mpi4py: ")]
    assert len(note) == 1, detail
    if note[0].startswith("on mpi4py: n/a ("):
        assert mpi4py_found == [], detail
    else:
        assert len(mpi4py_found) == 2, detail


FAULT_SCENARIOS = 11


@pytest.mark.timeout(150)
def test_faults_prints_every_scenario_with_a_report() -> None:
    proc, detail = run_benchmark("faults.py", ["--np", "2"], timeout=120)
    rows = [
        line
        for line in proc.stdout.splitlines()
        if line.startswith("| ") and not line.startswith("| scenario") and "---" not in line
    ]
    assert len(rows) == FAULT_SCENARIOS, detail
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        assert re.fullmatch(NUMBER, cells[1]), row
        assert cells[2] and cells[4] == "yes", row


STARTUP_ROWS = [
    f"{row}: {kind}, s" for row in ("-n 2 hello", "import MPI") for kind in ("wall", "cpu")
]


@pytest.mark.timeout(150)
def test_startup_prints_every_row() -> None:
    proc, detail = run_benchmark(
        "startup.py", ["--trials", "1", "--ranks", "2", "--timeout", "40"], timeout=120
    )
    lines = proc.stdout.splitlines()
    cell = rf"(?:{PAIR}|n/a)"
    row_format = re.compile(rf"^(?P<label>\S.*?)\s+{PAIR}\s+{cell}\s+(?:{NUMBER}x|n/a)$")
    assert [m["label"] for line in lines if (m := row_format.match(line))] == STARTUP_ROWS, detail
    assert any(line.startswith("mpiexec/mpi4py: ") for line in lines), detail
    assert any(line.startswith("targets: ") for line in lines), detail


IO_ROWS = [
    f"{label}: {phase}"
    for label in (
        "contiguous Write_at_all / Read_at_all",
        "interleaved vector view Write_all / Read_all",
    )
    for phase in ("write", "read")
]


def test_io_quick_prints_every_row() -> None:
    proc, detail = run_benchmark(
        "io.py", ["--quick", "--no-mpi4py", "--trials", "1", "--timeout", "40"], timeout=50
    )
    row_format = re.compile(rf"^(?P<label>\S.*?)\s+{PAIR}\s+n/a\s+n/a$")
    found = [match["label"] for match in map(row_format.match, proc.stdout.splitlines()) if match]
    assert found == IO_ROWS, detail
    assert "mpi4py: n/a (--no-mpi4py)" in proc.stdout.splitlines(), detail


RMA_ROWS = [
    "Put 8 B + Flush",
    "Get 8 B + Flush",
    "Put 1 MiB, Fence",
    "Fetch_and_op + Flush",
    "Compare_and_swap + Flush",
    "Accumulate 8 B + Flush",
    "Get_accumulate 8 B + Flush",
    "shared 1 MiB load+store",
]


def test_rma_quick_prints_every_row() -> None:
    proc, detail = run_benchmark(
        "rma.py", ["--quick", "--no-mpi4py", "--timeout", "40"], timeout=50
    )
    row_format = re.compile(rf"^(?P<label>\S.*?)\s+(?P<ours>{PAIR})\s+n/a\s+n/a\b")
    found = [match["label"] for match in map(row_format.match, proc.stdout.splitlines()) if match]
    assert found == RMA_ROWS, detail
    assert "mpi4py: n/a (--no-mpi4py)" in proc.stdout, detail


def test_futures_quick_prints_the_row() -> None:
    proc, detail = run_benchmark("futures.py", ["--quick", "--no-mpi4py"], timeout=120)
    row = re.compile(rf"^whole run\s+{PAIR}\s+n/a\s+n/a$")
    assert any(row.match(line) for line in proc.stdout.splitlines()), detail
    assert "target: ipympi/MPICH <= 1.50x" in proc.stdout, detail
