"""Differential tests: the same programs under ipympi and under mpi4py on MPICH.

Each program in ``tests/differential/`` imports ``MPI`` from mpi4py when
``DIFF_IMPL=mpi4py`` and from ipympi otherwise, and prints canonical lines
``RANK KEY VALUE...`` (one write per line, so ranks never interleave). A test
runs a program on N ranks under both implementations and compares the sorted
lines. Reproduce a run by hand from ``tests/differential/``::

    PYTHONPATH=../.. python -m ipympi.run -n 2 statuses.py | sort
    DIFF_IMPL=mpi4py mpiexec -n 2 python -m mpi4py statuses.py | sort

(``python -m mpi4py`` aborts the whole job on an uncaught exception instead of
leaving the other ranks blocked.) Where the implementations legitimately differ,
``KNOWN_DIFFERENCES`` holds both values and a reason; they are asserted exactly,
so a change on either side is noticed. Differences that are ipympi bugs are in
``IPYMPI_BUGS``: the main comparison leaves those lines out and a strict xfail
test asserts the right (mpi4py's) behaviour, so fixing the bug turns it into an
XPASS failure that asks for the entry to be removed.

The whole module is skipped when mpi4py or ``mpiexec`` is missing or unusable.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

pytest.importorskip("mpi4py")

ROOT = Path(__file__).resolve().parent.parent
PROGRAMS = Path(__file__).resolve().parent / "differential"
MPIEXEC = shutil.which("mpiexec")
RUN_TIMEOUT = 60  # seconds, per run of a program (the launchers end a hung job at 30 s)

pytestmark = pytest.mark.skipif(MPIEXEC is None, reason="mpiexec is not on PATH")

# (program, key) -> (ipympi's value, mpi4py's value, reason)
KNOWN_DIFFERENCES: dict[tuple[str, str], tuple[str, str, str]] = {
    ("environment", "version"): (
        "4 1",
        "5 0",
        "ipympi reports MPI 4.1 (mpi4py 4.1's interface), MPICH 5.0 reports MPI 5.0",
    ),
    ("environment", "vendor"): ("ipympi", "MPICH", "different libraries"),
    ("lowercase", "irecv_big_default"): (
        "received 300000 True",
        "ERR_TRUNCATE",
        "mpi4py's irecv() without a buffer allocates 32 KiB; ipympi sizes it to the message",
    ),
    ("errors", "recv_count_too_big"): (
        "ValueError",
        "OK",
        "mpi4py does not check that [buf, count, type] fits in buf; ipympi does",
    ),
    ("errors", "message_recv_truncate_status"): (
        "11 True",
        "11 False",
        "on error mpi4py leaves the Message handle as it was; MPI nulls it (message consumed)",
    ),
}

# (program, key) -> what ipympi gets wrong; each has a strict xfail test below.
IPYMPI_BUGS: dict[tuple[str, str], str] = {}

# program -> numbers of ranks to run it on
SIZES: dict[str, tuple[int, ...]] = {
    "statuses": (2, 4),
    "ordering": (2, 4),
    "requests": (2, 4),
    "lowercase": (2, 4),
    "buffers": (2, 4),
    "bufspecs": (1, 3),
    "errors": (2,),
    "environment": (2,),
    "fileio": (2, 4),
}
CASES = [(program, n) for program, sizes in SIZES.items() for n in sizes]
IMPLS = ("ipympi", "mpi4py")


def _env(impl: str) -> dict[str, str]:
    """The environment of a run: ipympi importable from this checkout, no IPYMPI_* settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("IPYMPI_", "DIFF_IMPL"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    if impl == "mpi4py":
        env["DIFF_IMPL"] = "mpi4py"
        env["MPIEXEC_TIMEOUT"] = "30"  # hydra ends a hung job, like ipympi.run --timeout
    return env


def _command(impl: str, program: str, n: int) -> list[str]:
    """The command line that runs ``program`` on ``n`` ranks under ``impl``."""
    path = str(PROGRAMS / f"{program}.py")
    if impl == "mpi4py":
        assert MPIEXEC is not None
        return [MPIEXEC, "-n", str(n), sys.executable, "-m", "mpi4py", path]
    return [sys.executable, "-m", "ipympi.run", "-n", str(n), "--timeout", "30", path]


class Line(NamedTuple):
    """One output line: ``RANK KEY VALUE...``."""

    rank: int
    key: str
    value: str

    def __str__(self) -> str:
        return f"{self.rank} {self.key} {self.value}".rstrip()


@functools.cache
def _run(impl: str, program: str, n: int) -> tuple[Line, ...]:
    """Run ``program`` on ``n`` ranks under ``impl``; its sorted lines (cached per session)."""
    cmd = _command(impl, program, n)
    proc = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        env=_env(impl),
        cwd=str(PROGRAMS),
    )
    detail = (
        f"{impl}: {' '.join(cmd)} exited {proc.returncode}\n"
        f"--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    )
    assert proc.returncode == 0, detail
    lines = []
    for text in proc.stdout.splitlines():
        rank, key, *value = text.split(" ", 2)
        assert rank.isdigit(), f"{impl}: not a canonical line: {text!r}\n{detail}"
        lines.append(Line(int(rank), key, value[0] if value else ""))
    done = sorted(line.rank for line in lines if line.key == "done")
    assert done == list(range(n)), f"{impl}: not every rank finished\n{detail}"
    return tuple(sorted(lines))


@pytest.fixture(scope="module", autouse=True)
def _mpiexec_works() -> None:
    """Skip the module unless a trivial mpi4py job starts and ends within 20 s."""
    assert MPIEXEC is not None
    cmd = [MPIEXEC, "-n", "2", sys.executable, "-c", "from mpi4py import MPI"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=20, env=_env("mpi4py"))
    except (OSError, subprocess.TimeoutExpired) as exc:
        pytest.skip(f"mpiexec with mpi4py does not work: {exc}")
    if proc.returncode != 0:
        pytest.skip(f"mpiexec with mpi4py does not work: {proc.stderr.strip()[-500:]}")


def _canonical(impl: str, program: str, n: int) -> tuple[list[str], set[str]]:
    """The lines of a run with known differences replaced by a marker, bug lines left out.

    Also returns the keys of ``KNOWN_DIFFERENCES`` that were seen with the expected value.
    """
    index = IMPLS.index(impl)
    lines, seen = [], set()
    for line in _run(impl, program, n):
        if (program, line.key) in IPYMPI_BUGS:
            continue
        known = KNOWN_DIFFERENCES.get((program, line.key))
        if known is not None and line.value == known[index]:
            seen.add(line.key)
            line = line._replace(value="<known difference>")
        lines.append(str(line))
    return lines, seen


@pytest.mark.parametrize(("program", "n"), CASES)
def test_same_output(program: str, n: int) -> None:
    """Both implementations print the same lines, apart from the tabled differences."""
    ours, ours_known = _canonical("ipympi", program, n)
    theirs, theirs_known = _canonical("mpi4py", program, n)
    only_ours = sorted(set(ours) - set(theirs))
    only_theirs = sorted(set(theirs) - set(ours))
    assert (only_ours, only_theirs) == ([], []), (
        f"{program} on {n} ranks: lines only under ipympi: {only_ours}; "
        f"only under mpi4py: {only_theirs}"
    )
    assert ours == theirs  # the same lines, also the same number of times
    expected = {key for prog, key in KNOWN_DIFFERENCES if prog == program}
    assert ours_known == theirs_known == expected, "a known difference did not show up"


@pytest.mark.parametrize(
    ("program", "key"),
    [
        pytest.param(program, key, marks=pytest.mark.xfail(strict=True, reason=reason))
        for (program, key), reason in sorted(IPYMPI_BUGS.items())
    ],
)
def test_ipympi_bug(program: str, key: str) -> None:
    """The lines ipympi gets wrong (see ``IPYMPI_BUGS``) match mpi4py's."""
    n = SIZES[program][0]
    ours = [str(line) for line in _run("ipympi", program, n) if line.key == key]
    theirs = [str(line) for line in _run("mpi4py", program, n) if line.key == key]
    assert theirs, f"{key} is not printed by {program}"
    assert ours == theirs


def test_tables_name_real_programs() -> None:
    """Every table entry belongs to a program that exists and is run."""
    for program, _key in [*KNOWN_DIFFERENCES, *IPYMPI_BUGS]:
        assert program in SIZES
    for program in SIZES:
        assert (PROGRAMS / f"{program}.py").is_file()
    assert not set(KNOWN_DIFFERENCES) & set(IPYMPI_BUGS)
