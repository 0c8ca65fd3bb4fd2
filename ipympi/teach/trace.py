"""The merged message trace of one cell: every rank's records paired into messages.

Each rank records its own sends, receives and collective calls (see
:mod:`ipympi.progress.tracing` for the record format). :class:`Trace` merges them:
sends are paired with receives by MPI's non-overtaking rule (the k-th send
from s to d on a context and tag matches the k-th receive at d from s on the
same context and tag), collectives are gathered by their ``(context, seq)``
across ranks, and the messages inside a collective are ordered into causal
steps, and one-sided operations are placed in the epochs their ranks' window
synchronisation calls opened (:mod:`.rma`). The drawings (:mod:`.diagram`) and the
round-by-round explanations (:mod:`.explain`) are built from this one model.
"""

from __future__ import annotations

import html
import math
from collections import defaultdict, deque
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from .diagram import render_svg, render_text
from .rma import RmaEpoch, RmaOp, RmaSync, build, count_epochs
from .rma_steps import EpochSteps
from .traced import CollectiveSpan, TracedCollective, TracedMessage, TracedRound, assign_steps
from .units import format_time, plural

__all__ = [
    "CollectiveSpan",
    "Trace",
    "TracedCollective",
    "TracedMessage",
    "TracedRound",
]

_REQUIRED = {
    "send": ("t", "rank", "peer", "context", "tag", "bytes", "call"),
    "recv": ("t", "rank", "peer", "context", "tag", "bytes", "call"),
    "coll": ("t0", "t1", "rank", "context", "seq", "call"),
    "file": ("t0", "t1", "rank", "call", "offset", "bytes"),
    "rma": ("t0", "t1", "rank", "target", "win", "call", "bytes"),
    "rma_sync": ("t0", "t1", "rank", "win", "call"),
    "truncated": (),
}


# -- building ----------------------------------------------------------------------------
def _check(rank: int, index: int, record: Any) -> str:
    where = f"rank {rank}, record {index}"
    if not isinstance(record, Mapping):
        raise ValueError(f"{where}: a trace record is a dict, not {type(record).__name__}")
    kind = record.get("type")
    if kind not in _REQUIRED:
        known = ", ".join(sorted(_REQUIRED))
        raise ValueError(f"{where}: unknown record type {kind!r} (expected one of {known})")
    missing = [key for key in _REQUIRED[kind] if key not in record]
    if missing:
        raise ValueError(f"{where}: {kind} record lacks {', '.join(missing)}")
    if "rank" in record and record["rank"] != rank:
        raise ValueError(f"{where}: record of rank {record['rank']} given as rank {rank}'s")
    return kind


def _record_time(record: Mapping[str, Any]) -> float:
    value = record.get("t", record.get("t0"))
    return math.inf if value is None else float(value)


def _times(record: Mapping[str, Any]) -> Iterator[float]:
    for key in ("t", "t0", "t1", "arrived"):
        value = record.get(key)
        if value is not None:
            yield float(value)
    for rnd in record.get("rounds") or ():
        for key in ("t0", "t1"):
            value = rnd.get(key)
            if value is not None:
                yield float(value)


def _coll_key(value: Any) -> tuple[int, int] | None:
    return None if value is None else (int(value[0]), int(value[1]))


def _pair(sends: list[dict], recvs: list[dict]) -> tuple[list[TracedMessage], list[dict]]:
    """Pair sends and receives by the non-overtaking rule; return messages and lone receives."""
    waiting: dict[tuple, deque[dict]] = defaultdict(deque)
    for record in recvs:
        waiting[(record["peer"], record["rank"], record["context"], record["tag"])].append(record)
    messages = []
    for send in sends:
        queue = waiting.get((send["rank"], send["peer"], send["context"], send["tag"]))
        recv = queue.popleft() if queue else None
        messages.append(
            TracedMessage(
                src=int(send["rank"]),
                dst=int(send["peer"]),
                t_send=float(send["t"]),
                t_recv=None if recv is None else float(recv["t"]),
                nbytes=int(send["bytes"]),
                comm=str(send.get("comm", "?")),
                context=int(send["context"]),
                tag=int(send["tag"]),
                call=str(send["call"]),
                recv_call=None if recv is None else str(recv["call"]),
                coll=_coll_key(send.get("coll")),
                round=send.get("round"),
                send_record=send,
                recv_record=recv,
            )
        )
    unmatched = [record for queue in waiting.values() for record in queue]
    unmatched.sort(key=_record_time)
    return messages, unmatched


