"""One collective call explained step by step (``%mpi explain comm.Allreduce(a, b)``).

The call is run once on every rank with its messages recorded with payloads
and the algorithm's working state before and after each round
(:mod:`ipympi.teach.recording`). :class:`Explanation` turns those records into
*frames*: the user's buffers before the call, one frame per step — which rank
sends what to whom, a small picture of the step, and every rank's working
state before and after it — and the user's buffers after the call.

Rounds are per rank and need not line up between ranks (in a binomial
broadcast the root has one round, a leaf one, a middle rank two), so steps
come from causality: a message's step is one more than the latest step among
the messages its sender received in earlier rounds (see
:func:`ipympi.teach.trace.assign_steps`). A rank's state after step k is the
state after its latest round whose messages (and all its earlier rounds'
messages) belong to steps up to k.
"""

from __future__ import annotations

import pickle
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .frames import Frame, FrameView, Row, step_svg
from .trace import Trace, TracedCollective, TracedMessage
from .units import format_bytes, plural

__all__ = ["Explanation", "Frame", "FrameView", "describe_value"]

CELL_LIMIT = 72
SMALL_ARRAY = 12


class _NoState:
    """A rank that has no state to show (no rounds, or the algorithm exposes none)."""

    def __repr__(self) -> str:
        return "—"


NO_STATE = _NoState()


@dataclass
class _Opaque:
    """Bytes that are neither the call's datatype nor a pickle."""

    nbytes: int

    def __repr__(self) -> str:
        return f"{self.nbytes} bytes"


