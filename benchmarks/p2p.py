"""Point-to-point latency and bandwidth of ipympi, raw pyzmq and mpi4py, in one table.

``python benchmarks/p2p.py [--trials 7] [--quick] [--no-mpi4py] [--json FILE]``

Runs the same ping-pong loops on 2 ranks three times: ``_p2p_rank.py`` under
``python -m ipympi.run -n 2``, the raw pyzmq floor ``_raw_zmq.py``, and
``_p2p_rank.py`` under ``mpiexec -n 2`` with mpi4py (when mpi4py and ``mpiexec``
are available), then prints one table of min / median over the trials. A second
table puts the two ranks on two "hosts" (127.0.0.2 and 127.0.0.3, so over tcp)
next to raw pyzmq over the same tcp. See
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
# Between two hosts: ranks on 127.0.0.2 and 127.0.0.3, so over tcp (as across machines).
TCP_IMPLS = ("ipympi-tcp", "raw-tcp")
TITLES = {
    "ipympi": "ipympi",
    "raw": "raw pyzmq",
    "mpi4py": "mpi4py",
    "ipympi-tcp": "ipympi tcp",
    "raw-tcp": "raw pyzmq tcp",
}
TCP_HOSTS = ("--hosts", "127.0.0.2:1,127.0.0.3:1")
TCP_SLOWER = 5  # tcp rows run 1/5 of the round trips (each is several times slower)
VALUE_WIDTH = 17
RATIO_WIDTH = 15
LABEL_WIDTH = 18


def commands(
    plan_text: str, tcp_plan_text: str, timeout: float
) -> dict[str, tuple[list[str], dict[str, str]]]:
    """The command line and environment of each implementation's run."""
    rank = str(HERE / "_p2p_rank.py")
    plan, tcp_plan = ["--plan", plan_text], ["--plan", tcp_plan_text]
    raw = [sys.executable, str(HERE / "_raw_zmq.py"), "--timeout", f"{timeout:g}"]
    ipympi = [*ipympi_launcher(2, timeout), rank, "--impl", "ipympi"]
    tcp = [*ipympi_launcher(2, timeout), *TCP_HOSTS, rank, "--impl", "ipympi"]
    return {
        "ipympi": ([*ipympi, *plan], ipympi_env()),
        "raw": ([*raw, "--impl", "raw", *plan], dict(os.environ)),
        "mpi4py": ([*mpiexec_launcher(2), rank, "--impl", "mpi4py", *plan], dict(os.environ)),
        "ipympi-tcp": ([*tcp, *tcp_plan], ipympi_env()),
        "raw-tcp": ([*raw, "--tcp", "--impl", "raw", *tcp_plan], dict(os.environ)),
    }


def fewer_round_trips(plan: dict[str, Any], factor: int) -> dict[str, Any]:
    """``plan`` with ``factor`` times fewer timed and warm-up round trips per row."""
    rows = [
        dict(row, iters=max(20, row["iters"] // factor), warmup=max(5, row["warmup"] // factor))
        for row in plan["rows"]
    ]
    return dict(plan, rows=rows)


def summarize(
    plan: dict[str, Any],
    results: dict[str, dict[str, Any]],
    impls: tuple[str, ...] = IMPLS,
    versus: tuple[str, ...] = ("raw", "mpi4py"),
) -> list[dict[str, Any]]:
    """Per row and implementation: min / median of the one-way times, in the row's unit,
    and the ratio of ``impls[0]`` to each of ``versus``."""
    lead = impls[0]
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
        for impl in impls:
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
        for other in versus:
            if lead in medians and other in medians:
                entry[f"{lead}/{other}"] = (
                    medians[lead] / medians[other] if latency else medians[other] / medians[lead]
                )
            else:
                entry[f"{lead}/{other}"] = None
        table.append(entry)
    return table


def rows(
    table: list[dict[str, Any]],
    impls: tuple[str, ...],
    ratio_titles: tuple[str, ...],
    ratios: list[list[float | None]],
) -> list[str]:
    """A table's header and rows: each implementation's min / median, then the ratios,
    under a section title per unit."""
    header = f"{'':<{LABEL_WIDTH}}" + "".join(f"{TITLES[i]:>{VALUE_WIDTH}}" for i in impls)
    lines = [header + "".join(f"{title:>{RATIO_WIDTH}}" for title in ratio_titles)]
    section = None
    for entry, values in zip(table, ratios):
        unit = entry["unit"]
        title = "one-way latency, us" if unit == "us" else "bandwidth, GB/s"
        if title != section:
            section = title
            lines.append(title)
        line = f"  {entry['label']:<{LABEL_WIDTH - 2}}"
        line += "".join(f"{cell(entry[impl], unit):>{VALUE_WIDTH}}" for impl in impls)
        line += "".join(f"{ratio(value):>{RATIO_WIDTH}}" for value in values)
        lines.append(line)
    return lines


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
    ratios = [[entry["ipympi/raw"], entry["ipympi/mpi4py"]] for entry in table]
    lines += rows(table, IMPLS, ("ipympi/raw", "ipympi/mpi4py"), ratios)
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


def render_tcp(
    plan: dict[str, Any], table: list[dict[str, Any]], local: list[dict[str, Any]]
) -> str:
    """The table of ranks on two hosts (tcp on loopback), against the same-host ipympi run."""
    lines = [
        f"Between two hosts: ranks on 127.0.0.2 and 127.0.0.3 (tcp, signed frames), "
        f"{plan['trials']} trials each: min / median",
        "",
    ]
    ratios = []
    for entry, same_host in zip(table, local):
        versus_local = None
        if entry["ipympi-tcp"] and same_host["ipympi"]:
            tcp, here = entry["ipympi-tcp"]["median"], same_host["ipympi"]["median"]
            versus_local = tcp / here if entry["unit"] == "us" else here / tcp
        ratios.append([entry["ipympi-tcp/raw-tcp"], versus_local])
    lines += rows(table, TCP_IMPLS, ("tcp/raw tcp", "tcp/same host"), ratios)
    lines += [
        "",
        "tcp/raw tcp: ipympi between hosts against raw pyzmq over the same tcp (same rule as",
        "  above); tcp/same host: ipympi between hosts against ipympi on one host",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run every implementation, print the table, optionally write JSON."""
    args = parse_arguments(__doc__.splitlines()[0], argv)
    plan = make_plan(args.trials, args.quick)
    plan_text = json.dumps(plan, separators=(",", ":"))
    mpi4py_note = "--no-mpi4py" if args.no_mpi4py else mpi4py_missing()
    impls = [impl for impl in IMPLS if impl != "mpi4py" or mpi4py_note is None]
    tcp_plan = fewer_round_trips(plan, TCP_SLOWER)
    cmds = commands(plan_text, json.dumps(tcp_plan, separators=(",", ":")), args.timeout)

    def run_all() -> dict[str, Any]:
        results = {}
        for impl in [*impls, *TCP_IMPLS]:
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
    tcp_table = summarize(tcp_plan, results, TCP_IMPLS, ("raw-tcp",))
    print("\n" + render_tcp(tcp_plan, tcp_table, table), flush=True)
    if args.json:
        write_json(args.json, plan, mpi4py_note, results, table + tcp_table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
