"""One-sided communication of ipympi and mpi4py at 2 ranks on one host, in one table.

``python benchmarks/rma.py [--trials 7] [--quick] [--no-mpi4py] [--json FILE]``

Runs ``_rma_rank.py`` under ``python -m ipympi.run -n 2``, then under ``mpiexec -n 2``
with mpi4py (when mpi4py and ``mpiexec`` are available), and prints min / median time
per operation over the trials: ``Put``/``Get`` of 8 bytes, ``Fetch_and_op``,
``Compare_and_swap``, ``Accumulate`` and ``Get_accumulate`` of 8 bytes, each followed by
``Flush`` under ``Lock_all``, a 1 MiB ``Put`` between two ``Fence`` calls
(with its bandwidth), and a numpy load+store pass over the other rank's 1 MiB of an
``Allocate_shared`` window. See ``benchmarks/README.md`` for the method.
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
from _rma_rank import MIB, RESULT_PREFIX, make_plan  # noqa: E402

RANKS = 2
IMPLS = ("ipympi", "mpi4py")
LABEL_WIDTH = 28
VALUE_WIDTH = 16


def command(impl: str, plan: dict[str, Any], timeout: float) -> list[str]:
    """The command line of one run of ``_rma_rank.py``."""
    launcher = ipympi_launcher(RANKS, timeout) if impl == "ipympi" else mpiexec_launcher(RANKS)
    plan_text = json.dumps(plan, separators=(",", ":"))
    return [*launcher, str(HERE / "_rma_rank.py"), "--impl", impl, "--plan", plan_text]


def summarize(plan: dict[str, Any], results: dict[str, Any]) -> list[dict[str, Any]]:
    """Per row and implementation: min / median microseconds per operation, and the ratio."""
    table = []
    for row in plan["rows"]:
        entry: dict[str, Any] = {"name": row["name"], "label": row["label"], "unit": "us"}
        medians = {}
        for impl in IMPLS:
            run = results.get(impl)
            if run is None:
                entry[impl] = None
                continue
            times = [t * 1e6 for t in run["rows"][row["name"]]["times"]]
            medians[impl] = statistics.median(times)
            entry[impl] = {"min": min(times), "median": medians[impl]}
        entry["ipympi/mpi4py"] = (
            medians["ipympi"] / medians["mpi4py"] if len(medians) == 2 else None
        )
        table.append(entry)
    return table


def render(trials: int, table: list[dict[str, Any]], versions: dict[str, str], note: Any) -> str:
    """The printed table, with a header and footnotes."""
    lines = [
        f"One-sided communication, 2 ranks, {trials} trials: min / median per operation "
        f"({machine()})",
        " | ".join(versions.get(impl, f"{impl}: n/a") for impl in IMPLS),
        "",
        f"{'':<{LABEL_WIDTH}}{'ipympi us':>{VALUE_WIDTH}}{'mpi4py us':>{VALUE_WIDTH}}{'ratio':>9}",
    ]
    for entry in table:
        line = f"{entry['label']:<{LABEL_WIDTH}}"
        line += "".join(f"{cell(entry[impl], 'us'):>{VALUE_WIDTH}}" for impl in IMPLS)
        line += f"{ratio(entry['ipympi/mpi4py']):>9}"
        if entry["name"] == "put1m":
            rates = [
                f"{impl} {MIB / (entry[impl]['median'] * 1e-6) / 1e9:.2f} GB/s"
                for impl in IMPLS
                if entry[impl] is not None
            ]
            line += "   (" + ", ".join(rates) + ")"
        lines.append(line)
    lines += [
        "",
        "time per operation: Barrier, then K operations timed; the max over ranks of the mean",
        "ratio = ipympi median / mpi4py median, lower is better (for the 1 MiB Put the",
        "  bandwidth ratio is its inverse); the Fence row includes two Fence calls",
    ]
    if note:
        lines.append(f"mpi4py: n/a ({note})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run both implementations, print the table, optionally write JSON."""
    args = parse_arguments(__doc__.splitlines()[0], argv)
    plan = make_plan(args.trials, args.quick)
    note = "--no-mpi4py" if args.no_mpi4py else mpi4py_missing()
    impls = [impl for impl in IMPLS if impl != "mpi4py" or note is None]
    envs = {"ipympi": ipympi_env(), "mpi4py": dict(os.environ)}

    def run_all() -> dict[str, Any]:
        results: dict[str, Any] = {}
        for impl in impls:
            title = f"{impl} -n {RANKS}"
            announce("rma.py", title)
            cmd = command(impl, plan, args.timeout)
            results[impl] = run_job(title, cmd, envs[impl], args.timeout + 30, RESULT_PREFIX)
        return results

    status, results = run_jobs("rma.py", run_all)
    if status:
        return status
    table = summarize(plan, results)
    versions = {impl: run["version"] for impl, run in results.items()}
    print(render(args.trials, table, versions, note), flush=True)
    if args.json:
        write_json(args.json, plan, note, results, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
