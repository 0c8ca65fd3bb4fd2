"""Collective operations of ipympi and mpi4py at 2 and 4 ranks, in one table.

``python benchmarks/collectives.py [--trials 7] [--quick] [--no-mpi4py] [--json FILE]
[--ranks 2,4] [--rows NAME,...] [--floor]``

For 2 and then 4 ranks (or the counts ``--ranks`` gives, e.g. ``--ranks 16,64,128
--rows Barrier`` for many ranks on few cores; ``--rows`` keeps the rows named, as in
``_coll_rank.ROWS``), runs ``_coll_rank.py`` under ``python -m ipympi.run -n N``,
then under ``mpiexec -n N`` with mpi4py (when mpi4py and ``mpiexec`` are available)
with the repetition counts the ipympi run chose, and prints one table of min / median
per-call times over the trials. With ``--floor``, a third run times the rows whose data
fit in a slot as bare board traffic in Python (``_board_floor.py``): a lower bound for
a pure-Python implementation of each call. See ``benchmarks/README.md`` for the method.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _coll_rank import RESULT_PREFIX, make_plan  # noqa: E402
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

RANKS = (2, 4)
IMPLS = ("ipympi", "mpi4py")
FLOOR_IMPLS = ("ipympi", "floor", "mpi4py")
SCALE = {"us": 1e6, "ms": 1e3}
LABEL_WIDTH = 24
VALUE_WIDTH = 14
RATIO_WIDTH = 9


def command(impl: str, ranks: int, plan: dict[str, Any], timeout: float) -> list[str]:
    """The command line of one run of ``_coll_rank.py``."""
    mpich = impl == "mpi4py"
    launcher = mpiexec_launcher(ranks) if mpich else ipympi_launcher(ranks, timeout)
    plan_text = json.dumps(plan, separators=(",", ":"))
    return [*launcher, str(HERE / "_coll_rank.py"), "--impl", impl, "--plan", plan_text]


def with_reps(plan: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    """``plan`` with every row's ``reps`` fixed to what the run ``result`` used."""
    fixed = copy.deepcopy(plan)
    for row in fixed["rows"]:
        row["reps"] = result["rows"][row["name"]]["reps"]
    return fixed


def summarize(
    plans: dict[str, dict[str, Any]],
    results: dict[str, dict[str, Any]],
    rank_counts: tuple[int, ...] = RANKS,
    impls: tuple[str, ...] = IMPLS,
) -> list[dict[str, Any]]:
    """Per row, rank count and implementation: min / median per-call time in the row's
    unit (None where the implementation did not run the row), and the ratios of
    ipympi's and of the floor's medians to mpi4py's."""
    table = []
    for index, row in enumerate(plans[str(rank_counts[0])]["rows"]):
        name, unit = row["name"], row["unit"]
        entry: dict[str, Any] = {
            "name": name,
            "label": row["label"],
            "unit": unit,
            "count": row["count"],
            "ranks": {},
        }
        for ranks in map(str, rank_counts):
            assert plans[ranks]["rows"][index]["name"] == name
            column: dict[str, Any] = {"reps": None}
            medians = {}
            for impl in impls:
                measured = results.get(ranks, {}).get(impl, {}).get("rows", {}).get(name)
                if measured is None:
                    column[impl] = None
                    continue
                times = [t * SCALE[unit] for t in measured["times"]]
                if impl == "ipympi":
                    column["reps"] = measured["reps"]
                medians[impl] = statistics.median(times)
                column[impl] = {"min": min(times), "median": medians[impl]}
            for impl in impls[:-1]:
                column[f"{impl}/mpi4py"] = (
                    medians[impl] / medians["mpi4py"]
                    if impl in medians and "mpi4py" in medians
                    else None
                )
            entry["ranks"][ranks] = column
        table.append(entry)
    return table


