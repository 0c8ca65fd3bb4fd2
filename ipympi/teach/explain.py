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

import html
import math
import pickle
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .trace import Trace, TracedCollective, TracedMessage
from .units import format_bytes, plural

__all__ = ["Explanation", "Frame", "describe_value"]

CELL_LIMIT = 72
SMALL_ARRAY = 12
STEP_COLOUR = "#1f77b4"
CHANGED_BACKGROUND = "#fff1a8"
_MONO = "ui-monospace, SFMono-Regular, Menlo, Consolas, monospace"


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
@dataclass
class Row:
    """One table row: a rank, its cells, and which cells changed (highlighted)."""

    label: str
    cells: list[str]
    changed: list[bool]


@dataclass
class Frame:
    """One view of the explanation: a title, message lines, a picture and a table."""

    title: str
    columns: list[str]
    rows: list[Row]
    messages: list[str] = field(default_factory=list)
    svg: str = ""


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


# -- the step picture --------------------------------------------------------------------
def _step_svg(ranks: Sequence[int], messages: Sequence[TracedMessage], payloads: list[str]) -> str:
    n = len(ranks)
    size = 200 if n <= 4 else 250 if n <= 8 else 310 if n <= 16 else 380
    node = 16.0 if n <= 8 else 13.0 if n <= 16 else 9.0
    font = 12 if n <= 8 else 10 if n <= 16 else 8
    centre, radius = size / 2, size / 2 - node - 14
    start = math.pi if n == 2 else -math.pi / 2
    where = {
        rank: (
            centre + radius * math.cos(start + 2 * math.pi * i / max(n, 1)),
            centre + radius * math.sin(start + 2 * math.pi * i / max(n, 1)),
        )
        for i, rank in enumerate(ranks)
    }
    active = {m.src for m in messages} | {m.dst for m in messages}
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{size}" height="{size}" '
        f'viewBox="0 0 {size} {size}" font-family="sans-serif" font-size="{font}">'
    ]
    for m, text in zip(messages, payloads):
        if m.src not in where or m.dst not in where:
            continue
        (x1, y1), (x2, y2) = where[m.src], where[m.dst]
        tip = html.escape(f"rank {m.src} → rank {m.dst}: {text}")
        dash = "" if m.matched else ' stroke-dasharray="4 3"'
        if m.src == m.dst:
            dx, dy = (x1 - centre) or 1.0, (y1 - centre)
            norm = math.hypot(dx, dy)
            ox, oy = dx / norm * node * 2.2, dy / norm * node * 2.2
            path = (
                f"M{x1 - oy * 0.4:.1f},{y1 + ox * 0.4:.1f} C{x1 + ox - oy:.1f},{y1 + oy + ox:.1f} "
                f"{x1 + ox + oy:.1f},{y1 + oy - ox:.1f} {x1 + oy * 0.4:.1f},{y1 - ox * 0.4:.1f}"
            )
            tip_from, tip_to = (x1 + ox + oy, y1 + oy - ox), (x1 + oy * 0.4, y1 - ox * 0.4)
        else:
            dist = math.hypot(x2 - x1, y2 - y1)
            ux, uy = (x2 - x1) / dist, (y2 - y1) / dist
            cx, cy = (x1 + x2) / 2 + uy * dist * 0.18, (y1 + y2) / 2 - ux * dist * 0.18
            sx, sy = _towards(x1, y1, cx, cy, node + 2)
            ex, ey = _towards(x2, y2, cx, cy, node + 3)
            path = f"M{sx:.1f},{sy:.1f} Q{cx:.1f},{cy:.1f} {ex:.1f},{ey:.1f}"
            tip_from, tip_to = (cx, cy), (ex, ey)
        parts.append(
            f'<g class="step-msg"><title>{tip}</title><path d="{path}" fill="none" '
            f'stroke="{STEP_COLOUR}" stroke-width="1.6"{dash}/>'
            f'<polygon points="{_head(*tip_from, *tip_to)}" fill="{STEP_COLOUR}"/></g>'
        )
    for rank, (x, y) in where.items():
        fill, stroke = ("#dcebf7", STEP_COLOUR) if rank in active else ("#f2f2f2", "#b5b5b5")
        parts.append(
            f'<g class="rank"><rect x="{x - node:.1f}" y="{y - node:.1f}" width="{2 * node:.1f}" '
            f'height="{2 * node:.1f}" rx="5" fill="{fill}" stroke="{stroke}"/>'
            f'<text x="{x:.1f}" y="{y + font * 0.35:.1f}" text-anchor="middle" fill="#222">'
            f"{rank}</text></g>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _towards(x: float, y: float, tx: float, ty: float, distance: float) -> tuple[float, float]:
    length = math.hypot(tx - x, ty - y) or 1.0
    return x + (tx - x) / length * distance, y + (ty - y) / length * distance


def _head(x1: float, y1: float, x2: float, y2: float, size: float = 7.0) -> str:
    angle = math.atan2(y2 - y1, x2 - x1)
    points = [(x2, y2)] + [
        (x2 - size * math.cos(angle + s * 0.42), y2 - size * math.sin(angle + s * 0.42))
        for s in (-1, 1)
    ]
    return " ".join(f"{x:.1f},{y:.1f}" for x, y in points)


# -- the explanation ---------------------------------------------------------------------
class Explanation:
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

    def to_text(self) -> str:
        lines = [self.header(), *self._notes()]
        for frame in self.frames:
            lines += ["", frame.title]
            lines += [f"  {text}" for text in frame.messages]
            lines += _text_table(frame)
        lines += ["", "(* changed)"]
        return "\n".join(lines)

    # -- HTML ----------------------------------------------------------------------------
    def _header_html(self) -> str:
        notes = "".join(
            f'<div style="color:#555;margin-top:2px">{html.escape(n)}</div>' for n in self._notes()
        )
        return (
            f'<div style="font-weight:600;font-size:1.05em">{html.escape(self.header())}</div>'
            f"{notes}"
        )

    def frame_html(self, index: int) -> str:
        """One frame as HTML (``index`` 0 is before the call, the last after it)."""
        frame = self.frames[index]
        head = "".join(
            f'<th style="text-align:left;padding:2px 10px;border-bottom:1px solid #ccc">'
            f"{html.escape(c)}</th>"
            for c in frame.columns
        )
        body = []
        for row in frame.rows:
            cells = [f'<td style="padding:2px 10px;color:#333">{html.escape(row.label)}</td>']
            for text, changed in zip(row.cells, row.changed):
                style = f"padding:2px 10px;font-family:{_MONO};white-space:pre"
                title = ""
                if changed:
                    style += f";background:{CHANGED_BACKGROUND};color:#222"
                    title = ' title="changed"'
                cells.append(f'<td style="{style}"{title}>{html.escape(text)}</td>')
            body.append(f"<tr>{''.join(cells)}</tr>")
        table = (
            f'<table style="border-collapse:collapse;margin-top:4px"><thead><tr>{head}</tr>'
            f"</thead><tbody>{''.join(body)}</tbody></table>"
        )
        messages = ""
        if frame.messages:
            items = "".join(
                f'<li style="font-family:{_MONO}">{html.escape(text)}</li>'
                for text in frame.messages
            )
            messages = f'<ul style="margin:4px 0;padding-left:18px">{items}</ul>'
        picture = f'<div style="flex:none">{frame.svg}</div>' if frame.svg else ""
        return (
            '<div class="ipympi-frame" style="border:1px solid #ddd;border-radius:6px;'
            'padding:8px 12px;margin:8px 0">'
            f'<div style="font-weight:600">{html.escape(frame.title)}</div>'
            '<div style="display:flex;flex-wrap:wrap;gap:16px;align-items:flex-start">'
            f"{picture}<div>{messages}{table}</div></div></div>"
        )

    def to_html(self) -> str:
        frames = "".join(self.frame_html(i) for i in range(len(self.frames)))
        return (
            '<div class="ipympi-explain" style="font-family:sans-serif;font-size:13px">'
            f"{self._header_html()}{frames}</div>"
        )

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        return {"text/html": self.to_html(), "text/plain": self.to_text()}

    def widget(self) -> Any:
        """A stepper (Play + slider over the frames), or None without ipywidgets."""
        try:
            import ipywidgets
        except ImportError:
            return None
        pages = [self.frame_html(i) for i in range(len(self.frames))]
        last = len(pages) - 1
        output = ipywidgets.HTML(value=pages[0])
        slider = ipywidgets.IntSlider(value=0, min=0, max=last, description="frame")
        play = ipywidgets.Play(value=0, min=0, max=last, step=1, interval=1800)
        ipywidgets.jslink((play, "value"), (slider, "value"))

        def show(change: Mapping[str, Any]) -> None:
            output.value = pages[int(change["new"])]

        slider.observe(show, names="value")
        header = ipywidgets.HTML(value=self._header_html())
        return ipywidgets.VBox([header, ipywidgets.HBox([play, slider]), output])


def _text_table(frame: Frame) -> list[str]:
    """The frame's table as aligned text; changed cells end with ``*``."""
    texts = [
        [row.label] + [c + (" *" if ch else "") for c, ch in zip(row.cells, row.changed)]
        for row in frame.rows
    ]
    widths = [max([len(c)] + [len(t[i]) for t in texts]) for i, c in enumerate(frame.columns)]
    lines = ["  " + " | ".join(c.ljust(w) for c, w in zip(frame.columns, widths)).rstrip()]
    lines += ["  " + " | ".join(t.ljust(w) for t, w in zip(row, widths)).rstrip() for row in texts]
    return lines


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
    svg = _step_svg(ranks, messages, payloads)
    return Frame(title, ["rank", "before", "after"], rows, lines, svg)
