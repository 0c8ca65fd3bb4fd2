"""Point-to-point latency and bandwidth of ipympi, raw pyzmq and mpi4py, in one table.

``python benchmarks/p2p.py [--trials 7] [--quick] [--no-mpi4py] [--json FILE]``

Runs the same ping-pong loops on 2 ranks three times: ``_p2p_rank.py`` under
``python -m ipympi.run -n 2``, the raw pyzmq floor ``_raw_zmq.py``, and
``_p2p_rank.py`` under ``mpiexec -n 2`` with mpi4py (when mpi4py and ``mpiexec``
are available), then prints one table of min / median over the trials. See
``benchmarks/README.md`` for what each row and ratio means.
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
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from _p2p_rank import LATENCY_ROWS, RESULT_PREFIX, make_plan  # noqa: E402

IMPLS = ("ipympi", "raw", "mpi4py")
TITLES = {"ipympi": "ipympi", "raw": "raw pyzmq", "mpi4py": "mpi4py"}
VALUE_WIDTH = 17
RATIO_WIDTH = 15
LABEL_WIDTH = 18


class BenchmarkError(RuntimeError):
    """A benchmark run failed, timed out, or printed no result."""


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def _show(cmd: list[str]) -> str:
    """``cmd`` as a shell line, with the (long) JSON plan elided."""
    return shlex.join("PLAN" if arg.startswith("{") else arg for arg in cmd)


def run_job(name: str, cmd: list[str], env: dict[str, str], timeout: float) -> dict[str, Any]:
    """Run one benchmark job in its own session; its ``P2P-RESULT`` as a dict.

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
        if line.startswith(RESULT_PREFIX):
            return json.loads(line[len(RESULT_PREFIX) :])
    raise BenchmarkError(f"{name} run printed no result line\n{_tail(out + err)}")


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


def mpi4py_missing() -> str | None:
    """Why mpi4py cannot be benchmarked here, or None when it can."""
    if importlib.util.find_spec("mpi4py") is None:
        return "mpi4py is not installed"
    if shutil.which("mpiexec") is None:
        return "mpiexec is not on PATH"
    return None


def commands(plan_text: str, timeout: float) -> dict[str, tuple[list[str], dict[str, str]]]:
    """The command line and environment of each implementation's run."""
    rank = str(HERE / "_p2p_rank.py")
    ipympi_env = dict(os.environ)
    ipympi_env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(ROOT), ipympi_env.get("PYTHONPATH", "")])
    )
    plan = ["--plan", plan_text]
    launcher = [sys.executable, "-m", "ipympi.run", "-n", "2", "--timeout", f"{timeout:g}"]
    mpiexec = [shutil.which("mpiexec") or "mpiexec", "-n", "2", sys.executable]
    raw = [sys.executable, str(HERE / "_raw_zmq.py"), "--timeout", f"{timeout:g}"]
    return {
        "ipympi": ([*launcher, rank, "--impl", "ipympi", *plan], ipympi_env),
        "raw": ([*raw, "--impl", "raw", *plan], dict(os.environ)),
        "mpi4py": ([*mpiexec, rank, "--impl", "mpi4py", *plan], dict(os.environ)),
    }


def summarize(plan: dict[str, Any], results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Per row and implementation: min / median of the one-way times, in the row's unit."""
    table = []
    for row in plan["rows"]:
        name = row["name"]
        latency = name in LATENCY_ROWS
        entry: dict[str, Any] = {
            "name": name,
            "label": row["label"],
            "unit": "us" if latency else "GB/s",
            "nbytes": row["nbytes"],
            "iters": row["iters"],
        }
        medians = {}
        for impl in IMPLS:
            if impl not in results:
                entry[impl] = None
                continue
            times = results[impl]["rows"][name]
            best, median = min(times), statistics.median(times)
            medians[impl] = median
            if latency:
                entry[impl] = {"min": best * 1e6, "median": median * 1e6}
            else:
                gbps = row["nbytes"] / 1e9
                entry[impl] = {"min": gbps / best, "median": gbps / median}
        for other in ("raw", "mpi4py"):
            if "ipympi" in medians and other in medians:
                entry[f"ipympi/{other}"] = (
                    medians["ipympi"] / medians[other]
                    if latency
                    else medians[other] / medians["ipympi"]
                )
            else:
                entry[f"ipympi/{other}"] = None
        table.append(entry)
    return table


def _number(value: float, unit: str) -> str:
    if unit == "us":
        return f"{value:.2f}" if value < 10 else f"{value:.1f}" if value < 100 else f"{value:.0f}"
    return f"{value:.2f}" if value < 10 else f"{value:.1f}"


def _cell(stats: dict[str, float] | None, unit: str) -> str:
    if stats is None:
        return "n/a"
    return f"{_number(stats['min'], unit)} / {_number(stats['median'], unit)}"


def _ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}x"