def render(
    trials: int,
    quick: bool,
    table: list[dict[str, Any]],
    versions: dict[str, str],
    mpi4py_note: str | None,
    rank_counts: tuple[int, ...] = RANKS,
    impls: tuple[str, ...] = IMPLS,
) -> str:
    """The printed table, with a header and footnotes."""
    lines = [
        f"Collectives, {trials} trials each: min / median time per call ({machine()})",
        " | ".join(versions.get(impl, f"{impl}: n/a") for impl in impls),
        "",
    ]
    ratios = impls[:-1]  # each over mpi4py, the last
    width = len(impls) * VALUE_WIDTH + len(ratios) * RATIO_WIDTH
    groups = "".join(f"  {f' {ranks} ranks ':-^{width - 2}}" for ranks in rank_counts)
    lines.append(f"{'':<{LABEL_WIDTH}}{groups}")
    titles = "".join(f"{impl:>{VALUE_WIDTH}}" for impl in impls)
    titles += "".join(f"{'ratio' if i == 'ipympi' else i:>{RATIO_WIDTH}}" for i in ratios)
    lines.append(f"{'':<{LABEL_WIDTH}}" + titles * len(rank_counts))
    for entry in table:
        line = f"{entry['label']:<{LABEL_WIDTH}}"
        for ranks in map(str, rank_counts):
            column = entry["ranks"][ranks]
            line += "".join(f"{cell(column[i], entry['unit']):>{VALUE_WIDTH}}" for i in impls)
            line += "".join(f"{ratio(column[f'{i}/mpi4py']):>{RATIO_WIDTH}}" for i in ratios)
        lines.append(line)
    reps = "fixed small counts (--quick)" if quick else "an ipympi trial takes ~0.25 s"
    lines += [
        "",
        "time per call: Barrier, then K back-to-back calls timed on every rank; the max over",
        f"  ranks of the mean per call. K: {reps}; mpi4py runs the same K (see --json)",
        "ratio = ipympi median / mpi4py median, lower is better; f64 = float64 elements",
    ]
    if "floor" in impls:
        lines += [
            "floor: the rows whose data fit in a slot, as bare board traffic in Python",
            "  (_board_floor.py: no checks, locks, numbering, flow control or sleeps), its",
            "  own K; a lower bound for a pure-Python implementation of the call",
        ]
    if mpi4py_note:
        lines.append(f"mpi4py: n/a ({mpi4py_note})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run every rank count and implementation, print the table, optionally write JSON."""
    own = argparse.ArgumentParser(add_help=False)
    own.add_argument("--ranks", default=",".join(map(str, RANKS)))
    own.add_argument("--rows", default="")
    own.add_argument("--floor", action="store_true")
    chosen, rest = own.parse_known_args(argv)
    args = parse_arguments(__doc__.splitlines()[0], rest)
    rank_counts = tuple(int(n) for n in chosen.ranks.split(","))
    wanted = set(filter(None, chosen.rows.split(",")))
    plans = {str(ranks): make_plan(ranks, args.trials, args.quick) for ranks in rank_counts}
    for plan in plans.values():
        plan["rows"] = [row for row in plan["rows"] if not wanted or row["name"] in wanted]
    mpi4py_note = "--no-mpi4py" if args.no_mpi4py else mpi4py_missing()
    columns = FLOOR_IMPLS if chosen.floor else IMPLS
    impls = [impl for impl in columns if impl != "mpi4py" or mpi4py_note is None]
    envs = {"ipympi": ipympi_env(), "floor": ipympi_env(), "mpi4py": dict(os.environ)}

    def run_all() -> dict[str, Any]:
        results: dict[str, dict[str, Any]] = {}
        for ranks in rank_counts:
            runs = results[str(ranks)] = {}
            plan = plans[str(ranks)]
            for impl in impls:
                # mpi4py runs ipympi's K; the floor, far faster, finds its own
                run_plan = with_reps(plan, runs["ipympi"]) if impl == "mpi4py" else plan
                title = f"{impl} -n {ranks}"
                cmd = command(impl, ranks, run_plan, args.timeout)
                announce("collectives.py", title)
                runs[impl] = run_job(title, cmd, envs[impl], args.timeout + 30, RESULT_PREFIX)
        return results

    status, results = run_jobs("collectives.py", run_all)
    if status:
        return status
    table = summarize(plans, results, rank_counts, columns)
    versions = {impl: run["version"] for runs in results.values() for impl, run in runs.items()}
    text = render(args.trials, args.quick, table, versions, mpi4py_note, rank_counts, columns)
    print(text, flush=True)
    if args.json:
        write_json(args.json, plans, mpi4py_note, results, table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
