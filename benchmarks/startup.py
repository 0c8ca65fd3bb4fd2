"""Start-up cost of ipympi's launcher and MPI module, beside MPICH's ``mpiexec`` and mpi4py.

``python benchmarks/startup.py [--trials 7] [--quick] [--ranks 4,64] [--no-mpi4py] [--json FILE]``

Times a hello program (``from mpi4py import MPI; print(MPI.COMM_WORLD.Get_rank())``)
under ``python -m ipympi.run -n N`` and under ``mpiexec -n N`` (mpi4py on MPICH, e.g. from
``pip install mpi4py mpich``), wall clock and CPU time (the launcher's and every
process it started, from ``getrusage(RUSAGE_CHILDREN)``), and the cost of
``python -c "import ipympi.MPI"`` beside ``python -c "import mpi4py.MPI"``. The two
implementations alternate trial by trial, so that a busy spell of the machine
hits both; the table shows min / median and the ratio of medians. This checkout's
byte code is compiled first, as an installed package's is (a run with
``PYTHONDONTWRITEBYTECODE`` set would otherwise compile every module each time).
"""

from __future__ import annotations

import argparse
import compileall
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _harness import (  # noqa: E402
    ROOT,
    BenchmarkError,
    announce,
    ipympi_env,
    machine,
    ratio,
    run_jobs,
    write_json,
)

SCRIPT = "startup.py"
HELLO = "from mpi4py import MPI\nprint(MPI.COMM_WORLD.Get_rank())\n"
IMPLS = ("ipympi", "mpiexec")


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=None, help="timed trials per row (7)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 2 trials, -n 2 and 4")
    parser.add_argument(
        "--ranks", default=None, help="comma-separated rank counts (4,64; 2,4 with --quick)"
    )
    parser.add_argument("--no-mpi4py", action="store_true", help="skip mpiexec and mpi4py")
    parser.add_argument("--json", metavar="FILE", help="also write all trials and the table")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds allowed per run")
    args = parser.parse_args(argv)
    args.trials = args.trials if args.trials is not None else (2 if args.quick else 7)
    if args.trials < 1:
        parser.error("--trials must be at least 1")
    text = args.ranks or ("2,4" if args.quick else "4,64")
    try:
        args.ranks = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        parser.error(f"--ranks: not a list of numbers: {text!r}")
    if not args.ranks or min(args.ranks) < 1:
        parser.error("--ranks needs positive rank counts")
    return args


def find_mpiexec() -> str | None:
    """MPICH's ``mpiexec`` beside this Python (a venv's), else on ``PATH``."""
    beside = Path(sys.executable).parent / "mpiexec"
    return str(beside) if beside.exists() else shutil.which("mpiexec")


def mpi4py_missing() -> str | None:
    """Why the mpi4py side cannot run here, or None when it can."""
    probe = subprocess.run(
        [sys.executable, "-c", "import mpi4py.MPI"], capture_output=True, timeout=60
    )
    if probe.returncode != 0:
        return "mpi4py is not installed (pip install mpi4py mpich)"
    if find_mpiexec() is None:
        return "mpiexec is not on PATH"
    return None


