"""Context ids of communicators: which are in use on this rank, and agreeing on a new one.

A communicator owns two context ids: an even one for point-to-point traffic and
the next odd one for its collectives. ``COMM_WORLD`` has 0/1 and ``COMM_SELF``
2/3; new communicators take even ids from 4 up. Context ids only need to be
unique among the processes that share them: two disjoint groups may use the same
id, because no message can travel between them on it.

Agreement. Each participant contributes the set of ids in use on it (a bit mask,
bit ``i`` for context ``2 * i``); the new communicator takes the lowest id free
on every participant (the union of the masks has a zero there). The participants
also report how many collectives they ever ran on free ids: the new
communicator's first collective sequence number is the largest of those, so a
reused id starts in step on every member, and a message of the new communicator
arriving before the receiver has finished the agreement is never taken for a
stray message of an old one.

A freed communicator's id stays in use while operations on it are still pending
on this rank (posted receives, collectives in progress), so that they complete
normally and cannot meet traffic of a later communicator on the same id.

Internal traffic of a communicator's constructors (``Create_group``, which is
collective only over the new group) travels on ``INTERNAL | context``: never a
user context, so it cannot match a user's receive, even with ``ANY_TAG``.
"""

from __future__ import annotations

import weakref
from typing import Any

__all__ = [
    "INTERNAL",
    "Contribution",
    "choose",
    "contribution",
    "install",
    "internal_context",
    "release",
]

INTERNAL = 0x80000000  # flag of internal contexts (user contexts stay below it)
FIRST_USER = 4  # 0/1 are COMM_WORLD's, 2/3 COMM_SELF's
LIMIT = INTERNAL  # user contexts are even numbers in [FIRST_USER, LIMIT)

# (mask of contexts in use, {free context: collectives run on it so far})
Contribution = tuple[int, dict[int, int]]


class _Table:
    """The contexts in use on one rank."""

    __slots__ = ("draining", "live")

    def __init__(self) -> None:
        self.live: set[int] = {0, 2}  # COMM_WORLD, COMM_SELF
        self.draining: set[int] = set()  # freed, but operations still pending


_tables: weakref.WeakKeyDictionary[Any, _Table] = weakref.WeakKeyDictionary()


def _table(engine: Any) -> _Table:
    table = _tables.get(engine)
    if table is None:
        table = _tables[engine] = _Table()
    return table


def internal_context(context: int) -> int:
    """The context for internal traffic of the communicator using ``context``."""
    return INTERNAL | context


def _busy(engine: Any, context: int) -> bool:
    """Whether operations on ``context`` (either half) are still pending here."""
    coll = context + 1
    if engine.coll_active.get(coll):
        return True
    if any(getattr(c, "context", None) == coll for c in engine.colls):
        return True
    return any(r.context in (context, coll) for r in engine.matcher.pending_posted())


def contribution(engine: Any) -> Contribution:
    """This rank's part of an agreement: contexts in use and sequence numbers of free ones."""
    engine.enter()
    try:
        table = _table(engine)
        for context in list(table.draining):
            if not _busy(engine, context):
                table.draining.discard(context)
        used = table.live | table.draining
        mask = 0
        for context in used:
            mask |= 1 << (context >> 1)
        seqs = {
            coll - 1: n
            for coll, n in engine.coll_next.items()
            if n and coll & 1 and coll < LIMIT and coll - 1 not in used
        }
        return mask, seqs
    finally:
        engine.leave()


def choose(parts: list[Contribution]) -> tuple[int, int]:
    """The context free on every participant, and its first collective sequence number.

    Raises ``OverflowError`` when no context id is left (never in practice).
    """
    mask = 0
    for part_mask, _ in parts:
        mask |= part_mask
    mask |= (1 << (FIRST_USER >> 1)) - 1  # the predefined communicators' ids
    bit = (~mask & (mask + 1)).bit_length() - 1
    context = 2 * bit
    if context >= LIMIT:
        raise OverflowError("no free communicator context id")
    base = max((seqs.get(context, 0) for _, seqs in parts), default=0)
    return context, base


def install(engine: Any, context: int, base: int) -> None:
    """Take ``context`` for a new communicator whose collectives start at ``base``."""
    engine.enter()
    try:
        table = _table(engine)
        table.live.add(context)
        table.draining.discard(context)
        coll = context + 1
        engine.coll_next[coll] = max(base, engine.coll_next.get(coll, 0))
        engine.coll_errors.pop(coll, None)
    finally:
        engine.leave()


def release(engine: Any, context: int) -> None:
    """A communicator using ``context`` was freed on this rank."""
    if context < FIRST_USER:
        return
    engine.enter()
    try:
        table = _table(engine)
        if context in table.live:
            table.live.discard(context)
            table.draining.add(context)
    finally:
        engine.leave()


def in_use(engine: Any) -> set[int]:
    """The contexts in use on this rank (for tests and diagnostics)."""
    table = _table(engine)
    return set(table.live | table.draining)
