"""Pieces shared by the benchmark drivers (``p2p.py``, ``collectives.py``) and rank programs.

Driver side: the common command line, launching one job per implementation in its
own process group with a timeout, reading its result line, formatting table cells,
and writing the JSON document. Rank side: the ``--impl`` / ``--plan`` command line,
importing ipympi's or mpi4py's ``MPI`` with a version string, and printing the
result line. Only the standard library is imported here.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


class BenchmarkError(RuntimeError):
    """A benchmark run failed, timed out, or printed no result."""


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _show(cmd: list[str]) -> str:
    """``cmd`` as a shell line, with the (long) JSON plan elided."""
    return shlex.join("PLAN" if arg.startswith("{") else arg for arg in cmd)


def _end_group(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL, whatever is left of the process group led by ``proc``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            proc.poll()
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.02)


def run_job(
    name: str, cmd: list[str], env: dict[str, str], timeout: float, prefix: str
) -> dict[str, Any]:
    """Run one benchmark job in its own session; its ``prefix`` result line as a dict.

    On timeout, failure or interruption, the job's whole process group is ended.
    """
    proc = subprocess.Popen(
        cmd,
        env=env,
        cwd=str(ROOT),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _end_group(proc)
        out, err = proc.communicate()
        raise BenchmarkError(
            f"{name} run did not finish within {timeout:g} s\n"
            f"command: {_show(cmd)}\n{_tail(err or out)}"
        ) from None
    finally:
        _end_group(proc)
    if proc.returncode != 0:
        raise BenchmarkError(
            f"{name} run failed with exit status {proc.returncode}\n"
            f"command: {_show(cmd)}\n{_tail(err or out)}"
        )
    for line in out.splitlines():
        if line.startswith(prefix):
            return json.loads(line[len(prefix) :])
    raise BenchmarkError(f"{name} run printed no result line\n{_tail(out + err)}")


def _terminate(signum: int, frame: Any) -> None:
    """SIGTERM ends the script like Ctrl-C, so that the running job is ended too."""
    raise KeyboardInterrupt


def run_jobs(script: str, body: Callable[[], dict[str, Any]]) -> tuple[int, dict[str, Any]]:
    """Call ``body`` (which runs the jobs with :func:`run_job`): ``(0, its results)``.

    A failed run or an interruption (Ctrl-C, SIGTERM) is reported on stderr and
    gives ``(1, {})`` or ``(130, {})``; the running job has then been ended.
    """
    signal.signal(signal.SIGTERM, _terminate)
    try:
        return 0, body()
    except BenchmarkError as exc:
        print(f"{script}: {exc}", file=sys.stderr)
        return 1, {}
    except KeyboardInterrupt:
        print(f"{script}: interrupted", file=sys.stderr)
        return 130, {}


def announce(script: str, what: str) -> None:
    """Tell stderr which run starts now."""
    print(f"{script}: running {what} ...", file=sys.stderr, flush=True)


def mpi4py_missing() -> str | None:
    """Why mpi4py cannot be benchmarked here, or None when it can."""
    if importlib.util.find_spec("mpi4py") is None:
        return "mpi4py is not installed"
    if shutil.which("mpiexec") is None:
        return "mpiexec is not on PATH"
    return None


def ipympi_env() -> dict[str, str]:
    """The environment of ipympi runs: unchanged, with this checkout first on ``PYTHONPATH``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    return env


def ipympi_launcher(ranks: int, timeout: float) -> list[str]:
    """``python -m ipympi.run -n RANKS --timeout T``, to be followed by the program."""
    return [sys.executable, "-m", "ipympi.run", "-n", str(ranks), "--timeout", f"{timeout:g}"]


def mpiexec_launcher(ranks: int) -> list[str]:
    """``mpiexec -n RANKS python``, to be followed by the program."""
    return [shutil.which("mpiexec") or "mpiexec", "-n", str(ranks), sys.executable]


def parse_arguments(description: str, argv: list[str] | None) -> argparse.Namespace:
    """The drivers' command line; ``trials`` is resolved (7, or 2 with ``--quick``)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--trials", type=int, default=None, help="timed trials per row (7)")
    parser.add_argument(
        "--quick", action="store_true", help="smoke run: few iterations, 2 trials by default"
    )
    parser.add_argument("--no-mpi4py", action="store_true", help="skip the mpi4py run")
    parser.add_argument("--json", metavar="FILE", help="also write all trials and the table")
    parser.add_argument(
        "--timeout", type=float, default=300.0, help="seconds allowed per run (300)"
    )
    args = parser.parse_args(argv)
    args.trials = args.trials if args.trials is not None else (2 if args.quick else 7)
    if args.trials < 1:
        parser.error("--trials must be at least 1")
    return args


def machine() -> str:
    """Python version and CPU count, for the table's first line."""
    return f"Python {platform.python_version()}, {os.cpu_count()} CPUs"


def number(value: float, unit: str) -> str:
    """``value`` with 3 significant digits or so: times (``us``, ``ms``) or ``GB/s``."""
    if unit in ("us", "ms"):
        return f"{value:.2f}" if value < 10 else f"{value:.1f}" if value < 100 else f"{value:.0f}"
    return f"{value:.2f}" if value < 10 else f"{value:.1f}"


def cell(stats: dict[str, float] | None, unit: str) -> str:
    """``min / median``, or ``n/a`` for an implementation that did not run."""
    if stats is None:
        return "n/a"
    return f"{number(stats['min'], unit)} / {number(stats['median'], unit)}"


def ratio(value: float | None) -> str:
    """A ratio as ``1.23x``, or ``n/a``."""
    return "n/a" if value is None else f"{value:.2f}x"


def write_json(
    path: str,
    plan: dict[str, Any],
    mpi4py_note: str | None,
    results: dict[str, Any],
    table: list[dict[str, Any]],
) -> None:
    """Write the plan, the machine, every trial and the table to ``path``."""
    document = {
        "plan": plan,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "mpi4py_skipped": mpi4py_note,
        "results": results,
        "table": table,
    }
    Path(path).write_text(json.dumps(document, indent=2) + "\n")


def parse_rank_args(
    description: str, argv: list[str] | None, impls: tuple[str, ...]
) -> argparse.Namespace:
    """Command line of the rank programs: ``--impl`` and ``--plan``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--impl", choices=impls, required=True)
    parser.add_argument("--plan", required=True, help="JSON plan from make_plan()")
    return parser.parse_args(argv)


def load_mpi(impl: str) -> tuple[Any, str]:
    """``(MPI, version)`` of ``ipympi`` or ``mpi4py``, e.g. ``mpi4py 4.1.2 on MPICH 5.0.2``."""
    if impl == "ipympi":
        import ipympi as package
        from ipympi import MPI
    else:
        import mpi4py as package
        from mpi4py import MPI
    vendor, numbers = MPI.get_vendor()
    version = f"{impl} {package.__version__}"
    if vendor != impl:
        version += f" on {vendor} {'.'.join(map(str, numbers))}"
    return MPI, version


def emit_result(prefix: str, payload: dict[str, Any]) -> None:
    """Print the result line read by :func:`run_job`."""
    print(prefix + json.dumps(payload), flush=True)


def shut_down_kernel(manager: Any, client: Any, log: Any) -> None:
    """Shut a Jupyter kernel down (killing it if it does not stop); close its client and log."""
    try:
        if client is not None:
            client.stop_channels()
    finally:
        try:
            if manager.has_kernel:
                try:
                    manager.shutdown_kernel(now=False)
                except Exception:
                    manager.shutdown_kernel(now=True)
        finally:
            log.close()