def timed(cmd: list[str], env: dict[str, str], timeout: float) -> tuple[float, float, str]:
    """Run ``cmd`` to completion: (wall seconds, CPU seconds of it and its children, stdout)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            cmd,
            env=env,
            cwd=str(ROOT),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        raise BenchmarkError(f"{cmd[0]} did not finish within {timeout:g} s") from None
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr or proc.stdout).strip().splitlines()[-15:])
        raise BenchmarkError(f"{' '.join(cmd)} failed with exit status {proc.returncode}\n{tail}")
    return wall, cpu, proc.stdout


def commands(impl: str, ranks: int, hello: str, timeout: float) -> list[str]:
    if impl == "ipympi":
        run = [sys.executable, "-m", "ipympi.run", "-n", str(ranks), "--timeout", f"{timeout:g}"]
        return [*run, sys.executable, hello]
    return [find_mpiexec() or "mpiexec", "-n", str(ranks), sys.executable, hello]


def environment(impl: str) -> dict[str, str]:
    if impl == "ipympi":
        return ipympi_env()
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)  # the real mpi4py
    return env


def stats(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "median": statistics.median(values)}


def measure(args: argparse.Namespace, impls: tuple[str, ...]) -> dict[str, Any]:
    """Every trial of every row: ``{row: {impl: {"wall": [...], "cpu": [...]}}}``."""
    results: dict[str, Any] = {}
    compileall.compile_dir(str(ROOT / "ipympi"), quiet=1)  # as pip does at installation
    with tempfile.TemporaryDirectory(prefix="ipympi-startup-") as tmp:
        hello = os.path.join(tmp, "hello.py")
        Path(hello).write_text(HELLO)
        rows: list[tuple[str, dict[str, list[str]], int]] = []
        for ranks in args.ranks:
            cmds = {impl: commands(impl, ranks, hello, args.timeout) for impl in impls}
            rows.append((f"-n {ranks} hello", cmds, ranks))
        modules = {"ipympi": "ipympi.MPI", "mpiexec": "mpi4py.MPI"}
        imports = {impl: [sys.executable, "-c", f"import {modules[impl]}"] for impl in impls}
        rows.append(("import MPI", imports, 0))
        for row, cmds, ranks in rows:
            announce(SCRIPT, row)
            results[row] = {impl: {"wall": [], "cpu": []} for impl in impls}
            for impl in impls:  # one untimed warm-up each (caches, compiled files)
                timed(cmds[impl], environment(impl), args.timeout)
            for _trial in range(args.trials):
                for impl in impls:
                    wall, cpu, out = timed(cmds[impl], environment(impl), args.timeout)
                    # mpiexec may interleave the ranks' lines: compare the digits printed
                    digits = "".join(map(str, range(ranks)))
                    if ranks and sorted(out.replace("\n", "")) != sorted(digits):
                        raise BenchmarkError(f"{impl} -n {ranks}: unexpected output {out!r}")
                    results[row][impl]["wall"].append(wall)
                    results[row][impl]["cpu"].append(cpu)
    return results


def table(results: dict[str, Any], impls: tuple[str, ...]) -> list[dict[str, Any]]:
    rows = []
    for row, by_impl in results.items():
        for kind in ("wall", "cpu"):
            cells = {impl: stats(by_impl[impl][kind]) for impl in impls}
            theirs = cells.get("mpiexec")
            quotient = None if theirs is None else cells["ipympi"]["median"] / theirs["median"]
            rows.append({"label": f"{row}: {kind}, s", "cells": cells, "ratio": quotient})
    return rows


def fmt(cell: dict[str, float] | None) -> str:
    return "n/a" if cell is None else f"{cell['min']:.3f} / {cell['median']:.3f}"


def print_table(rows: list[dict[str, Any]], trials: int, note: str | None) -> None:
    print(f"Start-up, min / median of {trials} alternating trials ({machine()})")
    width = max(len(row["label"]) for row in rows) + 2
    print(f"{'':<{width}}{'ipympi':>17}{'mpiexec/mpi4py':>17}{'ratio':>9}")
    for row in rows:
        mine, theirs = row["cells"]["ipympi"], row["cells"].get("mpiexec")
        print(f"{row['label']:<{width}}{fmt(mine):>17}{fmt(theirs):>17}{ratio(row['ratio']):>9}")
    print(f"mpiexec/mpi4py: {'n/a (' + note + ')' if note else 'MPICH mpiexec, mpi4py.MPI'}")
    print(
        "targets: -n 4 wall <= 1.5x mpiexec's, -n 64 wall <= 1.0x, import ipympi.MPI wall <= 0.15 s"
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(argv)
    note = "--no-mpi4py" if args.no_mpi4py else mpi4py_missing()
    impls = ("ipympi",) if note else IMPLS
    status, results = run_jobs(SCRIPT, lambda: measure(args, impls))
    if status:
        return status
    rows = table(results, impls)
    print_table(rows, args.trials, note)
    if args.json:
        plan = {"ranks": args.ranks, "trials": args.trials, "hello": HELLO}
        write_json(args.json, plan, note, results, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
