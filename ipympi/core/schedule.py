"""Collective calls as data: their signatures, and the rounds algorithms are made of.

A collective algorithm (:mod:`.algorithms`, :mod:`.reductions`) is a generator that yields
:class:`Round` objects, the messages one rank sends and receives in one step, and is sent
back the round's completed receives before it goes on. Nothing here moves a byte: the
runner above (``mpi.coll.runner``) drives the rounds on the progress engine.

Every message of a collective carries the call's *signature* (:func:`signature`: kind,
form and root), so that ranks calling different collectives are told so instead of hanging.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence
from typing import Any

from .modes import Form

__all__ = [
    "KINDS",
    "NEIGHBORHOOD",
    "Algorithm",
    "Round",
    "describe_signature",
    "is_local",
    "signature",
]

# Collective kinds (low 5 bits of a signature); bit 5 marks nonblocking and
# bit 6 persistent calls (the three forms never match each other); bits 7-15
# hold the root (modulo 512).
KINDS = (
    "Barrier",
    "Bcast",
    "Gather",
    "Gatherv",
    "Scatter",
    "Scatterv",
    "Allgather",
    "Allgatherv",
    "Alltoall",
    "Alltoallv",
    "Alltoallw",
    "Reduce",
    "Allreduce",
    "Reduce_scatter_block",
    "Reduce_scatter",
    "Scan",
    "Exscan",
    "bcast",
    "gather",
    "scatter",
    "allgather",
    "alltoall",
    "reduce",
    "allreduce",
    "scan",
    "exscan",
    "dup",  # the context agreement of Comm.Idup (used in nonblocking form only: "Idup")
)
KIND_IDS = {name: i + 1 for i, name in enumerate(KINDS)}
NONBLOCKING = 0x20
PERSISTENT = 0x40
ROOTED = {"Bcast", "Gather", "Gatherv", "Scatter", "Scatterv", "Reduce"}
ROOTED |= {name.lower() for name in ROOTED}


# Neighbourhood collectives have no root: their root field holds this marker,
# so that Neighbor_allgather never matches Allgather.
NEIGHBORHOOD = 0x1FF


FORMS = {Form.BLOCKING: 0, Form.NONBLOCKING: NONBLOCKING, Form.PERSISTENT: PERSISTENT}


def signature(kind: str, root: int = 0, mode: Form = Form.BLOCKING) -> int:
    """The 16-bit signature of a collective call (kind, form, root)."""
    return KIND_IDS[kind] | FORMS[mode] | ((root & 0x1FF) << 7)


def describe_signature(sig: int) -> str:
    """A readable call name for a signature, e.g. ``Ibcast(root=2)``."""
    kind_id = sig & 0x1F
    if not 1 <= kind_id <= len(KINDS):
        return "a point-to-point message" if sig == 0 else f"an unknown collective ({sig})"
    name = KINDS[kind_id - 1]
    if name not in ROOTED and (sig >> 7) & 0x1FF == NEIGHBORHOOD:
        name = ("Neighbor_" if name[0].isupper() else "neighbor_") + name.lower()
    if sig & NONBLOCKING:
        name = "I" + name[0].lower() + name[1:]
    elif sig & PERSISTENT:
        name += "_init"
    if KINDS[kind_id - 1] in ROOTED:
        return f"{name}(root={(sig >> 7) & 0x1FF})"
    return name


class Round:
    """The messages of one step of a collective algorithm, for one rank.

    ``sends`` are ``(peer, data)`` pairs (``data`` is bytes or a byte
    memoryview that stays untouched until the round completes); ``recvs`` are
    ``(peer, target)`` pairs where ``target`` is a writable byte memoryview of
    exactly the expected size, or ``None`` to receive bytes of any size (the
    pickles of lower-case collectives). ``label`` names the step for traces.

    ``state`` is the rank's working data at this step (a buffer, an array, the
    list of pickles being moved; None when there is nothing to show), which
    traces with payloads snapshot when the round starts and again once the
    algorithm has processed the round's received data: when it yields its
    next round or returns. An algorithm whose working data changes identity
    while it processes a round (a reduction combining into a new array) sets
    ``state`` of that round to the new object before moving on. A round with
    no messages is a local step (e.g. rotating gathered blocks into place).
    """

    __slots__ = ("label", "recvs", "sends", "state")

    def __init__(
        self,
        label: str = "",
        sends: Sequence[tuple[int, Any]] = (),
        recvs: Sequence[tuple[int, memoryview | None]] = (),
        state: Any = None,
    ) -> None:
        self.label = label
        self.sends = sends
        self.recvs = recvs
        self.state = state


# What an algorithm is sent back after each round: the round's completed receive
# operations (``progress.operation.Op``), in the order of ``Round.recvs``.
Algorithm = Generator[Round, "list[Any]", Any]


def is_local(rnd: Round) -> bool:
    """Whether ``rnd`` moves no message: a local step, which only traces show."""
    return not (rnd.sends or rnd.recvs)
