"""One-sided communication in a trace: operations, synchronisation calls and epochs.

Each rank records the one-sided operations it started (``rma`` records: origin,
target, window, call, operation, bytes, displacement) and its windows'
synchronisation calls (``rma_sync`` records), see :mod:`ipympi.progress.tracing`.
:func:`build` turns them into :class:`RmaOp` and :class:`RmaSync` objects and
reconstructs each rank's *epochs* from its synchronisation calls, window by
window, as the standard defines them:

* a fence epoch runs from one ``Fence`` to the next (none follows a ``Fence`` with
  ``MODE_NOSUCCEED``); the k-th fence epoch of a window is the same epoch on
  every rank (``index``);
* an access epoch from ``Start`` to ``Complete`` (to the ranks of its group), an
  exposure epoch from ``Post`` to ``Wait`` (or a ``Test`` that returned True);
* a passive-target epoch from ``Lock(t)`` to ``Unlock(t)`` (to ``t``) and from
  ``Lock_all`` to ``Unlock_all`` (to every rank).

An operation belongs to the latest access epoch of its origin on its window that
was open when it started and reaches its target (``epoch``); the target's
exposure epochs list the operations they received (``incoming``). An epoch still
open when tracing stopped has no ``closed`` call, one that opened before tracing
started has no ``opened`` call (it is only made for operations that need it).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core import constants as K
from .units import format_bytes, plural

__all__ = ["RmaEpoch", "RmaOp", "RmaSync", "build", "count_epochs", "epoch_groups", "rank_list"]

# Which way the data goes: "put" origin → target, "get" target → origin, "both" each way.
_WAYS = ("put", "get", "both")
_GET_CALLS = ("Get", "Rget")


def rank_list(ranks: Sequence[int]) -> str:
    """``0-3`` for consecutive ranks, ``0, 2, 5`` otherwise."""
    ranks = sorted(ranks)
    if len(ranks) > 2 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"{ranks[0]}-{ranks[-1]}"
    return ", ".join(str(r) for r in ranks)


@dataclass(eq=False)
class RmaOp:
    """One one-sided operation: ``origin`` accessed ``target``'s window memory."""

    origin: int
    target: int
    t0: float
    t1: float
    call: str
    op: str | None
    way: str
    nbytes: int
    disp: int | None
    win: int
    window: str
    record: dict[str, Any] = field(repr=False)
    epoch: RmaEpoch | None = field(default=None, repr=False)

    @property
    def label(self) -> str:
        """``Put``, ``Accumulate(SUM)``, ..."""
        return self.call if self.op is None else f"{self.call}({self.op})"

    @property
    def src(self) -> int:
        """Where the data comes from (for a fetching operation: the origin's data)."""
        return self.target if self.way == "get" else self.origin

    @property
    def dst(self) -> int:
        return self.origin if self.way == "get" else self.target

    @property
    def matched(self) -> bool:
        """Always: the origin alone moves the data (the step pictures ask, as of messages)."""
        return True

    @property
    def kind(self) -> str:
        """``put``, ``get`` or ``accumulate`` (the accumulates and the atomics)."""
        if self.call in ("Put", "Rput"):
            return "put"
        if self.call in _GET_CALLS:
            return "get"
        return "accumulate"

    def describe(self) -> str:
        """``rank 0 Put → rank 1: 8 B at displacement 0``."""
        arrow = {"put": "→", "get": "←", "both": "↔"}[self.way]
        where = "" if self.disp is None else f" at displacement {self.disp}"
        return (
            f"rank {self.origin} {self.label} {arrow} rank {self.target}: "
            f"{format_bytes(self.nbytes)}{where}"
        )


@dataclass(eq=False)
class RmaSync:
    """One synchronisation call of a window on one rank."""

    rank: int
    t0: float
    t1: float
    call: str
    win: int
    window: str
    peer: int | None
    group: list[int] | None
    lock: str | None
    assertion: int
    done: bool
    record: dict[str, Any] = field(repr=False)

    @property
    def label(self) -> str:
        """``Fence``, ``Lock(1, exclusive)``, ``Start(1, 2)``, ``Flush(0)``, ..."""
        args = []
        if self.peer is not None:
            args.append(str(self.peer))
        if self.group is not None:
            args.append(rank_list(self.group) if self.group else "nobody")
        if self.lock is not None and self.call == "Lock":
            args.append(self.lock)
        text = f"{self.call}({', '.join(args)})" if args else self.call
        return text if self.done else f"{text}: not yet"


