"""What a running cell that cannot go on, or that left messages on their way, comes to.

While :class:`ipympi.notebook.controller.cellrun.CellRun` waits for a cell, it looks at
its ranks every :data:`~ipympi.launch.watch.LOOK_EVERY` seconds through the stuck-cell
rule of the cluster's MPI (:func:`watch_for`: :class:`~ipympi.launch.watch.BuiltinWatch`
for ipympi's own, :class:`~.realwatch.RealMPIWatch` for a real one). A verdict ends
the cell as the session's ``on_error`` says (:func:`stuck_end` says how: ranks
of the built-in MPI are interrupted, a real MPI's world is ended, ``wait`` only
says so). Once a cell has ended well, messages still on their way to a rank
are reported under it (:func:`late_leftovers`); after a failed one, the ranks
drop what it left (:func:`discard_leftovers`). These return what they found;
the cell's run writes it into the cell's result.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...core import control as ctl
from ...core.control import QUERY_TIMEOUT
from ...core.ranksets import ranks_phrase
from ...launch.watch import BuiltinWatch, Verdict
from ..engine.leftovers import LATE_ARRIVALS, discard_note, in_flight
from .realwatch import RealMPIWatch
from .records import UNINTERRUPTIBLE, WORLD_WAS_ENDED, Submission

if TYPE_CHECKING:
    from .contracts import CellCluster

Item = tuple[int, str, dict[str, Any]]

__all__ = [
    "StuckEnd",
    "describe_wait",
    "discard_leftovers",
    "late_leftovers",
    "stuck_end",
    "watch_for",
]


def describe_wait(state: Mapping[str, Any]) -> str:
    """What a rank does, in a few words: ``blocked in Recv(source=1, tag=7) at line 3``."""
    word = str(state.get("state", ctl.NO_ANSWER))
    if word == "blocked":
        text = f"waiting in {ctl.format_call(state)}"
    elif word == ctl.EXITED:
        return ctl.format_state(state).split(": ", 1)[-1]
    else:
        text = word
    if state.get("where"):
        text += f" at {state['where']}"
    return text


def watch_for(cluster: CellCluster) -> BuiltinWatch | RealMPIWatch:
    """The stuck-cell rule for the cluster's MPI: ipympi's own, or what a real MPI shows."""
    if cluster.backend == "builtin":
        return BuiltinWatch()
    return RealMPIWatch(cluster.deadlock_after)


@dataclass(frozen=True)
class StuckEnd:
    """How a stuck cell ends, by the session's ``on_error`` and the cluster's MPI.

    ``how`` is ``"wait"`` (only say so: ``note``), ``"interrupt"`` (the ranks still
    running) or ``"end"`` (the world, for ``reason``); ``ended`` is what the
    cell's error says about its world, when a real MPI's world is ended.
    """

    how: str
    note: str | None = None
    reason: str | None = None
    ended: str | None = None


def stuck_end(cluster: CellCluster, req: Submission, verdict: Verdict, cell: str) -> StuckEnd:
    """What the session's ``on_error`` policy does with a stuck cell (``cell``: its name,
    ``cell [7]``).

    Ranks of the built-in MPI are interrupted (or their world ended, with
    ``on_error=abort``); a real MPI's ranks, inside calls no interrupt reaches,
    end with their world; ``on_error=wait`` only says so.
    """
    if cluster.on_error == "wait":
        how = "interrupt the kernel" if cluster.launcher.interrupts_mpi_calls else "%mpi stop"
        return StuckEnd("wait", note=f"ipympi: {verdict.text} (on_error=wait: {how} to stop)\n")
    if not cluster.launcher.interrupts_mpi_calls:
        if verdict.kind == "failed":
            failed = sorted(set(req.replies) & set(req.errors()))
            ended = (
                f"{UNINTERRUPTIBLE} and its world cannot go on after a peer failed, "
                f"{WORLD_WAS_ENDED}"
            )
            reason = (
                f"ipympi ended it when {ranks_phrase(sorted(req.pending))} waited in MPI calls "
                f"after {ranks_phrase(failed)} failed in {cell}"
            )
        else:
            ended = f"{UNINTERRUPTIBLE}, {WORLD_WAS_ENDED}"
            reason = f"ipympi ended it after a probable deadlock in {cell}"
        return StuckEnd("end", reason=reason, ended=ended)
    if cluster.on_error == "abort":
        return StuckEnd("end", reason=f"the world was ended because {verdict.text}")
    return StuckEnd("interrupt")


def discard_leftovers(cluster: CellCluster, targets: list[int]) -> str | None:
    """After a failed or interrupted cell, have its ranks (``targets``) drop what it
    left unreceived; the line that says so under the cell, if anything was dropped.

    Every rank has answered the cell, so the counts of messages sent that the
    replies carry are final: each rank first waits until all the messages sent to
    it have arrived, then drops its unreceived messages (older ones too: the
    queue does not tell cells apart), pending receives and sends still waiting
    for a receiver. The next cell is sent only after every
    rank has answered this, so no message of the failed cell can reach it. Off
    with ``%mpi config keep_messages=on``; a real MPI keeps its own queues.
    """
    if cluster.keep_messages or cluster.backend != "builtin":
        return None
    live = {e.rank: e for e in cluster.engines if e.alive and e.ready}
    ranks = sorted(rank for rank in targets if rank in live)
    if not ranks:
        return None
    counted = {rank: engine for rank, engine in live.items() if engine.sent}
    late = in_flight(
        {rank: engine.sent for rank, engine in counted.items()},
        {rank: engine.arrived for rank, engine in counted.items()},
        [rank for rank in ranks if rank in counted],
    )
    expect = {str(rank): {str(s): n for s, n in senders.items()} for rank, senders in late.items()}
    req = cluster.submit("discard", {"expect": expect}, ranks)
    with contextlib.suppress(KeyboardInterrupt):
        cluster.pump(time.monotonic() + LATE_ARRIVALS + QUERY_TIMEOUT, lambda: req.done)
    cluster.forget(req)
    counts = {
        rank: reply.content.get("discarded") or {}
        for rank, reply in req.replies.items()
        if isinstance(reply.content.get("discarded"), dict)
    }
    return discard_note(counts)


def late_leftovers(cluster: CellCluster, req: Submission) -> list[Item]:
    """Have the ranks that messages of the cell ``req`` are still on their way to report
    them (see :mod:`ipympi.notebook.engine.leftovers`): what they said, to show under the
    cell; a Ctrl-C cuts this short."""
    live = {engine.rank: engine for engine in cluster.engines if engine.alive and engine.sent}
    receivers = [rank for rank in req.targets if rank in live]
    late = in_flight(
        {rank: engine.sent for rank, engine in live.items()},
        {rank: engine.arrived for rank, engine in live.items()},
        receivers,
    )
    if not late:
        return []
    expect = {str(rank): {str(s): n for s, n in senders.items()} for rank, senders in late.items()}
    check = cluster.submit("leftovers", {"expect": expect}, sorted(late))
    with contextlib.suppress(KeyboardInterrupt):
        cluster.pump(time.monotonic() + LATE_ARRIVALS + QUERY_TIMEOUT, lambda: check.done)
    cluster.forget(check)
    return check.messages
