"""``MPIPoolExecutor`` as users write it: a plain ``python prog.py`` whose executor spawns
4 workers and maps a trivial task 1,000 times, on ipympi and on mpi4py with MPICH.

``python benchmarks/futures.py [--trials 5] [--quick] [--tasks 1000] [--workers 4] [--no-mpi4py]``

Each trial is one whole run of the program (no launcher): start-up, spawning the workers,
the map, shutting them down and the end of the process, timed from outside (wall clock).
The two implementations alternate trial by trial, so that a busy spell of the machine
hits both; the table shows min / median seconds and the ratio of medians
(ipympi / MPICH; the project's target is 1.5x at most).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _harness import ipympi_env, machine, mpi4py_missing, ratio  # noqa: E402

PROGRAM = """\
import sys


def task(x):
    return x + 1


if __name__ == "__main__":  # the workers import this file too (without arguments)
    impl, tasks, workers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    if impl == "ipympi":
        from ipympi.mpi4py.futures import MPIPoolExecutor
    else:
        from mpi4py.futures import MPIPoolExecutor
    with MPIPoolExecutor(max_workers=workers) as executor:
        results = list(executor.map(task, range(tasks)))
    assert results == [x + 1 for x in range(tasks)], "wrong results"
    print("ok", len(results))
"""


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=None, help="runs per implementation (5)")
    parser.add_argument("--quick", action="store_true", help="smoke run: 1 trial, 100 tasks")
    parser.add_argument("--tasks", type=int, default=None, help="tasks mapped (1000)")
    parser.add_argument("--workers", type=int, default=4, help="workers spawned (4)")
    parser.add_argument("--no-mpi4py", action="store_true", help="skip the MPICH run")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds allowed per run")
    args = parser.parse_args(argv)
    args.trials = args.trials if args.trials is not None else (1 if args.quick else 5)
    args.tasks = args.tasks if args.tasks is not None else (100 if args.quick else 1000)
    if args.trials < 1 or args.tasks < 1 or args.workers < 1:
        parser.error("--trials, --tasks and --workers must be positive")
    return args


def one_run(impl: str, program: Path, args: argparse.Namespace) -> float:
    """Seconds one run of the program takes; RuntimeError if it fails."""
    env = ipympi_env() if impl == "ipympi" else dict(os.environ)
    env.pop("MPI4PY_FUTURES_MAX_WORKERS", None)
    command = [sys.executable, str(program), impl, str(args.tasks), str(args.workers)]
    start = time.perf_counter()
    proc = subprocess.run(
        command, capture_output=True, text=True, timeout=args.timeout, env=env, check=False
    )
    seconds = time.perf_counter() - start
    if proc.returncode != 0 or "ok" not in proc.stdout:
        tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-15:])
        raise RuntimeError(f"{impl} run failed (status {proc.returncode}):\n{tail}")
    return seconds


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(argv)
    note = "skipped (--no-mpi4py)" if args.no_mpi4py else mpi4py_missing()
    impls = ["ipympi"] if note else ["ipympi", "mpi4py"]
    times: dict[str, list[float]] = {impl: [] for impl in impls}
    with tempfile.TemporaryDirectory(prefix="ipympi-bench-") as folder:
        program = Path(folder) / "pool.py"
        program.write_text(PROGRAM)
        try:
            for trial in range(args.trials):
                for impl in impls:
                    print(f"futures.py: {impl} trial {trial + 1} ...", file=sys.stderr, flush=True)
                    times[impl].append(one_run(impl, program, args))
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            print(f"futures.py: {exc}", file=sys.stderr)
            return 1
    print(f"MPIPoolExecutor({args.workers}).map over {args.tasks} tasks, python prog.py; ")
    print(f"{machine()}; {args.trials} trial(s); seconds, min / median")
    cells = {i: f"{min(t):.2f} / {statistics.median(t):.2f}" for i, t in times.items()}
    print(f"{'':24}{'ipympi':>16}{'mpi4py (MPICH)':>18}{'ipympi/MPICH':>14}")
    quotient = None
    if "mpi4py" in times:
        quotient = statistics.median(times["ipympi"]) / statistics.median(times["mpi4py"])
    mpich = cells.get("mpi4py", "n/a")
    print(f"{'whole run':24}{cells['ipympi']:>16}{mpich:>18}{ratio(quotient):>14}")
    if note:
        print(f"mpi4py: {note}")
    print("target: ipympi/MPICH <= 1.50x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