@dataclass(eq=False)
class RmaEpoch:
    """An epoch of one rank on one window (see the module docstring)."""

    rank: int
    win: int
    window: str
    kind: str  # "fence", "access", "exposure", "lock" or "lock_all"
    peers: tuple[int, ...] | None  # the ranks it reaches (exposes to); None: every rank
    opened: RmaSync | None
    closed: RmaSync | None = None
    index: int = 0  # fence epochs: 1 for the first of this window in the trace, ...
    lock: str | None = None
    ops: list[RmaOp] = field(default_factory=list)
    incoming: list[RmaOp] = field(default_factory=list)
    start: float = 0.0  # when it opened (the trace's start if before it)
    end: float | None = None  # without a closing call: the trace's end (still open)

    @property
    def t0(self) -> float:
        return self.opened.t0 if self.opened is not None else self.start

    @property
    def t1(self) -> float | None:
        return self.closed.t1 if self.closed is not None else self.end

    @property
    def opened_at(self) -> float:
        """When the epoch was open: its opening call returned (a ``Start`` waits for the
        targets' ``Post``), or the trace's start."""
        return self.opened.t1 if self.opened is not None else self.start

    @property
    def access(self) -> bool:
        """Whether this rank's operations go in it (all but exposure epochs)."""
        return self.kind != "exposure"

    def reaches(self, rank: int) -> bool:
        return self.peers is None or rank in self.peers

    @property
    def label(self) -> str:
        """``fence epoch 1``, ``lock epoch to 0 (exclusive)``, ``exposure epoch for 1, 2``."""
        if self.kind == "fence":
            return f"fence epoch {self.index}" if self.index else "fence epoch"
        if self.kind == "lock":
            peer = self.peers[0] if self.peers else "?"
            return f"lock epoch to {peer}" + (f" ({self.lock})" if self.lock else "")
        if self.kind == "lock_all":
            return "lock_all epoch"
        who = rank_list(self.peers) if self.peers else "nobody"
        return f"{self.kind} epoch {'to' if self.kind == 'access' else 'for'} {who}"

    def summary(self) -> str:
        ops = self.ops if self.access else self.incoming
        what = "operation" if self.access else "incoming operation"
        opened = self.opened.label if self.opened is not None else "before the trace"
        closed = self.closed.label if self.closed is not None else "still open"
        return f"{self.label}: {opened} … {closed}, {plural(len(ops), what)}"


def count_epochs(epochs: Sequence[RmaEpoch]) -> int:
    """How many epochs: a fence epoch of a window counts once for all its ranks."""
    fences = {(e.win, e.index) for e in epochs if e.kind == "fence" and e.index}
    return len(fences) + sum(1 for e in epochs if not (e.kind == "fence" and e.index))


def epoch_groups(epochs: Sequence[RmaEpoch]) -> list[list[RmaEpoch]]:
    """The epochs in order, the k-th fence epoch of a window gathered over its ranks."""
    groups: dict[tuple[Any, ...], list[RmaEpoch]] = {}
    for epoch in epochs:
        if epoch.kind == "fence" and epoch.index:
            key: tuple[Any, ...] = ("fence", epoch.win, epoch.index)
        else:
            key = ("epoch", id(epoch))
        groups.setdefault(key, []).append(epoch)
    return sorted(groups.values(), key=lambda group: min(e.opened_at for e in group))


def _op(record: dict[str, Any]) -> RmaOp:
    way = str(record.get("dir") or ("get" if record["call"] in _GET_CALLS else "put"))
    if way not in _WAYS:
        raise ValueError(f"rank {record['rank']}: rma record with direction {way!r}")
    disp = record.get("disp")
    return RmaOp(
        origin=int(record["rank"]),
        target=int(record["target"]),
        t0=float(record["t0"]),
        t1=float(record["t1"]),
        call=str(record["call"]),
        op=record.get("op"),
        way=way,
        nbytes=int(record["bytes"]),
        disp=None if disp is None else int(disp),
        win=int(record["win"]),
        window=str(record.get("window") or f"window {record['win']}"),
        record=record,
    )


def _sync(record: dict[str, Any]) -> RmaSync:
    peer, group = record.get("peer"), record.get("group")
    return RmaSync(
        rank=int(record["rank"]),
        t0=float(record["t0"]),
        t1=float(record["t1"]),
        call=str(record["call"]),
        win=int(record["win"]),
        window=str(record.get("window") or f"window {record['win']}"),
        peer=None if peer is None else int(peer),
        group=None if group is None else [int(r) for r in group],
        lock=record.get("lock"),
        assertion=int(record.get("assertion") or 0),
        done=bool(record.get("done", True)),
        record=record,
    )