def _span(record: Mapping[str, Any]) -> CollectiveSpan:
    rounds = []
    for position, rnd in enumerate(record.get("rounds") or (), start=1):
        if not isinstance(rnd, Mapping):
            raise ValueError(f"rank {record['rank']}: a collective's round is a dict")
        rounds.append(
            TracedRound(
                index=int(rnd.get("index", position)),
                label=str(rnd.get("label") or ""),
                t0=rnd.get("t0"),
                t1=rnd.get("t1"),
                sends=[(int(p), int(n)) for p, n in rnd.get("sends") or ()],
                recvs=[(int(p), int(n)) for p, n in rnd.get("recvs") or ()],
                record=dict(rnd),
            )
        )
    return CollectiveSpan(
        rank=int(record["rank"]),
        crank=record.get("crank"),
        t0=float(record["t0"]),
        t1=float(record["t1"]),
        rounds=rounds,
        error=record.get("error"),
        record=dict(record),
    )


def _collectives(
    colls: list[dict], messages: list[TracedMessage]
) -> dict[tuple[int, int], TracedCollective]:
    found: dict[tuple[int, int], TracedCollective] = {}
    for record in sorted(colls, key=lambda r: r["t0"]):
        key = (int(record["context"]), int(record["seq"]))
        coll = found.get(key)
        if coll is None:
            coll = found[key] = TracedCollective(
                context=key[0],
                seq=key[1],
                call=str(record["call"]),
                comm=str(record.get("comm", "?")),
                algorithm=str(record.get("algorithm") or "?"),
                root=record.get("root"),
                size=record.get("size"),
            )
        elif record.get("algorithm") and record["algorithm"] not in coll.algorithm.split(" / "):
            coll.algorithm += f" / {record['algorithm']}"
        coll.spans[int(record["rank"])] = _span(record)
    for message in messages:
        if message.coll is None:
            continue
        coll = found.get(message.coll)
        if coll is None:  # its "coll" records were not kept (a truncated trace)
            coll = found[message.coll] = TracedCollective(
                context=message.coll[0],
                seq=message.coll[1],
                call=message.call,
                comm=message.comm,
                algorithm="?",
                root=None,
                size=None,
            )
        coll.messages.append(message)
    for coll in found.values():
        assign_steps(coll.messages)
    return found


