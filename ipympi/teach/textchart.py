"""A trace as text, for terminals (``jupyter console``) and logs.

First a lane chart: one row per rank, one column per time bucket on the same
:class:`~.timescale.TimeScale` as the SVG diagram (long idle gaps shown as
``≈``), ``S``/``R`` where a rank sends or receives and ``[Name…]`` while it is
inside a collective or a window's synchronisation call (``[Fence]``), ``P``/``G``/``A``
where a rank starts a put, get or accumulate (``p``/``g``/``a`` on its target's row)
and ``=`` while a rank is inside an epoch. Then the events in time order: each
collective with its messages grouped by causal step (``round k`` when the ranks'
rounds line up), each epoch with its operations in order, and each point-to-point
message on its own line.
"""

from __future__ import annotations

import textwrap
from typing import TYPE_CHECKING

from .rma import epoch_groups, rank_list
from .timescale import TimeScale, event_times
from .units import format_bytes, format_time, plural

if TYPE_CHECKING:
    from .rma import RmaEpoch
    from .traced import TracedCollective, TracedMessage, TraceView

__all__ = ["render_text"]

MAX_EVENT_LINES = 400
NBSP = "\N{NO-BREAK SPACE}"


def _collective_lines(trace: TraceView, coll: TracedCollective, width: int) -> list[str]:
    rounds = coll.n_rounds
    head = f"{coll.call} on {coll.comm}"
    if coll.root is not None:
        head += f" (root {coll.root})"
    head += (
        f" — {coll.algorithm}, {plural(rounds, 'round')}, "
        f"{format_time(coll.duration)}, from {format_time(trace.relative(coll.t0))}"
    )
    lines = [head]
    word = "round" if coll.rounds_aligned() else "step"
    for k, messages in enumerate(coll.steps(), start=1):
        labels = coll.round_labels(messages)
        name = f"{word} {k}" + (f" ({'; '.join(labels)})" if labels else "")
        moves = ", ".join(
            # no-break spaces keep each message on one line when the list wraps
            f"{m.src}→{m.dst} {format_bytes(m.nbytes)}".replace(" ", NBSP)
            + ("" if m.matched else f"{NBSP}(not{NBSP}received)")
            for m in messages
        )
        wrapped = textwrap.wrap(
            f"{name}: {moves}", width, initial_indent="  ", subsequent_indent="      "
        )
        lines += [line.replace(NBSP, " ") for line in wrapped]
    for rank, error in sorted(coll.errors.items()):
        lines.append(f"  failed on rank {rank}: {error}")
    return lines


def _epoch_lines(trace: TraceView, epochs: list[RmaEpoch]) -> list[str]:
    """One epoch (a fence epoch: on every rank of its window) and its operations."""
    first = epochs[0]
    ranks = sorted({e.rank for e in epochs})
    who = f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {rank_list(ranks)}"
    ops = sorted(
        (op for e in epochs for op in (e.ops if e.access else e.incoming)), key=lambda o: o.t0
    )
    opened = first.opened.label if first.opened is not None else "before the trace"
    ends = [e.closed.t1 for e in epochs if e.closed is not None]
    closed = (
        f"{first.closed.label} at {format_time(trace.relative(max(ends)))}"
        if first.closed is not None
        else "still open"
    )
    lines = [
        f"{first.label} on {first.window}, {who}: {opened} at "
        f"{format_time(trace.relative(min(e.t0 for e in epochs)))} … {closed}, "
        f"{plural(len(ops), 'operation' if first.access else 'incoming operation')}"
    ]
    lines += [f"  {k}. {op.describe()}" for k, op in enumerate(ops, start=1)]
    return lines


def _message_line(trace: TraceView, m: TracedMessage) -> str:
    where = "" if m.comm == "MPI_COMM_WORLD" else f"  on {m.comm}"
    received = (
        "(receive not traced)"
        if m.t_recv is None
        else f"({m.recv_call}, {format_time(trace.relative(m.t_recv))})"
    )
    return (
        f"  {format_time(trace.relative(m.t_send)):>9}  {m.call} {m.src} → {m.dst}  "
        f"tag {m.tag}  {format_bytes(m.nbytes)}{where}  {received}"
    )


def _orphan_line(trace: TraceView, record: dict) -> str:
    where = "" if record.get("comm") == "MPI_COMM_WORLD" else f"  on {record.get('comm', '?')}"
    return (
        f"  {format_time(trace.relative(float(record['t']))):>9}  {record['call']} "
        f"{record['rank']} ← {record['peer']}  tag {record['tag']}  "
        f"{format_bytes(int(record['bytes']))}{where}  (send not traced)"
    )


def _event_lines(trace: TraceView, width: int) -> list[str]:
    entries: list[tuple[float, int, list[str]]] = []
    for coll in trace.collectives:
        entries.append((coll.t0, 0, _collective_lines(trace, coll, width)))
    for m in trace.messages:
        if m.coll is None:
            entries.append((m.t_send, 1, [_message_line(trace, m)]))
    for record in trace.unmatched_receives:
        entries.append((float(record["t"]), 1, [_orphan_line(trace, record)]))
    for group in epoch_groups(trace.epochs):
        entries.append((min(e.opened_at for e in group), 0, _epoch_lines(trace, group)))
    entries.sort(key=lambda e: (e[0], e[1]))
    lines = [line for _, _, group in entries for line in group]
    if len(lines) > MAX_EVENT_LINES:
        hidden = len(lines) - MAX_EVENT_LINES
        lines = [*lines[:MAX_EVENT_LINES], f"  … {hidden} more lines"]
    return lines