def render(
    plan: dict[str, Any],
    table: list[dict[str, Any]],
    versions: dict[str, str],
    mpi4py_note: str | None,
) -> str:
    """The printed table, with a header and footnotes."""
    lines = [
        f"Point-to-point, 2 ranks, {plan['trials']} trials each: min / median "
        f"(Python {platform.python_version()}, {os.cpu_count()} CPUs)",
        " | ".join(versions.get(impl, f"{TITLES[impl]}: n/a") for impl in IMPLS),
        "",
    ]
    header = f"{'':<{LABEL_WIDTH}}" + "".join(f"{TITLES[i]:>{VALUE_WIDTH}}" for i in IMPLS)
    header += f"{'ipympi/raw':>{RATIO_WIDTH}}{'ipympi/mpi4py':>{RATIO_WIDTH}}"
    lines.append(header)
    section = None
    for entry in table:
        unit = entry["unit"]
        title = "one-way latency, us" if unit == "us" else "bandwidth, GB/s"
        if title != section:
            section = title
            lines.append(title)
        line = f"  {entry['label']:<{LABEL_WIDTH - 2}}"
        line += "".join(f"{_cell(entry[impl], unit):>{VALUE_WIDTH}}" for impl in IMPLS)
        line += f"{_ratio(entry['ipympi/raw']):>{RATIO_WIDTH}}"
        line += f"{_ratio(entry['ipympi/mpi4py']):>{RATIO_WIDTH}}"
        lines.append(line)
    lines += [
        "",
        "latency: one-way time (round trip / 2); ratio = ipympi median / other median,"
        " lower is better",
        "bandwidth: bytes / one-way time; min / median = GB/s of the fastest / median trial;",
        "  ratio = ipympi median GB/s / other median GB/s, higher is better",
    ]
    if mpi4py_note:
        lines.append(f"mpi4py: n/a ({mpi4py_note})")
    return "\n".join(lines)


def _terminate(signum: int, frame: Any) -> None:
    """SIGTERM ends the script like Ctrl-C, so that the running job is ended too."""
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """Run every implementation, print the table, optionally write JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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
    trials = args.trials if args.trials is not None else (2 if args.quick else 7)
    if trials < 1:
        parser.error("--trials must be at least 1")
    plan = make_plan(trials, args.quick)
    plan_text = json.dumps(plan, separators=(",", ":"))
    mpi4py_note = "--no-mpi4py" if args.no_mpi4py else mpi4py_missing()
    impls = [impl for impl in IMPLS if impl != "mpi4py" or mpi4py_note is None]
    cmds = commands(plan_text, args.timeout)
    signal.signal(signal.SIGTERM, _terminate)
    results: dict[str, dict[str, Any]] = {}
    try:
        for impl in impls:
            cmd, env = cmds[impl]
            print(f"p2p.py: running {TITLES[impl]} ...", file=sys.stderr, flush=True)
            results[impl] = run_job(TITLES[impl], cmd, env, args.timeout + 30)
    except BenchmarkError as exc:
        print(f"p2p.py: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("p2p.py: interrupted", file=sys.stderr)
        return 130
    table = summarize(plan, results)
    versions = {impl: results[impl]["version"] for impl in results}
    print(render(plan, table, versions, mpi4py_note), flush=True)
    if args.json:
        document = {
            "plan": plan,
            "python": platform.python_version(),
            "cpus": os.cpu_count(),
            "mpi4py_skipped": mpi4py_note,
            "results": results,
            "table": table,
        }
        Path(args.json).write_text(json.dumps(document, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