# -- values ------------------------------------------------------------------------------
def _decode(value: Any, dtype: np.dtype | None) -> Any:
    """Bytes as arrays of ``dtype`` when they fit, else as an unpickled object, else opaque."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        if dtype is not None and dtype.itemsize and len(raw) % dtype.itemsize == 0:
            return np.frombuffer(raw, dtype)
        if raw[:1] == b"\x80":  # a pickle (lower-case calls move pickles)
            try:
                return pickle.loads(raw)
            except Exception:
                pass
        return _Opaque(len(raw))
    if isinstance(value, (list, tuple)):
        return [_decode(item, dtype) for item in value]
    return value


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(limit - 1, 1)] + "…"


def _array_text(array: np.ndarray) -> str:
    if array.size <= SMALL_ARRAY:
        text = np.array2string(array, separator=" ", max_line_width=10_000, threshold=10_000)
        return re.sub(r"\s*\]", "]", re.sub(r"\[\s*", "[", re.sub(r"\s+", " ", text)))
    flat = array.ravel()
    head = " ".join(np.array2string(flat[:3], separator=" ")[1:-1].split())
    tail = " ".join(np.array2string(flat[-2:], separator=" ")[1:-1].split())
    shape = "x".join(str(n) for n in array.shape)
    return f"{array.dtype}[{shape}] [{head} … {tail}]"


def describe_value(value: Any, limit: int = CELL_LIMIT) -> str:
    """A compact one-line description of ``value`` (arrays in full when small)."""
    if isinstance(value, np.ndarray):
        text = _array_text(value)
    elif isinstance(value, (list, tuple)) and not (
        isinstance(value, tuple) and hasattr(value, "_fields")
    ):
        inner = ", ".join(describe_value(item, limit) for item in value[:8])
        if len(value) > 8:
            inner += f", … ({len(value)} items)"
        text = f"[{inner}]" if isinstance(value, list) else f"({inner})"
    elif isinstance(value, dict):
        text = "{" + ", ".join(f"{k!r}: {describe_value(v, limit)}" for k, v in value.items()) + "}"
    else:
        try:
            text = repr(value)
        except Exception as exc:
            text = f"<{type(value).__name__}: repr failed: {exc}>"
    return _shorten(text, limit)


def _same(a: Any, b: Any) -> bool:
    if a is b:
        return True
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
            return False
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        try:
            return bool(np.array_equal(a, b, equal_nan=True))
        except TypeError:
            return bool(np.array_equal(a, b))
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    try:
        return bool(a == b)
    except Exception:
        return describe_value(a, 10_000) == describe_value(b, 10_000)


# -- frames ------------------------------------------------------------------------------
def _call_name(call: str) -> str:
    found = re.search(r"([A-Za-z_]\w*)\s*\(", call)
    return found.group(1) if found else call.strip()


def _choose(trace: Trace, call: str) -> TracedCollective:
    recorded = [coll for coll in trace.collectives if coll.spans]
    if not recorded:
        raise ValueError(f"the records of {call!r} hold no collective call")
    name = _call_name(call)
    matching = [coll for coll in recorded if coll.call == name]
    if matching:
        return matching[0]
    if len(recorded) == 1:
        return recorded[0]
    calls = ", ".join(coll.call for coll in recorded)
    raise ValueError(f"the records hold several collectives ({calls}) and none is {name!r}")


def _round_depths(coll: TracedCollective) -> dict[int, list[int]]:
    """Per rank, per round: the latest step its rounds up to this one take part in."""
    depth_of: dict[tuple[int, int], int] = {}
    for m in coll.messages:
        step = m.step or 1
        if m.round is not None:
            depth_of[(m.src, m.round)] = max(depth_of.get((m.src, m.round), 0), step)
        if m.recv_round is not None:
            key = (m.dst, m.recv_round)
            depth_of[key] = max(depth_of.get(key, 0), step)
    depths = {}
    for rank, span in coll.spans.items():
        latest, per_round = 0, []
        for rnd in span.rounds:
            latest = max(latest, depth_of.get((rank, rnd.index), 0))
            per_round.append(latest)
        depths[rank] = per_round
    return depths


def _state_after(coll: TracedCollective, depths: dict[int, list[int]], rank: int, k: int) -> Any:
    """The working state of ``rank`` once step ``k`` is done (k = 0: before the first step)."""
    span = coll.spans.get(rank)
    if span is None or not span.rounds:
        return NO_STATE
    done = [i for i, depth in enumerate(depths[rank]) if depth <= k]
    if done:
        record = span.rounds[done[-1]].record
        return record.get("after", NO_STATE)
    return span.rounds[0].record.get("before", NO_STATE)


def _payload(message: TracedMessage) -> Any:
    for record in (message.send_record, message.recv_record):
        if record is not None and "data" in record:
            return record["data"]
    return None


def _state_cell(value: Any, dtype: np.dtype | None) -> tuple[str, Any]:
    if value is NO_STATE or value is None:
        return "—", NO_STATE
    decoded = _decode(value, dtype)
    return describe_value(decoded), decoded


def _buffer_table(
    ranks: Sequence[int], buffers: Mapping[int, Any], compare: Mapping[int, Any] | None
) -> tuple[list[str], list[Row]]:
    """A table of the user's buffers per rank (columns by argument when they are labelled)."""
    labelled = bool(buffers) and all(isinstance(v, Mapping) for v in buffers.values())
    if labelled:
        keys: list[str] = []
        for value in buffers.values():
            keys += [str(k) for k in value if str(k) not in keys]
    else:
        keys = ["value"]
    rows = []
    for rank in ranks:
        value = buffers.get(rank, NO_STATE)
        cells, changed = [], []
        for key in keys:
            item = value.get(key, NO_STATE) if labelled else value
            old: Any = NO_STATE
            if compare is not None:
                previous = compare.get(rank, NO_STATE)
                old = previous.get(key, NO_STATE) if isinstance(previous, Mapping) else previous
            cells.append("—" if item is NO_STATE else describe_value(item))
            changed.append(compare is not None and item is not NO_STATE and not _same(old, item))
        rows.append(Row(f"rank {rank}", cells, changed))
    return ["rank", *keys], rows


