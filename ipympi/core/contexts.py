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

Nonblocking agreements (``Idup``). A process may have several of them in
progress at once, and run blocking constructors meanwhile, so the one-step
agreement above could give two of them the same id. They therefore take ids
from their own range, ``[NB_FIRST, LIMIT)`` (blocking constructors stay below
``NB_FIRST``, so the two kinds never meet), and agree in attempts:

1. *offer*: each participant offers the first few ids of the range that are
   free on it, not locked (step 2) and not offered by a pending agreement of
   higher priority on it; the participants exchange offers and pick the
   lowest id in all of them (none in common: try again, offering twice as
   many);
2. *vote*: each participant locks the picked id for this agreement if it is
   still free, unlocked and not offered by a pending agreement of higher
   priority, and votes yes; the participants exchange votes. All yes: the id
   is taken. Otherwise each releases its lock and a new attempt starts.

An id is taken only with a lock on every participant, and a lock is exclusive,
so two agreements sharing a process never take the same id. Priority is the
key ``(parent context, sequence number of the agreement's collective)``, the
same on every participant and distinct for agreements sharing a process: an
agreement fails only on a lock held by an agreement that is already voting, or
on an id a higher-priority one offered, so the highest-priority agreement whose
processes have all started completes, and then the next. An agreement never
waits for another one to finish, so a correct program cannot deadlock on them.
"""

from __future__ import annotations

import weakref
from typing import Any

__all__ = [
    "INTERNAL",
    "NB_FIRST",
    "PORTS",
    "Contribution",
    "Offer",
    "choose",
    "contribution",
    "install",
    "internal_context",
    "is_collective",
    "offer",
    "pick",
    "release",
    "unlock",
    "vote",
    "withdraw",
]

INTERNAL = 0x80000000  # flag of internal contexts (user contexts stay below it)
FIRST_USER = 4  # 0/1 are COMM_WORLD's, 2/3 COMM_SELF's
LIMIT = INTERNAL  # user contexts are even numbers in [FIRST_USER, LIMIT)
PORTS = INTERNAL | 3  # ports' traffic (mpi.ports): no communicator's internal context is odd
NB_FIRST = 0x40000000  # nonblocking agreements use [NB_FIRST, LIMIT), blocking ones below
OFFER = 64  # ids offered per participant in a nonblocking agreement's first attempt

# (mask of contexts in use, {free context: collectives run on it so far})
Contribution = tuple[int, dict[int, int]]
# (mask of the ids offered, bit i for NB_FIRST + 2 * i; {offered id: collectives run on it})
Offer = tuple[int, dict[int, int]]
# the priority of a nonblocking agreement: (parent context, sequence number)
Key = tuple[int, int]


class _Table:
    """The contexts in use on one rank."""

    __slots__ = ("draining", "live", "locked", "offers")

    def __init__(self) -> None:
        self.live: set[int] = {0, 2}  # COMM_WORLD, COMM_SELF
        self.draining: set[int] = set()  # freed, but operations still pending
        self.offers: dict[Key, list[int]] = {}  # pending nonblocking agreement -> its offer
        self.locked: dict[int, Key] = {}  # id -> the nonblocking agreement voting for it


_tables: weakref.WeakKeyDictionary[Any, _Table] = weakref.WeakKeyDictionary()


def _table(engine: Any) -> _Table:
    table = _tables.get(engine)
    if table is None:
        table = _tables[engine] = _Table()
    return table


def is_collective(context: int) -> bool:
    """Whether ``context`` is a communicator's collective context (odd, not internal):
    its messages are received only by exact source and tag (the call's number)."""
    return context & 1 == 1 and context < INTERNAL


def internal_context(context: int) -> int:
    """The context for internal traffic of the communicator using ``context``."""
    return INTERNAL | context


def _busy(engine: Any, context: int) -> bool:
    """Whether operations on ``context`` (either half) are still pending here."""
    coll = context + 1
    if engine.ledger.active.get(coll):
        return True
    if any(getattr(c, "context", None) == coll for c in engine.colls):
        return True
    return any(r.context in (context, coll) for r in engine.matcher.pending_posted())


def _used(engine: Any, table: _Table) -> set[int]:
    """The contexts in use here: live, or freed with operations still pending."""
    for context in list(table.draining):
        if not _busy(engine, context):
            table.draining.discard(context)
    return table.live | table.draining


def contribution(engine: Any) -> Contribution:
    """This rank's part of a blocking agreement: ids in use and sequence numbers of free ones."""
    engine.enter()
    try:
        used = {c for c in _used(engine, _table(engine)) if c < NB_FIRST}
        mask = 0
        for context in used:
            mask |= 1 << (context >> 1)
        seqs = {
            coll - 1: n
            for coll, n in engine.ledger.next.items()
            if n and coll & 1 and coll < NB_FIRST and coll - 1 not in used
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
    if context >= NB_FIRST:
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
        table.locked.pop(context, None)
        engine.ledger.reuse(context + 1, base)
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


# -- nonblocking agreements ----------------------------------------------------------------
def _blocked(table: _Table, key: Key) -> set[int]:
    """Ids offered here by pending agreements of higher priority than ``key``."""
    return {c for other, ids in table.offers.items() if other < key for c in ids}


def offer(engine: Any, key: Key, attempt: int) -> Offer:
    """This rank's offer in attempt ``attempt`` (from 0) of the agreement ``key``."""
    engine.enter()
    try:
        table = _table(engine)
        taken = _used(engine, table) | set(table.locked) | _blocked(table, key)
        want = OFFER << min(attempt, 16)
        ids: list[int] = []
        context = NB_FIRST
        while len(ids) < want and context < LIMIT:
            if context not in taken:
                ids.append(context)
            context += 2
        table.offers[key] = ids
        mask = 0
        for context in ids:
            mask |= 1 << ((context - NB_FIRST) >> 1)
        numbers = engine.ledger.next
        seqs = {c: numbers[c + 1] for c in ids if numbers.get(c + 1)}
        return mask, seqs
    finally:
        engine.leave()


def pick(offers: list[Offer]) -> tuple[int, int] | None:
    """The lowest id every participant offered and its first sequence number, or None."""
    common = -1
    for mask, _ in offers:
        common &= mask
    if not common:
        return None
    context = NB_FIRST + 2 * ((common & -common).bit_length() - 1)
    return context, max(seqs.get(context, 0) for _, seqs in offers)


def vote(engine: Any, key: Key, context: int) -> bool:
    """Lock ``context`` for the agreement ``key`` if nothing here stands against it."""
    engine.enter()
    try:
        table = _table(engine)
        table.offers[key] = [context]
        if context in _used(engine, table) or context in table.locked:
            return False
        if context in _blocked(table, key):
            return False
        table.locked[context] = key
        return True
    finally:
        engine.leave()


def unlock(engine: Any, key: Key, context: int) -> None:
    """A failed vote: release ``context`` if the agreement ``key`` holds it."""
    engine.enter()
    try:
        table = _table(engine)
        if table.locked.get(context) == key:
            del table.locked[context]
    finally:
        engine.leave()


def withdraw(engine: Any, key: Key) -> None:
    """The agreement ``key`` has ended here: forget its offer and any lock it holds.

    Also runs when a failed agreement's algorithm is closed, possibly outside
    an MPI call, so it only touches this module's tables.
    """
    table = _table(engine)
    table.offers.pop(key, None)
    for context in [c for c, holder in table.locked.items() if holder == key]:
        del table.locked[context]


def in_use(engine: Any) -> set[int]:
    """The contexts in use on this rank (for tests and diagnostics)."""
    table = _table(engine)
    return set(table.live | table.draining)
