"""Running one parallel cell: send it to its ranks, follow it to its end.

:func:`run_cell` makes sure the world can run the cell (:func:`ensure_world`),
sends it to the target ranks and, for a blocking cell, follows it
(:func:`follow`): a :class:`~ipympi.notebook.controller.cellrun.CellRun` owns the
cell's loop, from its output to its error. The cell's options and result live
in :mod:`ipympi.notebook.controller.cellresult` (re-exported here).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...core.ranksets import parse_targets
from .cellresult import CellOptions, CellResult, RankError, rank_error
from .cellrun import PROGRESS_AFTER, CellRun, Progress, Publish
from .interrupts import interrupts_at_waits
from .launchers import ClusterError

if TYPE_CHECKING:
    from .contracts import CellCluster

__all__ = [
    "PROGRESS_AFTER",
    "CellOptions",
    "CellResult",
    "Progress",
    "RankError",
    "ensure_world",
    "follow",
    "rank_error",
    "run_cell",
]


def run_cell(
    cluster: CellCluster,
    code: str,
    options: CellOptions,
    publish: Publish | None,
    execution_count: int,
) -> CellResult:
    """Run ``code`` on the target ranks; with ``options.block``, show its output and wait.

    ``publish`` None keeps the output in the result only. A non-blocking cell
    collects its output quietly until :func:`follow` shows it (``%pxresult``).
    """
    if options.trace and cluster.backend != "builtin":
        raise ValueError(
            "--trace records the messages of ipympi's built-in MPI; this session runs "
            f"{cluster.backend} (%mpi restart --backend builtin to trace, %mpi trace off to stop)"
        )
    targets = parse_targets(options.targets, cluster.n)
    ensure_world(cluster, targets, publish)
    content = {
        "code": code,
        "silent": options.silent,
        "store_history": options.store_history and not options.silent,
        "execution_count": execution_count,
    }
    if options.trace:
        content["trace"] = True
    req = cluster.submit("execute", content, targets)
    result = CellResult(req, targets, execution_count, traced=options.trace)
    if options.block:
        follow(cluster, result, options, publish)
    return result


def ensure_world(cluster: CellCluster, targets: list[int], publish: Publish | None) -> None:
    """Make sure the target ranks can run a cell.

    A world that has ended entirely (an ``Abort``, every rank dead, or ended by
    ipympi) is replaced by a fresh one, with a notice that names the variables
    lost with it; a world with some dead target
    ranks is an error that says so (``%mpi restart`` brings back a full one).
    """
    if cluster.stopped:
        raise ClusterError("the MPI session is stopped: %mpi start (or %mpi restart) starts it")
    engines = cluster.engines
    dead = [e for e in engines if e.returncode is not None]
    if engines and (len(dead) == len(engines) or cluster.aborted is not None or cluster.ended):
        lost = cluster.variables()
        notice = (
            f"ipympi: the previous MPI world has ended ({cluster.world_ended()}); "
            f"starting a fresh world of {cluster.n} ranks"
            + (f" (variables lost: {_names(lost)})" if lost else "")
            + "\n"
        )
        if publish is not None:
            publish("stream", {"name": "stderr", "text": notice}, {})
        cluster.stop()
        cluster.start()
        return
    if not cluster.ready and not dead:
        cluster.wait_ready()  # a world still starting (e.g. with the kernel)
        return
    gone = [e for e in dead if e.rank in targets]
    if gone:
        raise ClusterError(f"{cluster.world_ended()}; %mpi restart brings back a full world")


def _names(names: list[str], most: int = 12) -> str:
    """``a, b, c`` (``..., and 3 more`` past ``most``)."""
    shown = ", ".join(names[:most])
    return shown if len(names) <= most else f"{shown}, and {len(names) - most} more"


def follow(
    cluster: CellCluster, result: CellResult, options: CellOptions, publish: Publish | None
) -> None:
    """Show a cell's output (what came so far, then live) and wait for it to end.

    A progress line appears after :data:`PROGRESS_AFTER` seconds; Ctrl-C or
    ``options.timeout`` interrupts the ranks still running (their state is kept
    for the error summary). Ctrl-C is taken only while the controller waits
    (:func:`~ipympi.notebook.controller.interrupts.interrupts_at_waits`), so that no
    interrupt cuts short the handling of another, or of the stuck-cell rule's.
    Errands handed to the cluster meanwhile (``%mpi status``, ``stop``, ``restart``
    from the kernel) run at its waits.
    """
    with interrupts_at_waits(), cluster.errands.taking():
        CellRun(cluster, result, options, publish).run()