# -- the explanation ---------------------------------------------------------------------
class Explanation(FrameView):
    """A collective call step by step (see the module docstring)."""

    def __init__(
        self,
        call: str,
        collective: TracedCollective,
        ranks: list[int],
        steps: list[list[TracedMessage]],
        frames: list[Frame],
    ) -> None:
        self.call = call
        self.collective = collective
        self.algorithm = collective.algorithm
        self.comm = collective.comm
        self.ranks = ranks
        self.size = collective.size or len(ranks)
        self.steps = steps
        self.frames = frames

    @classmethod
    def from_ranks(
        cls,
        call: str,
        records: Mapping[int, Sequence[Mapping[str, Any]]],
        dtype: str | None,
        before: Mapping[int, Any],
        after: Mapping[int, Any],
    ) -> Explanation:
        """Explain ``call`` from its records (rank → records with payloads) and user buffers."""
        if not isinstance(call, str) or not call.strip():
            raise ValueError("call: the text of the collective call, e.g. 'comm.Allreduce(a, b)'")
        try:
            numpy_dtype: np.dtype | None = None if dtype is None else np.dtype(dtype)
        except TypeError as exc:
            raise ValueError(f"dtype {dtype!r} is not a numpy dtype: {exc}") from None
        for name, buffers in (("before", before), ("after", after)):
            if not isinstance(buffers, Mapping):
                raise ValueError(f"{name}: a mapping of rank to that rank's buffers")
        coll = _choose(Trace.from_ranks(records), call)
        ranks = sorted(
            set(coll.spans) | {m.src for m in coll.messages} | {m.dst for m in coll.messages}
        )
        steps = coll.steps()
        depths = _round_depths(coll)
        columns, rows = _buffer_table(ranks, before, None)
        frames = [Frame("Before the call: each rank's buffers", columns, rows)]
        for k, messages in enumerate(steps, start=1):
            frames.append(_step_frame(coll, ranks, depths, k, len(steps), messages, numpy_dtype))
        columns, rows = _buffer_table(ranks, after, before)
        frames.append(Frame("After the call: each rank's buffers", columns, rows))
        return cls(call.strip(), coll, ranks, steps, frames)

    # -- text ----------------------------------------------------------------------------
    def header(self) -> str:
        n_steps = len(self.steps)
        where = f" on {self.comm}" if self.comm != "MPI_COMM_WORLD" else ""
        root = f", root {self.collective.root}" if self.collective.root is not None else ""
        return (
            f"{self.call} — algorithm {self.algorithm}{where}{root}, "
            f"{plural(self.size, 'rank')}, {plural(n_steps, 'step')}"
        )

    def _notes(self) -> list[str]:
        notes = []
        if not self.collective.rounds_aligned():
            notes.append(
                "The ranks' rounds do not line up, so messages are grouped by causality: "
                "a message is in step k when the last data its sender waited for arrived in "
                "step k-1."
            )
        errors = self.collective.errors
        notes += [f"rank {rank} failed: {error}" for rank, error in sorted(errors.items())]
        return notes

    def __repr__(self) -> str:
        return f"<Explanation: {self.header()}>"


def _step_frame(
    coll: TracedCollective,
    ranks: list[int],
    depths: dict[int, list[int]],
    k: int,
    n_steps: int,
    messages: list[TracedMessage],
    dtype: np.dtype | None,
) -> Frame:
    payloads = []
    lines = []
    for m in messages:
        data = _payload(m)
        text = format_bytes(m.nbytes) if data is None else describe_value(_decode(data, dtype))
        payloads.append(text)
        note = "" if m.matched else " (receive not traced)"
        lines.append(f"rank {m.src} → rank {m.dst}: {text}{note}")
    labels = coll.round_labels(messages)
    title = f"Step {k} of {n_steps}" + (f" — {'; '.join(labels)}" if labels else "")
    rows = []
    for rank in ranks:
        old_text, old = _state_cell(_state_after(coll, depths, rank, k - 1), dtype)
        new_text, new = _state_cell(_state_after(coll, depths, rank, k), dtype)
        changed = new is not NO_STATE and not _same(old, new)
        span = coll.spans.get(rank)
        label = f"rank {rank}"
        if span is not None and span.crank is not None and span.crank != rank:
            label += f" ({span.crank} in {coll.comm})"
        rows.append(Row(label, [old_text, new_text], [False, changed]))
    svg = step_svg(ranks, messages, payloads)
    return Frame(title, ["rank", "before", "after"], rows, lines, svg)
