"""IPython Parallel's client API, three ways: ready time and ``view.apply_sync``.

The columns: ``ipp.Cluster(engines="mpi", n=4)`` (engines under mpiexec of the
installed MPI, e.g. MPICH from ``pip install mpich``), ``ipp.Cluster(engines="ipympi",
n=4)`` (engines that are ipympi ranks) and ipympi's own client,
``ipympi.Cluster(n=4).start_and_connect_sync()``. Ready: from making the cluster
object to the first ``rc[:].apply_sync`` answered by every engine; apply: the round
trip of ``rc[:].apply_sync(int)`` (a trivial function) on all four.
"""

from __future__ import annotations

import importlib.util
import shutil
import statistics
import time
from typing import Any, Callable

from _harness import cell, ratio

__all__ = ["measure", "render"]

RANKS = 4
COLUMNS = {
    "ipp-mpi": 'ipp engines="mpi"',
    "ipp-ipympi": 'ipp engines="ipympi"',
    "ipympi": "ipympi.Cluster",
}
ROWS = (("ready", "ready, s", "s"), ("apply", "apply_sync(int), ms", "ms"))
TARGETS = "targets: ipympi.Cluster ≤ 0.2x ipp engines=mpi's ready time, apply_sync ≤ 0.5x"
WIDTH = 22


def missing(column: str) -> str | None:
    """Why ``column`` cannot be measured here, or None."""
    if column != "ipympi" and importlib.util.find_spec("ipyparallel") is None:
        return "ipyparallel is not installed"
    if column == "ipp-mpi" and (
        importlib.util.find_spec("mpi4py") is None or shutil.which("mpiexec") is None
    ):
        return "no mpi4py with an mpiexec"
    return None


def _start(column: str, timeout: float) -> tuple[Any, Any, Callable[[], None]]:
    """A started cluster of ``column``: (client, view, stop)."""
    if column == "ipympi":
        import ipympi

        cluster = ipympi.Cluster(n=RANKS)
        rc = cluster.start_and_connect_sync()
        return rc, rc[:], cluster.stop_cluster_sync
    import ipyparallel

    engines = column.split("-", 1)[1]
    cluster = ipyparallel.Cluster(engines=engines, n=RANKS, engine_timeout=round(timeout))
    rc = cluster.start_and_connect_sync()

    def stop() -> None:
        rc.close()
        cluster.stop_cluster_sync()

    return rc, rc[:], stop


def measure(column: str, plan: dict[str, Any], timeout: float) -> dict[str, list[float]]:
    """Fresh starts (``repeat``), then ``cells`` timed ``apply_sync`` calls in the last."""
    result: dict[str, list[float]] = {"ready": [], "apply": []}
    for start in range(plan["repeat"]):
        t0 = time.perf_counter()
        _rc, view, stop = _start(column, timeout)
        try:
            if view.apply_sync(int) != [0] * RANKS:
                raise RuntimeError(f"{column}: apply_sync(int) did not give {RANKS} zeros")
            result["ready"].append(time.perf_counter() - t0)
            if start == plan["repeat"] - 1:
                for _ in range(plan["warmup"]):
                    view.apply_sync(int)
                for _ in range(plan["cells"]):
                    t1 = time.perf_counter()
                    view.apply_sync(int)
                    result["apply"].append(time.perf_counter() - t1)
        finally:
            stop()
    return result


def render(results: dict[str, dict[str, list[float]]], notes: dict[str, str]) -> str:
    """The table: min / median per column; the ratio of ipympi's client to ipp on MPI."""
    lines = [
        f"IPython Parallel's API, {RANKS} engines: min / median",
        f"{'':<22}"
        + "".join(f"{title:>{WIDTH}}" for title in COLUMNS.values())
        + f"{'ipympi/ipp-mpi':>{WIDTH}}",
    ]
    for key, label, unit in ROWS:
        line = f"{label:<22}"
        medians = {}
        for column in COLUMNS:
            times = results.get(column, {}).get(key)
            if not times:
                line += f"{'n/a':>{WIDTH}}"
                continue
            scale = 1e3 if unit == "ms" else 1.0
            stats = {"min": min(times) * scale, "median": statistics.median(times) * scale}
            medians[column] = stats["median"]
            line += f"{cell(stats, unit):>{WIDTH}}"
        both = "ipympi" in medians and "ipp-mpi" in medians
        line += f"{ratio(medians['ipympi'] / medians['ipp-mpi'] if both else None):>{WIDTH}}"
        lines.append(line)
    lines.append(TARGETS)
    lines += [f"{COLUMNS[column]}: n/a ({why})" for column, why in notes.items()]
    return "\n".join(lines)
