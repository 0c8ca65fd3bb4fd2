"""The model of a merged trace that the drawings read: its messages and collectives, and
what a whole trace offers them (:class:`TraceView`).

:class:`~.trace.Trace` builds these from the ranks' records and draws itself through
:mod:`.diagram`, :mod:`.textchart` and :mod:`.rma_steps`; those read a trace only
through :class:`TraceView`, so that the model and its renderings import each other in
no circle.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, cast

if TYPE_CHECKING:
    from .rma import RmaEpoch, RmaOp, RmaSync

__all__ = [
    "CollectiveSpan",
    "TraceView",
    "TracedCollective",
    "TracedMessage",
    "TracedRound",
    "assign_steps",
]


# -- the model ---------------------------------------------------------------------------
@dataclass(eq=False)
class TracedMessage:
    """One message: its send (always traced) and its receive (None if not traced)."""

    src: int
    dst: int
    t_send: float
    t_recv: float | None
    nbytes: int
    comm: str
    context: int
    tag: int
    call: str
    recv_call: str | None
    coll: tuple[int, int] | None
    round: int | None
    send_record: dict[str, Any] = field(repr=False)
    recv_record: dict[str, Any] | None = field(repr=False)
    step: int | None = None  # causal step inside its collective (set with the collective)

    @property
    def recv_round(self) -> int | None:
        """The receiver's round of its collective in which this message arrived."""
        return None if self.recv_record is None else self.recv_record.get("round")

    @property
    def arrived(self) -> float | None:
        """When the message's data or announcement reached the receiver, if known."""
        return None if self.recv_record is None else self.recv_record.get("arrived")

    @property
    def matched(self) -> bool:
        return self.recv_record is not None


@dataclass(eq=False)
class TracedRound:
    """One round of a collective on one rank."""

    index: int
    label: str
    t0: float | None
    t1: float | None
    sends: list[tuple[int, int]]
    recvs: list[tuple[int, int]]
    record: dict[str, Any] = field(repr=False)

    @property
    def has_states(self) -> bool:
        return "before" in self.record or "after" in self.record


@dataclass(eq=False)
class CollectiveSpan:
    """One rank's part of a collective: when it was inside the call, and its rounds."""

    rank: int
    crank: int | None
    t0: float
    t1: float
    rounds: list[TracedRound]
    error: str | None
    record: dict[str, Any] = field(repr=False)


@dataclass(eq=False)
class TracedCollective:
    """One collective call, on every rank that recorded it (same ``(context, seq)``)."""

    context: int
    seq: int
    call: str
    comm: str
    algorithm: str
    root: int | None
    size: int | None
    spans: dict[int, CollectiveSpan] = field(default_factory=dict)
    messages: list[TracedMessage] = field(default_factory=list)

    @property
    def key(self) -> tuple[int, int]:
        return (self.context, self.seq)

    @property
    def t0(self) -> float:
        times = [s.t0 for s in self.spans.values()] + [m.t_send for m in self.messages]
        return min(times)

    @property
    def t1(self) -> float:
        times = [s.t1 for s in self.spans.values()]
        times += [m.t_recv if m.t_recv is not None else m.t_send for m in self.messages]
        return max(times)

    @property
    def duration(self) -> float:
        return self.t1 - self.t0

    @property
    def n_rounds(self) -> int:
        """The most rounds any rank ran."""
        counts = [len(s.rounds) for s in self.spans.values()]
        counts += [m.round for m in self.messages if m.round is not None]
        return max(counts, default=0)

    @property
    def errors(self) -> dict[int, str]:
        return {rank: span.error for rank, span in self.spans.items() if span.error}

    def steps(self) -> list[list[TracedMessage]]:
        """The messages grouped by causal step (``steps()[k - 1]`` holds step k)."""
        count = max((m.step or 0 for m in self.messages), default=0)
        grouped: list[list[TracedMessage]] = [[] for _ in range(count)]
        for message in sorted(self.messages, key=lambda m: (m.src, m.t_send, m.dst)):
            grouped[(message.step or 1) - 1].append(message)
        return grouped

    def rounds_aligned(self) -> bool:
        """Whether every message goes out and arrives in the round numbered as its step."""
        return all(m.round == m.step and m.recv_round in (None, m.step) for m in self.messages)

    def round_labels(self, messages: Sequence[TracedMessage]) -> list[str]:
        """The distinct labels of the senders' rounds of ``messages``, in order."""
        labels: list[str] = []
        for message in messages:
            span = self.spans.get(message.src)
            if span is None or message.round is None:
                continue
            for rnd in span.rounds:
                if rnd.index == message.round and rnd.label and rnd.label not in labels:
                    labels.append(rnd.label)
        return labels


def assign_steps(messages: Sequence[TracedMessage]) -> None:
    """Set each message's causal ``step`` (the messages of one collective).

    A message's step is 1 + the largest step among the messages its sender
    received in strictly earlier rounds (1 if none): rounds need not line up
    between ranks, but a message can only go out once what it depends on arrived.
    """
    received: dict[int, list[TracedMessage]] = defaultdict(list)
    for message in messages:
        if message.recv_round is not None:
            received[message.dst].append(message)
    rounds_of: dict[int, list[int]] = {}
    for rank, inbox in received.items():
        # Only received messages are here: each has its round.
        inbox.sort(key=lambda m: cast(int, m.recv_round))
        rounds_of[rank] = [cast(int, m.recv_round) for m in inbox]

    def inputs(message: TracedMessage) -> list[TracedMessage]:
        """What the sender had received before the round it sent ``message`` in."""
        if message.round is None or message.src not in received:
            return []
        return received[message.src][: bisect.bisect_left(rounds_of[message.src], message.round)]

    step: dict[int, int] = {}
    for first in messages:  # depth-first, without recursion (long rings have many rounds)
        if id(first) in step:
            continue
        stack = [(first, iter(inputs(first)))]
        open_ids = {id(first)}
        while stack:
            message, pending = stack[-1]
            for before in pending:
                # a message already open means inconsistent rounds (a cycle): it counts as 0
                if id(before) not in step and id(before) not in open_ids:
                    stack.append((before, iter(inputs(before))))
                    open_ids.add(id(before))
                    break
            else:
                stack.pop()
                open_ids.discard(id(message))
                step[id(message)] = 1 + max(
                    (step.get(id(m), 0) for m in inputs(message)), default=0
                )
    for message in messages:
        message.step = step[id(message)]


class TraceView(Protocol):
    """What the drawings read of a merged trace (:class:`~.trace.Trace` is one):
    the ranks, the paired messages, the collectives, the receives never matched,
    the file and one-sided operations, and the times (``relative`` turns a
    record's time into seconds since ``start``)."""

    ranks: list[int]
    messages: list[TracedMessage]
    collectives: list[TracedCollective]
    unmatched_receives: list[dict[str, Any]]
    truncated: bool
    file_ops: list[dict[str, Any]]
    start: float
    duration: float
    rma_ops: list[RmaOp]
    rma_syncs: list[RmaSync]
    epochs: list[RmaEpoch]

    @property
    def empty(self) -> bool: ...

    def relative(self, t: float) -> float: ...

    def summary(self) -> str: ...

    def file_lines(self) -> list[str]: ...
