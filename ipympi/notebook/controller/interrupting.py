"""Waiting for a request of the ranks, and interrupting the ranks that run it.

Every wait of the controller for its ranks can be cut by the notebook's
interrupt (Ctrl-C): :func:`wait` passes it on to the ranks still running the
request (:func:`interrupt`: SIGINT to each, :data:`INTERRUPT_GRACE` seconds to
reply, then a made-up reply for the silent ones), and realigns the ranks'
collectives afterwards (:func:`resynchronize`). A real MPI's ranks, inside a call
no interrupt reaches, end with their world (:func:`end_uninterruptible`). Used by
a cell's run and by the data requests, through what they need of the cluster
(:class:`~ipympi.notebook.controller.contracts.CellCluster`).
"""

from __future__ import annotations

import contextlib
import signal
import time
from typing import TYPE_CHECKING, Callable

from ...core.control import QUERY_TIMEOUT
from .records import UNINTERRUPTIBLE, WORLD_WAS_ENDED, Submission

if TYPE_CHECKING:
    from .contracts import CellCluster

__all__ = ["INTERRUPT_GRACE", "end_uninterruptible", "interrupt", "resynchronize", "wait"]

INTERRUPT_GRACE = 5.0  # seconds interrupted ranks get to reply before they are reported


def wait(cluster: CellCluster, req: Submission, timeout: float | None = None) -> bool:
    """Pump until ``req`` is done; False when ``timeout`` passes first.

    KeyboardInterrupt (the notebook's interrupt) is passed on to the ranks
    still running ``req``; they get ``INTERRUPT_GRACE`` seconds to reply,
    after which they are reported as not responding. The interrupt is then
    re-raised only if the ranks did not answer.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        return cluster.pump(deadline, lambda: req.done)
    except KeyboardInterrupt:
        interrupt(cluster, req)
        return True


def interrupt(cluster: CellCluster, req: Submission, realign: bool = True) -> None:
    """Interrupt the ranks still running ``req``, collect their replies, realign them
    (with ``realign``).

    A second Ctrl-C while waiting stops waiting: the silent ranks are
    reported as not responding.
    """
    req.interrupted = True
    cluster.signal(req.pending, signal.SIGINT)
    _pump_through_interrupts(cluster, time.monotonic() + INTERRUPT_GRACE, lambda: req.done)
    if req.pending and not cluster.launcher.interrupts_mpi_calls:
        end_uninterruptible(cluster, req)
        return
    for rank in req.pending:
        cluster.fail_rank(
            req, rank, "KeyboardInterrupt", f"rank {rank} did not respond to the interrupt"
        )
    if realign:
        resynchronize(cluster)


def end_uninterruptible(cluster: CellCluster, req: Submission) -> None:
    """End the world of ranks that an interrupt cannot reach (inside a real MPI call).

    Each silent rank's error says where it was; the request (and the
    notice of the next cell, which starts a fresh world) says why the
    world was ended.
    """
    pending = req.pending
    with contextlib.suppress(KeyboardInterrupt):
        cluster.query_states(timeout=QUERY_TIMEOUT)
    places = []
    for rank in pending:
        state = cluster.engines[rank].state
        where = f"at {state['where']}" if state.get("where") else "somewhere"
        if state.get("line"):
            where += f" ({state['line']})"
        places.append(f"rank {rank} {where}")
        cluster.fail_rank(
            req,
            rank,
            "KeyboardInterrupt",
            f"rank {rank} could not be interrupted",
            f"{where}, which could not be interrupted",
        )
    req.ended = f"{UNINTERRUPTIBLE}, {WORLD_WAS_ENDED}"
    cluster.end_world(f"ipympi ended it when an interrupt could not reach {'; '.join(places)}")


def _pump_through_interrupts(
    cluster: CellCluster, deadline: float, done: Callable[[], bool]
) -> bool:
    """``pump``, where a Ctrl-C (the user asking to interrupt) does not cut the wait."""
    while True:
        try:
            return cluster.pump(deadline, done)
        except KeyboardInterrupt:
            continue


def resynchronize(cluster: CellCluster, timeout: float = INTERRUPT_GRACE) -> bool:
    """Realign the ranks' collectives after an interrupt; False if a rank did not answer.

    Interrupted ranks may have stopped in different collectives (rank 0 in
    its 3rd, rank 1 in its 4th): every rank abandons what it was in, then
    all continue from the largest sequence number any rank reached, so the
    next cell's collectives match again. A real MPI's collectives are its
    own business: with the mpi4py backend there is nothing to realign.
    """
    if cluster.backend != "builtin":
        return True
    ranks = [e.rank for e in cluster.engines if e.alive and e.ready]
    first = cluster.submit("recover", {}, ranks)
    ok = _pump_through_interrupts(cluster, time.monotonic() + timeout, lambda: first.done)
    cluster.forget(first)
    bases: dict[str, int] = {}
    for reply in first.replies.values():
        for context, position in reply.content.get("positions", {}).items():
            bases[context] = max(bases.get(context, 0), int(position))
    second = cluster.submit("recover", {"bases": bases}, ranks)
    ok = _pump_through_interrupts(cluster, time.monotonic() + timeout, lambda: second.done) and ok
    cluster.forget(second)
    return ok
