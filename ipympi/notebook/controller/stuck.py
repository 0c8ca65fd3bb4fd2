"""What the controller does when a running cell cannot go on, or left messages on their way.

While :func:`ipympi.notebook.controller.execute.follow` waits for a cell, it looks at its
ranks every :data:`~.watch.LOOK_EVERY` seconds through the stuck-cell rule of
the cluster's MPI (:func:`watch_for`: :class:`~.watch.BuiltinWatch` for ipympi's
own, :class:`~.realwatch.RealMPIWatch` for a real one). A verdict ends the
cell as the session's ``on_error`` says (:func:`on_stuck`): ranks of the
built-in MPI are interrupted, a real MPI's world is ended, ``wait`` only says
so. Once a cell has ended well, messages still on their way to a rank are
reported under it (:func:`late_leftovers`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Callable

from ...core import control as ctl
from ...core.control import QUERY_TIMEOUT
from ...core.ranksets import ranks_phrase
from ...launch.watch import BuiltinWatch, Verdict
from ..engine.leftovers import LATE_ARRIVALS, discard_note, in_flight
from .realwatch import RealMPIWatch
from .records import UNINTERRUPTIBLE, WORLD_WAS_ENDED, Output, Submission

if TYPE_CHECKING:
    from .cluster import Cluster
    from .execute import CellResult

__all__ = [
    "describe_wait",
    "discard_leftovers",
    "late_leftovers",
    "look",
    "on_stuck",
    "watch_for",
]

Publish = Callable[[str, dict, dict], None]


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


def watch_for(cluster: Cluster) -> BuiltinWatch | RealMPIWatch:
    """The stuck-cell rule for the cluster's MPI: ipympi's own, or what a real MPI shows."""
    if cluster.backend == "builtin":
        return BuiltinWatch()
    return RealMPIWatch(cluster.deadlock_after)


def look(
    watch: BuiltinWatch | RealMPIWatch,
    now: float,
    states: dict[int, dict],
    req: Submission,
    spawned: Sequence[int] = (),
) -> Verdict | None:
    """One look of ``watch`` at ``req``'s ranks (``states``: those still running) and at
    the running processes they ``spawned``, which may be what they wait for."""
    failed = [r for r, reply in req.replies.items() if reply.content.get("status") != "ok"]
    finished = [r for r in req.replies if r not in failed]
    return watch.look(now, states, [*req.pending, *spawned], finished, failed, req.said)


def on_stuck(
    cluster: Cluster,
    result: CellResult,
    states: dict[int, dict],
    verdict: Verdict,
    publish: Publish | None,
) -> bool:
    """Apply the session's ``on_error`` policy to a stuck cell; True when it ends the cell.

    Ranks of the built-in MPI are interrupted (or their world ended, with
    ``on_error=abort``); a real MPI's ranks, inside calls no interrupt reaches,
    end with their world.
    """
    req = result.request
    result.stuck = verdict.text
    if cluster.on_error == "wait":
        if publish is not None:
            how = "interrupt the kernel" if cluster.launcher.interrupts_mpi_calls else "%mpi stop"
            note = f"ipympi: {result.stuck} (on_error=wait: {how} to stop)\n"
            publish("stream", {"name": "stderr", "text": note}, {})
        return False
    result.states = {rank: states[rank] for rank in req.pending}
    result.waiting = {rank: describe_wait(states[rank]) for rank in req.pending}
    result.stopped = set(req.pending)
    if not cluster.launcher.interrupts_mpi_calls:
        cell = f"cell [{result.execution_count}]"
        if verdict.kind == "failed":
            failed = sorted(set(req.replies) & set(req.errors()))
            req.ended = (
                f"{UNINTERRUPTIBLE} and its world cannot go on after a peer failed, "
                f"{WORLD_WAS_ENDED}"
            )
            reason = (
                f"ipympi ended it when {ranks_phrase(sorted(req.pending))} waited in MPI calls "
                f"after {ranks_phrase(failed)} failed in {cell}"
            )
        else:
            req.ended = f"{UNINTERRUPTIBLE}, {WORLD_WAS_ENDED}"
            reason = f"ipympi ended it after a probable deadlock in {cell}"
        cluster.end_world(reason)
    elif cluster.on_error == "abort":
        cluster.end_world(f"the world was ended because {result.stuck}")
    else:
        cluster.interrupt(req, resynchronize=True)
    return True


def discard_leftovers(cluster: Cluster, targets: list[int]) -> str | None:
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


def late_leftovers(cluster: Cluster, result: CellResult, feed: Output | None) -> None:
    """Have the ranks that messages of the cell are still on their way to report them
    under this cell (see :mod:`ipympi.notebook.engine.leftovers`); a Ctrl-C cuts this short."""
    req = result.request
    live = {engine.rank: engine for engine in cluster.engines if engine.alive and engine.sent}
    receivers = [rank for rank in req.targets if rank in live]
    late = in_flight(
        {rank: engine.sent for rank, engine in live.items()},
        {rank: engine.arrived for rank, engine in live.items()},
        receivers,
    )
    if not late:
        return
    expect = {str(rank): {str(s): n for s, n in senders.items()} for rank, senders in late.items()}
    check = cluster.submit("leftovers", {"expect": expect}, sorted(late), on_output=feed)
    with contextlib.suppress(KeyboardInterrupt):
        cluster.pump(time.monotonic() + LATE_ARRIVALS + QUERY_TIMEOUT, lambda: check.done)
    cluster.forget(check)
    req.messages.extend(check.messages)
