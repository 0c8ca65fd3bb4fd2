"""What a cell left behind in a rank: point-to-point leftovers and mismatch news.

A message that arrived but was never received, or a receive request that is
still posted when a cell ends, is usually a bug (a missing ``recv``, an
``Irecv`` never waited for, a tag that does not match). Each is reported once,
on the rank that holds it, as a line of stderr after the cell's own output.
News of a collective mismatch that reached a rank after it left the
collective belongs to the same cell and is taken here too.
"""

from __future__ import annotations

from typing import Any

from .._constants import ANY_SOURCE, ANY_TAG

__all__ = ["Leftovers", "context_name"]

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
        if (
            not interrupted
            and self._checked_at == (engine.entered, engine.progressed)
            and not engine.coll_errors
        ):
            # No MPI call and no incoming frame since the last check: nothing new
            # to report, and no need to take the engine from the progress thread.
            return [], None
        mismatch = None
        engine.enter()
        try:
            engine.poll_once(False)  # take in what has arrived meanwhile
            unexpected = [e for e in engine.matcher.pending_unexpected() if e.context % 2 == 0]
            posted = [r for r in engine.matcher.pending_posted() if r.context % 2 == 0]
            sends = list(engine._sends.values())  # synchronous or large, not yet received
            # nonblocking collectives still in progress
            collectives = [] if interrupted else list(engine.colls)
            if take_mismatch and engine.coll_errors:
                context = next(iter(engine.coll_errors))
                mismatch = engine.coll_errors.pop(context)[1]
            self._checked_at = (engine.entered, engine.progressed)
        finally:
            engine.leave()
        return self._warnings(unexpected, posted, sends, collectives), mismatch

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


def _comm_name(comm: Any) -> str:
    impl = getattr(comm, "_impl", None)
    return str(getattr(impl, "label", "")) if impl is not None else "a freed communicator"
