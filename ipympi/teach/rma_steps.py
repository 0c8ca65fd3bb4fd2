"""The one-sided communication of a trace, epoch by epoch (``trace.epoch_steps()``).

The step-by-step view of :mod:`.explain` walks through a collective's messages; this
one (a :class:`~.frames.FrameView` too) walks through a cell's epochs the same way.
Each frame is one epoch (a fence epoch of a window on all its ranks at once, a lock
or post/start epoch of one rank): the calls that opened and closed it, its operations
in the order they started (origin, target, call, operation, bytes, displacement), a
picture of the ranks with an arrow per operation the way its data went, and a table
with what each rank did in it and whose window memory was written (highlighted).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .frames import Frame, FrameView, Row, step_svg
from .rma import RmaEpoch, RmaOp, count_epochs, epoch_groups, rank_list
from .units import format_bytes, format_time, plural

if TYPE_CHECKING:
    from .traced import TraceView

__all__ = ["EpochSteps"]

_ARROWS = {"put": "→", "get": "←", "both": "↔"}


def _ops_of(group: list[RmaEpoch]) -> list[RmaOp]:
    ops = [op for epoch in group for op in (epoch.ops if epoch.access else epoch.incoming)]
    return sorted(set(ops), key=lambda op: (op.t0, op.origin))


def _did(rank: int, ops: list[RmaOp]) -> str:
    moves = [
        f"{op.label} {_ARROWS[op.way]} {op.target} ({format_bytes(op.nbytes)})"
        for op in ops
        if op.origin == rank
    ]
    return ", ".join(moves) if moves else "—"


def _written_by(rank: int, ops: list[RmaOp]) -> list[int]:
    """The origins that stored into ``rank``'s window memory (not by reading it)."""
    return sorted({op.origin for op in ops if op.target == rank and op.way != "get"})


class EpochSteps(FrameView):
    """The epochs of a trace, one frame each (see the module docstring)."""

    def __init__(self, trace: TraceView) -> None:
        groups = epoch_groups(trace.epochs)
        if not groups:
            raise ValueError("the trace holds no one-sided communication (no window epoch)")
        self.trace = trace
        self.groups = groups
        self.ranks = sorted(
            set(trace.ranks) | {op.origin for op in trace.rma_ops} | {e.rank for e in trace.epochs}
        )
        self.frames = [self._frame(k, group) for k, group in enumerate(groups, start=1)]

    def header(self) -> str:
        return (
            f"One-sided communication epoch by epoch — "
            f"{plural(len(self.trace.rma_ops), 'operation')} in "
            f"{plural(count_epochs(self.trace.epochs), 'epoch')}, "
            f"{plural(len(self.ranks), 'rank')}"
        )

    def _notes(self) -> list[str]:
        return [
            "An operation is complete when the call that closes its epoch returns: "
            "only then may the origin reuse its buffer and the target read what was put."
        ]

    def __repr__(self) -> str:
        return f"<EpochSteps: {self.header()}>"

    def _frame(self, k: int, group: list[RmaEpoch]) -> Frame:
        first = group[0]
        ops = _ops_of(group)
        who = sorted({e.rank for e in group})
        ranks = f"rank {who[0]}" if len(who) == 1 else f"ranks {rank_list(who)}"
        opened = first.opened.label if first.opened is not None else "before the trace"
        closed = first.closed.label if first.closed is not None else "still open"
        start = format_time(self.trace.relative(min(e.t0 for e in group)))
        title = (
            f"Step {k} of {len(self.groups)} — {first.label} on {first.window}, {ranks}: "
            f"{opened} … {closed} (from {start})"
        )
        lines = [op.describe() for op in ops] or ["no operation in this epoch"]
        of_rank = {e.rank: e for e in group}
        rows = []
        for rank in self.ranks:
            epoch = of_rank.get(rank)
            writers = _written_by(rank, ops)
            written = ", ".join(f"rank {r}" for r in writers) if writers else "—"
            rows.append(
                Row(
                    f"rank {rank}",
                    [epoch.label if epoch is not None else "—", _did(rank, ops), written],
                    [False, False, bool(writers)],
                )
            )
        payloads = [f"{op.label} {format_bytes(op.nbytes)}" for op in ops]
        svg = step_svg(self.ranks, ops, payloads)
        return Frame(title, ["rank", "epoch", "started", "window written by"], rows, lines, svg)