def _mark(row: list[str], col: int, char: str, protect: set[int] | None = None) -> None:
    if not 0 <= col < len(row) or (protect and col in protect):
        return
    current = row[col]
    if current in "SR*" and current != char:
        row[col] = "*"
    else:
        row[col] = char


def _lane_chart(trace: TraceView, width: int) -> list[str]:
    label_w = max(len(f"rank {r}") for r in trace.ranks) + 1
    cols = max(width - label_w - 1, 20)
    scale = TimeScale(event_times(trace), trace.duration, 0, cols - 1, break_width=3, min_live=2)

    def col(t: float) -> int:
        return min(max(round(scale.x(t - trace.start)), 0), cols - 1)

    rows = {rank: [" "] * cols for rank in trace.ranks}
    names: dict[int, set[int]] = {rank: set() for rank in trace.ranks}
    for coll in trace.collectives:
        for rank, span in coll.spans.items():
            c0, c1 = col(span.t0), col(span.t1)
            row = rows[rank]
            if c1 == c0:
                row[c0] = "|"
                continue
            inner = c1 - c0 - 1
            text = coll.call if len(coll.call) <= inner else coll.call[: max(inner - 1, 0)] + "…"
            text = text[:inner]
            row[c0], row[c1] = "[", "]"
            for i in range(inner):
                row[c0 + 1 + i] = text[i] if i < len(text) else "-"
            names[rank].update(range(c0, c0 + 1 + len(text)), (c1,))
    for epoch in trace.epochs:
        end = epoch.t1 if epoch.t1 is not None else trace.start + trace.duration
        row = rows[epoch.rank]
        for c in range(col(epoch.t0), col(end) + 1):
            if row[c] == " ":
                row[c] = "="
    for sync in trace.rma_syncs:
        c0, c1 = col(sync.t0), col(sync.t1)
        row = rows[sync.rank]
        inner = c1 - c0 - 1
        if inner < 1:
            row[c0] = "|"
            continue
        text = sync.call[:inner]
        row[c0], row[c1] = "[", "]"
        for i in range(inner):
            row[c0 + 1 + i] = text[i] if i < len(text) else "-"
        names[sync.rank].update(range(c0, c0 + 1 + len(text)), (c1,))
    for seg in scale.breaks:  # over idle lanes and the plain part of spans
        for c in range(round(seg.x0) + 1, round(seg.x1)):
            for row in rows.values():
                if 0 <= c < cols and row[c] in " -":
                    row[c] = "≈"
    for m in trace.messages:  # a collective's markers leave its name readable
        _mark(rows[m.src], col(m.t_send), "S", names[m.src] if m.coll else None)
        if m.t_recv is not None:
            _mark(rows[m.dst], col(m.t_recv), "R", names[m.dst] if m.coll else None)
    for record in trace.unmatched_receives:
        _mark(rows[int(record["rank"])], col(float(record["t"])), "R")
    for op in trace.rma_ops:
        letter = op.kind[0].upper()
        _mark(rows[op.origin], col(op.t0), letter)
        if op.target != op.origin:
            _mark(rows[op.target], col(op.t1), letter.lower(), names[op.target])
    axis = [" "] * cols
    for tick in scale.ticks(spacing=12):
        c = min(round(tick.x), cols - 1)
        if c + len(tick.label) <= cols and all(ch == " " for ch in axis[max(c - 1, 0) : c]):
            axis[c : c + len(tick.label)] = list(tick.label)
    lines = [" " * label_w + " " + "".join(axis).rstrip()]
    lines += [f"{f'rank {rank}':<{label_w}}|" + "".join(rows[rank]) for rank in trace.ranks]
    key = "S send, R receive, * both, [Name] collective"
    if trace.rma_ops or trace.rma_syncs:
        key += ", P/G/A put/get/accumulate (p/g/a its target), = epoch"
    if scale.breaks:
        key += ", ≈ idle (compressed)"
    lines.append(" " * label_w + " " + key)
    return lines


def render_text(trace: TraceView, width: int = 100) -> str:
    """``trace`` as text: a summary, a lane chart and the list of events."""
    if not isinstance(width, int) or width < 40:
        raise ValueError(f"width must be an int of at least 40 columns, not {width!r}")
    lines = [f"Trace: {trace.summary()}"]
    if trace.empty:
        return lines[0]
    if (
        trace.messages
        or trace.collectives
        or trace.unmatched_receives
        or trace.rma_ops
        or trace.rma_syncs
    ):
        lines += _lane_chart(trace, width)
        lines.append("")
        lines += _event_lines(trace, width)
    if trace.file_ops:
        lines += ["", "File operations:", *(f"  {line}" for line in trace.file_lines())]
    return "\n".join(lines)
