"""What a cell left behind in a rank: point-to-point leftovers and mismatch news.

A message that arrived but was never received, or a receive request that is
still posted when a cell ends, is usually a bug (a missing ``recv``, an
``Irecv`` never waited for, a tag that does not match). Each is reported once,
on the rank that holds it, as a line of stderr after the cell's own output.
News of a collective mismatch that reached a rank after it left the
collective belongs to the same cell and is taken here too.

A message sent to a rank that had already finished the cell may not have
arrived when that rank looked. Each rank counts the point-to-point messages
it sent to and received from every other (``Engine.sent``, ``arrived``) and
its reply carries them; once every rank has replied, the controller compares
them (:func:`in_flight`) and asks a rank that messages are still on their
way to wait for them and look again (:meth:`Leftovers.await_arrivals`): the
warning comes under the cell that left the message, every time.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ...core.arrival import SELF
from ...core.constants import ANY_SOURCE, ANY_TAG
from ...core.ranksets import ranks_phrase

__all__ = ["LATE_ARRIVALS", "Leftovers", "context_name", "discard", "in_flight"]

LATE_ARRIVALS = 2.0  # seconds a rank waits for messages the controller knows are on their way

_NAMES = {0: "MPI_COMM_WORLD", 2: "MPI_COMM_SELF"}


def context_name(context: int) -> str:
    return _NAMES.get(context, f"the communicator of context {context}")


def _source(source: int) -> str:
    return "ANY_SOURCE" if source == ANY_SOURCE else str(source)


def _tag(tag: int) -> str:
    return "ANY_TAG" if tag == ANY_TAG else str(tag)


class Leftovers:
    """Remembers what was reported, so each leftover is reported once."""

    def __init__(self) -> None:
        self._seen: set[int] = set()
        # The engine's (entered, progressed) when the last check ended.
        self._checked_at: tuple[int, int] | None = None
        # The engine's (sent, arrived) counts as the last check saw them.
        self.traffic: tuple[tuple[int, ...], tuple[int, ...]] = ((), ())

    def check(
        self, engine: Any, take_mismatch: bool, interrupted: bool = False
    ) -> tuple[list[str], str | None]:
        """What a cell left in ``engine`` (the caller must not hold it).

        Returns the warnings for new leftovers, one line each, and, with
        ``take_mismatch``, the news of a collective mismatch this rank heard of
        after it had left the collective (taken, so that the next cell's first
        collective does not raise it again). One pass over the engine.
        After an ``interrupted`` cell, collectives are left out: the controller
        abandons the interrupted ones when it realigns the ranks.
        """
        if engine is None or engine.finalized or engine.transport is None:
            return [], None
        # The counts this check covers: taken before looking, so that a message
        # arriving after the look is on its way for the controller.
        self.traffic = (tuple(engine.sent), tuple(engine.arrived))
        if (
            not interrupted
            and self._checked_at == (engine.entered, engine.progressed)
            and not engine.ledger.errors
        ):
            # No MPI call and no incoming frame since the last check: nothing new
            # to report, and no need to take the engine from the progress thread.
            return [], None
        mismatch = None
        engine.enter()
        try:
            engine.poll_once(False)  # take in what has arrived meanwhile
            self.traffic = (tuple(engine.sent), tuple(engine.arrived))
            unexpected = [e for e in engine.matcher.pending_unexpected() if e.context % 2 == 0]
            posted = [r for r in engine.matcher.pending_posted() if r.context % 2 == 0]
            sends = engine.unanswered_sends()  # synchronous or large, not yet received
            # nonblocking collectives still in progress
            collectives = [] if interrupted else list(engine.colls)
            errors = engine.ledger.errors
            if take_mismatch and errors:
                mismatch = errors.pop(next(iter(errors)))[1]
            self._checked_at = (engine.entered, engine.progressed)
        finally:
            engine.leave()
        return self._warnings(unexpected, posted, sends, collectives), mismatch

    @staticmethod
    def await_arrivals(engine: Any, expected: Mapping[int, int], timeout: float) -> bool:
        """Take in frames until ``expected[r]`` messages in all have arrived from each
        rank ``r``, or ``timeout`` seconds pass (the caller must not hold the engine);
        whether they all came."""
        if engine is None or engine.finalized or engine.transport is None:
            return False
        deadline = time.monotonic() + timeout
        engine.enter()
        try:
            while True:
                engine.poll_once(False)
                if all(engine.arrived[r] >= n for r, n in expected.items()):
                    return True
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                engine.transport.wait(left)
        finally:
            engine.leave()

    def _warnings(
        self, unexpected: list[Any], posted: list[Any], sends: list[Any], collectives: list[Any]
    ) -> list[str]:
        current = {id(item) for item in (*unexpected, *posted, *sends, *collectives)}
        lines = []
        for env in unexpected:
            if id(env) not in self._seen:
                lines.append(
                    f"ipympi warning: a message from rank {env.source} (tag {env.tag}, "
                    f"{env.nbytes} bytes) on {context_name(env.context)} has not been received"
                )
        for recv in posted:
            if id(recv) not in self._seen:
                lines.append(
                    f"ipympi warning: a receive (source={_source(recv.source)}, "
                    f"tag={_tag(recv.tag)}) on {context_name(recv.context)} is still "
                    "pending: Wait for its request, or Cancel it"
                )
        for op in sends:
            if id(op) not in self._seen:
                lines.append(
                    f"ipympi warning: a message to rank {op.peer} (tag {op.tag}, {op.call}) on "
                    f"{_comm_name(op.comm)} has not been received yet"
                )
        for coll in collectives:
            if id(coll) not in self._seen:
                lines.append(
                    f"ipympi warning: a nonblocking {coll.call} on {_comm_name(coll.comm)} is "
                    "still in progress: Wait for its request"
                )
        self._seen = current
        return lines


def discard(engine: Any) -> dict[str, int]:
    """Drop every point-to-point leftover of ``engine`` (the caller must not hold it):
    unreceived messages, pending receives (cancelled) and sends still waiting for
    their receiver (cancelled); how many of each.

    After a failed or interrupted cell every rank does this at once, once the
    messages the cell sent have all arrived (:meth:`Leftovers.await_arrivals`), so
    that no later cell receives them.
    """

    counts = {"messages": 0, "receives": 0, "sends": 0}
    if engine is None or engine.finalized or engine.transport is None:
        return counts
    engine.enter()
    try:
        engine.poll_once(False)
        matcher = engine.matcher
        for env in matcher.pending_unexpected():
            if env.context % 2 == 0 and matcher.remove(env):
                counts["messages"] += 1
                payload = env.payload
                if payload.kind == SELF and payload.sender is not None:  # a synchronous self-send
                    payload.sender.complete_cancelled()
        for recv in matcher.pending_posted():
            if recv.context % 2 == 0 and matcher.cancel(recv):
                counts["receives"] += 1
                op = recv.handle
                if op is not None:
                    op.posted = None
                    op.complete_cancelled()
        counts["sends"] = len(engine.drop_p2p_sends())
    finally:
        engine.leave()
    return counts


def discard_note(counts: Mapping[int, Mapping[str, int]]) -> str | None:
    """The line under a cell whose leftovers the ranks dropped (``counts``: per rank,
    :func:`discard`'s counts), or None when there were none."""
    parts = []
    for key, one, many in (
        ("messages", "unreceived message", "unreceived messages"),
        ("receives", "pending receive", "pending receives"),
        ("sends", "unanswered send", "unanswered sends"),
    ):
        total = sum(int(c.get(key, 0)) for c in counts.values())
        if total:
            parts.append(f"{total} {one if total == 1 else many}")
    missing = sum(int(c.get("missing", 0)) for c in counts.values())
    if not parts and not missing:
        return None
    ranks = sorted(r for r, c in counts.items() if any(c.values()))
    said = ", ".join(parts) or "nothing"
    note = (
        f"ipympi: discarded {said} that this cell left (on {ranks_phrase(ranks)}), "
        "so that no later cell receives them; %mpi config keep_messages=on keeps them"
    )
    if missing:
        note += (
            f"; {missing} {'message' if missing == 1 else 'messages'} still on the way "
            f"after {LATE_ARRIVALS:g} s could not be discarded: a later cell may receive "
            f"{'it' if missing == 1 else 'them'}"
        )
    return note


def in_flight(
    sent: Mapping[int, Sequence[int]],
    arrived: Mapping[int, Sequence[int]],
    receivers: Iterable[int],
) -> dict[int, dict[int, int]]:
    """Messages still on their way: for each of ``receivers`` whose count of arrivals
    from some rank is below that rank's count of sends to it, ``{sender: sent}``.

    ``sent[r]`` and ``arrived[r]`` are rank ``r``'s counts, indexed by world rank.
    """
    late: dict[int, dict[int, int]] = {}
    for receiver in receivers:
        got = arrived.get(receiver)
        if got is None:
            continue
        for sender, counts in sent.items():
            if sender == receiver or receiver >= len(counts) or sender >= len(got):
                continue
            if counts[receiver] > got[sender]:
                late.setdefault(receiver, {})[sender] = counts[receiver]
    return late


def _comm_name(comm: Any) -> str:
    impl = getattr(comm, "_impl", None)
    return str(getattr(impl, "label", "")) if impl is not None else "a freed communicator"