def _epochs_of(syncs: list[RmaSync], end: float) -> tuple[list[RmaEpoch], list[RmaEpoch]]:
    """The epochs of one rank on one window, from its calls in time order; and the
    epochs that opened before the trace, known by the calls that closed them (kept
    apart: they only count if an operation of the trace went in them)."""
    found: list[RmaEpoch] = []
    unopened: list[RmaEpoch] = []
    fence: RmaEpoch | None = None
    access: RmaEpoch | None = None
    exposure: RmaEpoch | None = None
    locks: dict[int, RmaEpoch] = {}
    lock_all: RmaEpoch | None = None
    fences = 0

    def opening(kind: str, sync: RmaSync, peers: Any, lock: str | None = None) -> RmaEpoch:
        epoch = RmaEpoch(sync.rank, sync.win, sync.window, kind, peers, sync, lock=lock)
        found.append(epoch)
        return epoch

    def closing(epoch: RmaEpoch | None, sync: RmaSync, kind: str, peers: Any) -> None:
        if epoch is None:
            epoch = RmaEpoch(sync.rank, sync.win, sync.window, kind, peers, None)
            unopened.append(epoch)
        epoch.closed = sync

    for sync in syncs:
        call = sync.call
        if call == "Fence":
            fences += 1
            if fence is not None or (fences == 1 and not sync.assertion & K.MODE_NOPRECEDE):
                closing(fence, sync, "fence", None)
            fence = None
            if not sync.assertion & K.MODE_NOSUCCEED:
                fence = opening("fence", sync, None)
                fence.index = fences
        elif call == "Start":
            access = opening("access", sync, tuple(sync.group or ()))
        elif call == "Complete":
            closing(access, sync, "access", tuple(sync.group or ()))
            access = None
        elif call == "Post":
            exposure = opening("exposure", sync, tuple(sync.group or ()))
        elif call in ("Wait", "Test") and sync.done:
            closing(exposure, sync, "exposure", None)
            exposure = None
        elif call == "Lock" and sync.peer is not None:
            locks[sync.peer] = opening("lock", sync, (sync.peer,), sync.lock)
        elif call == "Unlock" and sync.peer is not None:
            closing(locks.pop(sync.peer, None), sync, "lock", (sync.peer,))
        elif call == "Lock_all":
            lock_all = opening("lock_all", sync, None, sync.lock)
        elif call == "Unlock_all":
            closing(lock_all, sync, "lock_all", None)
            lock_all = None
    for epoch in found:
        if epoch.closed is None:
            epoch.end = end
    return found, unopened


def _covers(epoch: RmaEpoch, op: RmaOp) -> bool:
    t1 = epoch.t1
    return (
        epoch.access
        and epoch.reaches(op.target)
        and epoch.t0 <= op.t0
        and (t1 is None or op.t0 <= t1)
    )


def _assign(op: RmaOp, epochs: list[RmaEpoch], unopened: list[RmaEpoch], start: float) -> None:
    """Put ``op`` in the latest access epoch of its origin that covers it; one that
    opened before the trace if none did (made from its closing call, or open-ended)."""
    best: RmaEpoch | None = None
    for epoch in epochs:
        if _covers(epoch, op) and (best is None or epoch.t0 >= best.t0):
            best = epoch
    if best is None:
        for epoch in unopened:
            epoch.start = start
            if _covers(epoch, op):
                unopened.remove(epoch)
                epochs.append(epoch)
                best = epoch
                break
    if best is None:
        best = RmaEpoch(op.origin, op.win, op.window, "access", None, None, start=start)
        epochs.append(best)
    best.ops.append(op)
    op.epoch = best


def build(
    op_records: Sequence[dict[str, Any]],
    sync_records: Sequence[dict[str, Any]],
    start: float,
    end: float,
) -> tuple[list[RmaOp], list[RmaSync], list[RmaEpoch]]:
    """The operations, synchronisation calls and epochs of a trace (``start``/``end``:
    the trace's first and last times)."""
    ops = sorted((_op(dict(r)) for r in op_records), key=lambda o: (o.t0, o.origin))
    syncs = sorted((_sync(dict(r)) for r in sync_records), key=lambda s: (s.t0, s.rank))
    by_lane: dict[tuple[int, int], list[RmaSync]] = defaultdict(list)
    for sync in syncs:
        by_lane[(sync.rank, sync.win)].append(sync)
    epochs_of: dict[tuple[int, int], list[RmaEpoch]] = {}
    unopened_of: dict[tuple[int, int], list[RmaEpoch]] = {}
    for key, calls in by_lane.items():
        epochs_of[key], unopened_of[key] = _epochs_of(calls, end)
    for op in ops:
        key = (op.origin, op.win)
        _assign(op, epochs_of.setdefault(key, []), unopened_of.get(key, []), start)
        for epoch in epochs_of.get((op.target, op.win), ()):
            t1 = epoch.t1
            if (
                not epoch.access
                and epoch.reaches(op.origin)
                and epoch.t0 <= op.t1
                and (t1 is None or op.t0 <= t1)
            ):
                epoch.incoming.append(op)
                break
    # A fence epoch the last Fence opened and nothing used is not worth a drawing.
    epochs = [
        e
        for found in epochs_of.values()
        for e in found
        if e.closed is not None or e.ops or e.incoming or e.kind != "fence"
    ]
    for epoch in epochs:
        if epoch.closed is None and epoch.end is None:
            epoch.end = end
    epochs.sort(key=lambda e: (e.t0, e.rank))
    return ops, syncs, epochs
