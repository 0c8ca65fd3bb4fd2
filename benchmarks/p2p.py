"""Point-to-point latency and bandwidth of ipympi, raw pyzmq and mpi4py, in one table.

``python benchmarks/p2p.py [--trials 7] [--quick] [--no-mpi4py] [--json FILE]``

Runs the same ping-pong loops on 2 ranks three times: ``_p2p_rank.py`` under
``python -m ipympi.run -n 2``, the raw pyzmq floor ``_raw_zmq.py``, and
``_p2p_rank.py`` under ``mpiexec -n 2`` with mpi4py (when mpi4py and ``mpiexec``
are available), then prints one table of min / median over the trials. See
``benchmarks/README.md`` for what each row and ratio means.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _harness import (  # noqa: E402
    announce,
    cell,
    ipympi_env,
    ipympi_launcher,
    machine,
    mpi4py_missing,
    mpiexec_launcher,
    parse_arguments,
    ratio,
    run_job,
    run_jobs,
    write_json,
)
from _p2p_rank import LATENCY_ROWS, RESULT_PREFIX, make_plan  # noqa: E402

IMPLS = ("ipympi", "raw", "mpi4py")
TITLES = {"ipympi": "ipympi", "raw": "raw pyzmq", "mpi4py": "mpi4py"}
VALUE_WIDTH = 17
RATIO_WIDTH = 15
LABEL_WIDTH = 18


def commands(plan_text: str, timeout: float) -> dict[str, tuple[list[str], dict[str, str]]]:
    """The command line and environment of each implementation's run."""
    rank = str(HERE / "_p2p_rank.py")
    plan = ["--plan", plan_text]
    raw = [sys.executable, str(HERE / "_raw_zmq.py"), "--timeout", f"{timeout:g}"]
    return {
        "ipympi": ([*ipympi_launcher(2, timeout), rank, "--impl", "ipympi", *plan], ipympi_env()),
        "raw": ([*raw, "--impl", "raw", *plan], dict(os.environ)),
        "mpi4py": ([*mpiexec_launcher(2), rank, "--impl", "mpi4py", *plan], dict(os.environ)),
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


def render(
    plan: dict[str, Any],
    table: list[dict[str, Any]],
    versions: dict[str, str],
    mpi4py_note: str | None,
) -> str:
    """The printed table, with a header and footnotes."""
    lines = [
        f"Point-to-point, 2 ranks, {plan['trials']} trials each: min / median ({machine()})",
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
        line += "".join(f"{cell(entry[impl], unit):>{VALUE_WIDTH}}" for impl in IMPLS)
        line += f"{ratio(entry['ipympi/raw']):>{RATIO_WIDTH}}"
        line += f"{ratio(entry['ipympi/mpi4py']):>{RATIO_WIDTH}}"
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


def main(argv: list[str] | None = None) -> int:
    """Run every implementation, print the table, optionally write JSON."""
    args = parse_arguments(__doc__.splitlines()[0], argv)
    plan = make_plan(args.trials, args.quick)
    plan_text = json.dumps(plan, separators=(",", ":"))
    mpi4py_note = "--no-mpi4py" if args.no_mpi4py else mpi4py_missing()
    impls = [impl for impl in IMPLS if impl != "mpi4py" or mpi4py_note is None]
    cmds = commands(plan_text, args.timeout)

    def run_all() -> dict[str, Any]:
        results = {}
        for impl in impls:
            cmd, env = cmds[impl]
            announce("p2p.py", TITLES[impl])
            results[impl] = run_job(TITLES[impl], cmd, env, args.timeout + 30, RESULT_PREFIX)
        return results

    status, results = run_jobs("p2p.py", run_all)
    if status:
        return status
    table = summarize(plan, results)
    versions = {impl: results[impl]["version"] for impl in results}
    print(render(plan, table, versions, mpi4py_note), flush=True)
    if args.json:
        write_json(args.json, plan, mpi4py_note, results, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