class Trace:
    """The merged trace of one cell (see the module docstring)."""

    def __init__(
        self,
        ranks: list[int],
        records: list[dict[str, Any]],
        messages: list[TracedMessage],
        collectives: list[TracedCollective],
        unmatched_receives: list[dict[str, Any]],
        truncated: bool,
        file_ops: Sequence[dict[str, Any]] = (),
        rma: tuple[list[RmaOp], list[RmaSync], list[RmaEpoch]] = ([], [], []),
    ) -> None:
        self.ranks = ranks
        self.file_ops = sorted(file_ops, key=lambda r: (float(r["t0"]), int(r["rank"])))
        self.records = records
        self.messages = messages
        self.collectives = collectives
        self.unmatched_receives = unmatched_receives
        self.truncated = truncated
        times = [t for record in records for t in _times(record)]
        self.start = min(times, default=0.0)
        self.duration = max(times, default=0.0) - self.start
        # one-sided communication: operations, synchronisation calls, epochs
        self.rma_ops, self.rma_syncs, self.epochs = rma

    @classmethod
    def from_ranks(cls, records: Mapping[int, Sequence[Mapping[str, Any]]]) -> Trace:
        """Merge the records of every rank (world rank → that rank's records, oldest first)."""
        if not isinstance(records, Mapping):
            raise TypeError(f"records: a mapping of rank to records, not {type(records).__name__}")
        lanes: set[int] = set()
        everything: list[dict[str, Any]] = []
        by_kind: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for rank, rank_records in records.items():
            if isinstance(rank, bool) or not isinstance(rank, int):
                raise ValueError(f"ranks are ints, not {rank!r}")
            if isinstance(rank_records, (str, bytes, Mapping)):
                raise ValueError(f"rank {rank}: expected a list of records")
            lanes.add(rank)
            for index, record in enumerate(rank_records):
                kind = _check(rank, index, record)
                record = dict(record)
                everything.append(record)
                by_kind[kind].append(record)
                if kind in ("send", "recv"):
                    lanes.add(int(record["peer"]))
                elif kind == "rma":
                    lanes.add(int(record["target"]))
        messages, unmatched = _pair(by_kind["send"], by_kind["recv"])
        messages.sort(key=lambda m: (m.t_send, m.src))
        collectives = _collectives(by_kind["coll"], messages)
        ordered = sorted(collectives.values(), key=lambda c: c.t0)
        everything.sort(key=_record_time)
        times = [t for record in everything for t in _times(record)]
        first, last = min(times, default=0.0), max(times, default=0.0)
        return cls(
            sorted(lanes),
            everything,
            messages,
            ordered,
            unmatched,
            bool(by_kind["truncated"]),
            by_kind["file"],
            build(by_kind["rma"], by_kind["rma_sync"], first, last),
        )

    # -- views -------------------------------------------------------------------------
    @property
    def empty(self) -> bool:
        return not (
            self.messages
            or self.collectives
            or self.unmatched_receives
            or self.file_ops
            or self.rma_ops
            or self.rma_syncs
        )

    @property
    def dropped(self) -> int:
        """How many records the ranks dropped (over their limits)."""
        return sum(int(r.get("dropped") or 0) for r in self.records if r["type"] == "truncated")

    def relative(self, t: float) -> float:
        return t - self.start

    def __len__(self) -> int:
        return len(self.messages)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.records)

    def summary(self) -> str:
        if self.empty:
            ranks = plural(len(self.ranks), "rank")
            text = f"no messages ({ranks})" if self.ranks else "no messages"
        else:
            n_coll = len(self.collectives)
            text = (
                f"{plural(len(self.ranks), 'rank')}, {plural(len(self.messages), 'message')}, "
                f"{plural(n_coll, 'collective')}, "
                + (f"{plural(len(self.file_ops), 'file operation')}, " if self.file_ops else "")
                + (
                    f"{plural(len(self.rma_ops), 'one-sided operation')} in "
                    f"{plural(count_epochs(self.epochs), 'epoch')}, "
                    if self.rma_ops or self.rma_syncs
                    else ""
                )
                + f"{format_time(self.duration)}"
            )
        if self.truncated:
            text += f", truncated ({self.dropped} records dropped)"
        return text

    def __repr__(self) -> str:
        return f"<Trace: {self.summary()}>"

    def to_svg(self, width: int = 900) -> str:
        return render_svg(self, width)

    def file_lines(self) -> list[str]:
        """One line per file data access: time, rank, call, offset, bytes and pieces."""
        return [
            f"{format_time(self.relative(float(r['t0'])))}  rank {r['rank']}  {r['call']}  "
            f"offset {r['offset']}, {plural(int(r['bytes']), 'byte')}"
            + (f" in {r['segments']} pieces" if int(r.get("segments") or 1) > 1 else "")
            for r in self.file_ops
        ]

    def to_text(self, width: int = 100) -> str:
        return render_text(self, width)

    def epoch_steps(self) -> EpochSteps:
        """The one-sided communication, epoch by epoch (an :class:`~.rma_steps.EpochSteps`: shown
        as frames; ``.widget()`` steps through them); ValueError without any epoch."""
        return EpochSteps(self)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        """The diagram as SVG, also inline in HTML, and as text.

        JupyterLab shows ``image/svg+xml`` as an image, where the tooltips of
        the arrows and spans do not show; it prefers ``text/html``, where the
        same SVG is part of the page and its tooltips work.
        """
        svg = self.to_svg()
        return {
            "image/svg+xml": svg,
            "text/html": f'<div class="ipympi-trace">{svg}{file_table(self)}</div>',
            "text/plain": self.to_text(),
        }


def file_table(trace: Trace) -> str:
    """The file operations of ``trace`` as an HTML list (empty without any)."""
    if not trace.file_ops:
        return ""
    items = "".join(f"<li><code>{html.escape(line)}</code></li>" for line in trace.file_lines())
    return f'<div class="ipympi-file-ops">File operations:<ul>{items}</ul></div>'
