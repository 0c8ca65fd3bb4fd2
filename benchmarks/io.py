"""Parallel I/O of ipympi and mpi4py on MPICH: 4 ranks write and read one shared file.

``python benchmarks/io.py [--trials 7] [--quick] [--no-mpi4py] [--json FILE]``

Runs ``_io_rank.py`` under ``python -m ipympi.run -n 4``, then under ``mpiexec -n 4``
with mpi4py (when mpi4py and ``mpiexec`` are available), in a private temporary folder
that is removed afterwards, and prints the throughput (total bytes over the slowest
rank's time) of (a) contiguous blocks with ``Write_at_all``/``Read_at_all`` and (b) 4 KiB
pieces interleaved between the ranks through a vector file view with
``Write_all``/``Read_all``. 256 MiB in all (4 MiB with ``--quick``).
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
import tempfile
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
from _io_rank import RESULT_PREFIX, make_plan  # noqa: E402

RANKS = 4
IMPLS = ("ipympi", "mpi4py")
MIB = 1 << 20


def command(impl: str, plan: dict[str, Any], timeout: float) -> list[str]:
    launcher = ipympi_launcher(RANKS, timeout) if impl == "ipympi" else mpiexec_launcher(RANKS)
    plan_text = json.dumps(plan, separators=(",", ":"))
    return [*launcher, str(HERE / "_io_rank.py"), "--impl", impl, "--plan", plan_text]


def summarize(plan: dict[str, Any], results: dict[str, Any]) -> list[dict[str, Any]]:
    """Per row and phase: min / median throughput (GB/s) of each implementation."""
    table = []
    for row in plan["rows"]:
        for phase in ("write", "read"):
            entry: dict[str, Any] = {"label": f"{row['label']}: {phase}"}
            medians = {}
            for impl in IMPLS:
                run = results.get(impl)
                if run is None:
                    entry[impl] = None
                    continue
                rates = [plan["total"] / t / 1e9 for t in run["rows"][row["name"]][phase]]
                medians[impl] = statistics.median(rates)
                entry[impl] = {"min": min(rates), "median": medians[impl]}
            entry["ipympi/mpi4py"] = (
                medians["ipympi"] / medians["mpi4py"] if len(medians) == 2 else None
            )
            table.append(entry)
    return table


def render(plan: dict[str, Any], table: list[dict[str, Any]], versions: dict[str, str],
           note: str | None) -> str:  # fmt: skip
    width = max(len(entry["label"]) for entry in table) + 2
    lines = [
        f"Parallel I/O, {RANKS} ranks, {plan['total'] // MIB} MiB, {plan['trials']} trials: "
        f"min / median GB/s ({machine()})",
        " | ".join(versions.get(impl, f"{impl}: n/a") for impl in IMPLS),
        "",
        f"{'':<{width}}{'ipympi':>16}{'mpi4py':>16}{'ratio':>9}",
    ]
    for entry in table:
        cells = "".join(f"{cell(entry[impl], 'GB/s'):>16}" for impl in IMPLS)
        lines.append(f"{entry['label']:<{width}}{cells}{ratio(entry['ipympi/mpi4py']):>9}")
    lines += [
        "",
        "throughput = total bytes / slowest rank's time (Barrier to Barrier; the Sync after",
        f"  a write is not timed); interleaved pieces of {plan['piece'] // 1024} KiB",
        "ratio = ipympi median / mpi4py median, higher is better",
    ]
    if note:
        lines.append(f"mpi4py: n/a ({note})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(__doc__.splitlines()[0], argv)
    folder = tempfile.mkdtemp(prefix="ipympi-io-bench-")
    total = (4 if args.quick else 256) * MIB
    plan = make_plan(total, 4096, args.trials, folder)
    note = "--no-mpi4py" if args.no_mpi4py else mpi4py_missing()
    impls = [impl for impl in IMPLS if impl != "mpi4py" or note is None]
    envs = {"ipympi": ipympi_env(), "mpi4py": dict(os.environ)}

    def run_all() -> dict[str, Any]:
        results = {}
        for impl in impls:
            announce("io.py", f"{impl} on {RANKS} ranks")
            cmd = command(impl, plan, args.timeout)
            results[impl] = run_job(impl, cmd, envs[impl], args.timeout, RESULT_PREFIX)
        return results

    try:
        status, results = run_jobs("io.py", run_all)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if status:
        return status
    table = summarize(plan, results)
    versions = {impl: results[impl]["version"] for impl in results}
    print(render(plan, table, versions, note))
    if args.json:
        write_json(args.json, plan, note, results, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
