"""Drawing a :class:`~.trace.Trace` (what :class:`~.traced.TraceView` says of it): a
space-time diagram in SVG, and a text rendering.

SVG (shown inline under a ``%%px --trace`` cell): one lane per rank, time to
the right on a :class:`~.timescale.TimeScale` (long idle gaps drawn as axis
breaks), each message an arrow from its send on the sender's lane to its
receive on the receiver's lane, each collective a translucent span on every
rank's lane with its rounds marked and numbered, arrows coloured by
collective call. One-sided communication: each window synchronisation call
(``Fence``, ``Lock``, ...) a grey span, each epoch a band under its rank's lane
from its opening call to its closing one, each operation an arrow the way its
data goes (``Put``/``Accumulate`` origin to target, ``Get`` target to origin,
both heads for the fetching atomics) labelled with its call and size. Every
arrow and span has a ``<title>`` tooltip with the details. The SVG is plain
markup, one element group per message or span, so it stays small and needs
nothing but a browser.

The text rendering (for terminals) is in :mod:`.textchart`.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING
from xml.sax.saxutils import escape

from .textchart import render_text
from .timescale import TimeScale, event_times
from .units import format_bytes, format_time

if TYPE_CHECKING:
    from .rma import RmaEpoch, RmaOp, RmaSync
    from .traced import TracedCollective, TracedMessage, TraceView

__all__ = ["render_svg", "render_text"]

PALETTE = (
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#9467bd",
    "#ff7f0e",
    "#17becf",
    "#8c564b",
    "#e377c2",
    "#bcbd22",
)
P2P_COLOUR = "#555555"
RMA_COLOURS = {"put": "#7b3294", "get": "#008837", "accumulate": "#c51b7d"}
RMA_NAMES = {"put": "Put", "get": "Get", "accumulate": "accumulate / atomic"}
SYNC_COLOUR = "#4d4d4d"
EPOCH_COLOUR = "#8c8cc8"
MAX_RMA_LABELS = 60  # beyond this many operations their arrows carry no text
# Beyond these the SVG would be too heavy for a notebook (each is a few hundred bytes).
MAX_ARROWS = 2000
MAX_SPANS = 1000
FONT = "system-ui, -apple-system, 'Segoe UI', Helvetica, Arial, sans-serif"
HALO = 'stroke="#ffffff" stroke-width="3" stroke-opacity="0.85" paint-order="stroke"'
_INVALID_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\ud800-\udfff\ufffe\uffff]")


# -- shared helpers ----------------------------------------------------------------------
def _esc(text: object) -> str:
    """``text`` safe inside XML text and attribute values (control characters replaced)."""
    return escape(_INVALID_XML.sub("\N{REPLACEMENT CHARACTER}", str(text)), {'"': "&quot;"})


def _num(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def _colours(trace: TraceView) -> dict[str, str]:
    colours: dict[str, str] = {}
    for coll in trace.collectives:
        if coll.call not in colours:
            colours[coll.call] = PALETTE[len(colours) % len(PALETTE)]
    return colours


def _collective_of(trace: TraceView) -> dict[tuple[int, int], TracedCollective]:
    return {coll.key: coll for coll in trace.collectives}


def _round_label(coll: TracedCollective | None, message: TracedMessage) -> str:
    if coll is None or message.round is None:
        return ""
    labels = coll.round_labels([message])
    text = f"round {message.round}"
    return f"{text}: {labels[0]}" if labels else text


def _message_tooltip(
    trace: TraceView, message: TracedMessage, coll: TracedCollective | None
) -> str:
    lines = [
        f"{message.call} rank {message.src} → rank {message.dst}",
        f"{message.comm}, tag {message.tag}, {format_bytes(message.nbytes)}",
    ]
    if coll is not None:
        lines.append(_round_label(coll, message) or f"{coll.call} message")
    lines.append(f"sent at {format_time(trace.relative(message.t_send))}")
    if message.t_recv is None:
        lines.append("receive not traced")
    else:
        lines.append(
            f"received at {format_time(trace.relative(message.t_recv))} by {message.recv_call}"
        )
    return "\n".join(lines)


def _span_tooltip(trace: TraceView, coll: TracedCollective, rank: int) -> str:
    span = coll.spans[rank]
    head = f"{coll.call} on {coll.comm}"
    if coll.root is not None:
        head += f", root {coll.root}"
    lines = [
        head,
        f"algorithm: {coll.algorithm}",
        f"rank {rank}" + (f" (rank {span.crank} in {coll.comm})" if span.crank != rank else ""),
        f"from {format_time(trace.relative(span.t0))} to {format_time(trace.relative(span.t1))}"
        f" ({format_time(span.t1 - span.t0)})",
    ]
    for rnd in span.rounds:
        moves = [f"to {p} {format_bytes(n)}" for p, n in rnd.sends]
        moves += [f"from {p} {format_bytes(n)}" for p, n in rnd.recvs]
        text = f"round {rnd.index}: {rnd.label}" if rnd.label else f"round {rnd.index}"
        lines.append(f"{text} ({', '.join(moves)})" if moves else text)
    if span.error:
        lines.append(f"error: {span.error}")
    return "\n".join(lines)


# -- SVG ---------------------------------------------------------------------------------
def _lane_metrics(n: int) -> tuple[float, float]:
    """(lane height, font size) for ``n`` ranks."""
    if n <= 4:
        return 46.0, 13.0
    if n <= 8:
        return 34.0, 12.0
    if n <= 16:
        return 24.0, 11.0
    lane = max(8.0, 384.0 / n)
    return lane, max(7.0, min(10.0, lane - 2))


def _text_width(text: str, font: float) -> float:
    return 0.6 * font * len(text)


def _arrow_head(x1: float, y1: float, x2: float, y2: float, size: float) -> str:
    angle = math.atan2(y2 - y1, x2 - x1)
    left = (x2 - size * math.cos(angle - 0.4), y2 - size * math.sin(angle - 0.4))
    right = (x2 - size * math.cos(angle + 0.4), y2 - size * math.sin(angle + 0.4))
    return " ".join(f"{_num(x)},{_num(y)}" for x, y in ((x2, y2), left, right))


def _empty_svg(trace: TraceView, width: int) -> str:
    text = "no messages" + (" (trace truncated)" if trace.truncated else "")
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="36" '
        f'viewBox="0 0 {width} 36" font-family="{FONT}" font-size="13">'
        f'<text x="8" y="22" fill="#666">Trace: {_esc(text)}</text></svg>'
    )


class _SvgLayout:
    """Positions of the diagram's parts for one trace and width."""

    def __init__(self, trace: TraceView, width: int) -> None:
        self.n = len(trace.ranks)
        self.lane_h, self.font = _lane_metrics(self.n)
        self.ui_font = max(self.font, 12.0)  # axis, legend and names above the lanes
        label_w = _text_width(f"rank {max(trace.ranks, default=0)}", self.font)
        self.left = label_w + 16
        self.width = width
        self.right = width - 16
        self.title_y = 18.0
        self.header_top = 28.0
        self.lanes_top = self.header_top + 20
        self.lanes_bottom = self.lanes_top + self.n * self.lane_h
        self.lane_of = {rank: i for i, rank in enumerate(trace.ranks)}
        self.scale = TimeScale(
            event_times(trace),
            trace.duration,
            self.left,
            max(self.right - self.left, 50),
            break_width=26,
            min_live=12,
        )

    def y(self, rank: int) -> float:
        return self.lanes_top + (self.lane_of[rank] + 0.5) * self.lane_h

    def x(self, trace: TraceView, t: float) -> float:
        return self.scale.x(t - trace.start)


def _svg_lanes(lay: _SvgLayout, trace: TraceView, out: list[str]) -> None:
    label_every = max(1, math.ceil(lay.font / lay.lane_h))
    for rank, i in lay.lane_of.items():
        top = lay.lanes_top + i * lay.lane_h
        if i % 2 == 0:
            out.append(
                f'<rect x="{_num(lay.left)}" y="{_num(top)}" width="{_num(lay.right - lay.left)}" '
                f'height="{_num(lay.lane_h)}" fill="#f6f7f9"/>'
            )
        y = lay.y(rank)
        out.append(
            f'<line x1="{_num(lay.left)}" y1="{_num(y)}" x2="{_num(lay.right)}" y2="{_num(y)}" '
            f'stroke="#c8cdd3" stroke-width="1"/>'
        )
        if i % label_every == 0:
            out.append(
                f'<text x="{_num(lay.left - 8)}" y="{_num(y + lay.font * 0.35)}" '
                f'text-anchor="end" fill="#333">rank {rank}</text>'
            )


def _svg_breaks(lay: _SvgLayout, out: list[str]) -> None:
    for seg in lay.scale.breaks:
        x0, x1 = seg.x0 + 3, seg.x1 - 3
        mid = (seg.x0 + seg.x1) / 2
        skipped = format_time(seg.t1 - seg.t0)
        out.append(
            f'<g class="break"><title>idle for {_esc(skipped)} (compressed, not to scale)</title>'
            f'<rect x="{_num(x0)}" y="{_num(lay.lanes_top)}" width="{_num(max(x1 - x0, 1))}" '
            f'height="{_num(lay.lanes_bottom - lay.lanes_top)}" fill="#ffffff" '
            f'stroke="#b0b6bd" stroke-dasharray="3 3"/>'
        )
        axis = lay.lanes_bottom
        for dx in (-3, 3):
            out.append(
                f'<line x1="{_num(mid + dx - 3)}" y1="{_num(axis + 5)}" x2="{_num(mid + dx + 3)}" '
                f'y2="{_num(axis - 5)}" stroke="#555" stroke-width="1.2"/>'
            )
        out.append(
            f'<text x="{_num(mid)}" y="{_num(axis + 30)}" text-anchor="middle" '
            f'font-size="{_num(lay.ui_font - 2)}" fill="#888">≈{_esc(skipped)}</text></g>'
        )


def _svg_axis(lay: _SvgLayout, out: list[str]) -> None:
    axis = lay.lanes_bottom
    for seg in lay.scale.segments:
        if not seg.idle:
            out.append(
                f'<line x1="{_num(seg.x0)}" y1="{_num(axis)}" x2="{_num(max(seg.x1, seg.x0 + 1))}" '
                f'y2="{_num(axis)}" stroke="#555" stroke-width="1"/>'
            )
    size = lay.ui_font - 1
    for tick in lay.scale.ticks(spacing=_text_width("+88.8 µs", size) + 14):
        half = _text_width(tick.label, size) / 2
        anchor = "end" if tick.x + half > lay.width - 2 else "middle"
        out.append(
            f'<line x1="{_num(tick.x)}" y1="{_num(axis)}" x2="{_num(tick.x)}" '
            f'y2="{_num(axis + 4)}" stroke="#555"/>'
            f'<text x="{_num(tick.x)}" y="{_num(axis + 16)}" text-anchor="{anchor}" '
            f'font-size="{_num(size)}" fill="#444">{_esc(tick.label)}</text>'
        )


def _svg_collective(
    lay: _SvgLayout, trace: TraceView, coll: TracedCollective, colour: str, out: list[str]
) -> None:
    height = lay.lane_h * 0.64
    for rank, span in sorted(coll.spans.items()):
        x0, x1 = lay.x(trace, span.t0), lay.x(trace, span.t1)
        x1 = max(x1, x0 + 2)
        top = lay.y(rank) - height / 2
        parts = [
            f'<g class="span" data-rank="{rank}"><title>{_esc(_span_tooltip(trace, coll, rank))}'
            f"</title>",
            f'<rect x="{_num(x0)}" y="{_num(top)}" width="{_num(x1 - x0)}" height="{_num(height)}" '
            f'rx="3" fill="{colour}" fill-opacity="0.16" stroke="{colour}" stroke-opacity="0.7"'
            + (' stroke-dasharray="4 2"' if span.error else "")
            + "/>",
        ]
        small = max(lay.font - 3, 6)
        label = coll.call
        label_end = x0 + 3 + _text_width(label, lay.font - 1)
        label_fits = label_end + 3 <= x1
        two_rows = height >= small + lay.font + 2
        number_y = top + small if two_rows else top + height / 2 + small * 0.35
        for rnd in span.rounds:
            if rnd.t0 is None:
                continue
            r0 = lay.x(trace, rnd.t0)
            if rnd.index > 1 or r0 > x0 + 1:
                parts.append(
                    f'<line x1="{_num(r0)}" y1="{_num(top)}" x2="{_num(r0)}" '
                    f'y2="{_num(top + height)}" stroke="{colour}" stroke-opacity="0.8"/>'
                )
            r1 = lay.x(trace, rnd.t1) if rnd.t1 is not None else r0
            half = small * 0.35 * len(str(rnd.index))
            centre = (r0 + r1) / 2
            if r1 - r0 < 2 * half + 2:
                continue
            if not two_rows and label_fits and centre - half < label_end + 2:
                continue  # one row: the name comes first
            parts.append(
                f'<text x="{_num(centre)}" y="{_num(number_y)}" text-anchor="middle" '
                f'font-size="{_num(small)}" fill="{colour}" {HALO}>{rnd.index}</text>'
            )
        if label_fits:
            label_y = top + height - 3 if two_rows else top + height / 2 + lay.font * 0.35
            parts.append(
                f'<text x="{_num(x0 + 3)}" y="{_num(label_y)}" '
                f'font-size="{_num(lay.font - 1)}" fill="{colour}" {HALO}>{_esc(label)}</text>'
            )
        parts.append("</g>")
        out.append("".join(parts))


def _svg_header(lay: _SvgLayout, trace: TraceView, colours: dict[str, str], out: list[str]) -> None:
    """Each collective named once above the lanes, over the time it took on all ranks."""
    last_end = -math.inf
    base = lay.header_top + 12
    for coll in trace.collectives:
        x0, x1 = lay.x(trace, coll.t0), lay.x(trace, coll.t1)
        colour = colours.get(coll.call, P2P_COLOUR)
        out.append(
            f'<path class="coll-bracket" d="M{_num(x0)},{_num(base + 5)} v-3 '
            f'H{_num(max(x1, x0 + 1))} v3" fill="none" stroke="{colour}"/>'
        )
        label = coll.call
        width = _text_width(label, lay.ui_font - 1)
        centre = (x0 + x1) / 2
        if centre - width / 2 > last_end + 4:
            out.append(
                f'<text class="coll-label" x="{_num(centre)}" y="{_num(base)}" '
                f'text-anchor="middle" font-size="{_num(lay.ui_font - 1)}" fill="{colour}" {HALO}>'
                f"{_esc(label)}</text>"
            )
            last_end = centre + width / 2


def _svg_message(
    lay: _SvgLayout,
    trace: TraceView,
    message: TracedMessage,
    coll: TracedCollective | None,
    colours: dict[str, str],
    out: list[str],
) -> None:
    colour = P2P_COLOUR if coll is None else colours.get(coll.call, P2P_COLOUR)
    tooltip = _esc(_message_tooltip(trace, message, coll))
    xs, ys = lay.x(trace, message.t_send), lay.y(message.src)
    dash = ""
    if message.t_recv is None:  # a dangling arrow: the receive was not traced
        direction = 1 if lay.y(message.dst) >= ys else -1
        if message.dst == message.src:
            direction = -1
        xe, ye = xs + 14, ys + direction * lay.lane_h * 0.5
        dash = ' stroke-dasharray="3 2"'
        body = f'<line x1="{_num(xs)}" y1="{_num(ys)}" x2="{_num(xe)}" y2="{_num(ye)}"'
        head_from = (xs, ys)
    elif message.dst == message.src:  # to itself: a loop above the lane
        xe, ye = lay.x(trace, message.t_recv), ys
        xe = max(xe, xs + 8)
        cx, cy = (xs + xe) / 2, ys - lay.lane_h * 0.7
        curve = f"M{_num(xs)},{_num(ys)} Q{_num(cx)},{_num(cy)} {_num(xe)},{_num(ye)}"
        body = f'<path d="{curve}" fill="none"'
        head_from = (cx, cy)
    else:
        xe, ye = lay.x(trace, message.t_recv), lay.y(message.dst)
        body = f'<line x1="{_num(xs)}" y1="{_num(ys)}" x2="{_num(xe)}" y2="{_num(ye)}"'
        head_from = (xs, ys)
    head = _arrow_head(head_from[0], head_from[1], xe, ye, max(4.0, lay.font * 0.5))
    state = "" if message.matched else " unmatched"
    out.append(
        f'<g class="msg{state}" data-src="{message.src}" data-dst="{message.dst}">'
        f'<title>{tooltip}</title>{body} stroke="{colour}" stroke-width="1.4"{dash}/>'
        f'<polygon points="{head}" fill="{colour}"/></g>'
    )


def _svg_orphan(lay: _SvgLayout, trace: TraceView, record: dict, out: list[str]) -> None:
    """A receive whose send was not traced: a short arrow coming into the lane."""
    rank, peer = int(record["rank"]), int(record["peer"])
    xe, ye = lay.x(trace, float(record["t"])), lay.y(rank)
    direction = 1 if lay.y(peer) >= ye else -1
    xs, ys = xe - 14, ye + direction * lay.lane_h * 0.5
    tooltip = (
        f"{record['call']} rank {rank} ← rank {peer}\n{record.get('comm', '?')}, tag "
        f"{record['tag']}, {format_bytes(int(record['bytes']))}\n"
        f"received at {format_time(trace.relative(float(record['t'])))}; send not traced"
    )
    out.append(
        f'<g class="orphan"><title>{_esc(tooltip)}</title>'
        f'<line x1="{_num(xs)}" y1="{_num(ys)}" x2="{_num(xe)}" y2="{_num(ye)}" '
        f'stroke="{P2P_COLOUR}" stroke-width="1.4" stroke-dasharray="3 2"/>'
        f'<polygon points="{_arrow_head(xs, ys, xe, ye, max(4.0, lay.font * 0.5))}" '
        f'fill="{P2P_COLOUR}"/></g>'
    )


def _svg_sync(lay: _SvgLayout, trace: TraceView, sync: RmaSync, out: list[str]) -> None:
    """A window's synchronisation call: a grey span on its rank's lane."""
    x0 = lay.x(trace, sync.t0)
    x1 = max(lay.x(trace, sync.t1), x0 + 2)
    height = lay.lane_h * 0.5
    top = lay.y(sync.rank) - height / 2
    tooltip = (
        f"{sync.label} on {sync.window}, rank {sync.rank}\n"
        f"from {format_time(trace.relative(sync.t0))} to {format_time(trace.relative(sync.t1))}"
        f" ({format_time(sync.t1 - sync.t0)})"
    )
    label = ""
    size = lay.font - 2
    if x0 + 3 + _text_width(sync.label, size) + 3 <= x1:
        label = (
            f'<text x="{_num(x0 + 3)}" y="{_num(top + height / 2 + size * 0.35)}" '
            f'font-size="{_num(size)}" fill="{SYNC_COLOUR}" {HALO}>{_esc(sync.label)}</text>'
        )
    out.append(
        f'<g class="rma-sync" data-rank="{sync.rank}" data-call="{_esc(sync.call)}">'
        f"<title>{_esc(tooltip)}</title>"
        f'<rect x="{_num(x0)}" y="{_num(top)}" width="{_num(x1 - x0)}" height="{_num(height)}" '
        f'rx="2" fill="{SYNC_COLOUR}" fill-opacity="0.18" stroke="{SYNC_COLOUR}"/>{label}</g>'
    )


def _svg_epoch(lay: _SvgLayout, trace: TraceView, epoch: RmaEpoch, out: list[str]) -> None:
    """An epoch: a band under its rank's lane, from its opening call to its closing one."""
    t1 = epoch.t1 if epoch.t1 is not None else trace.start + trace.duration
    x0 = lay.x(trace, epoch.t0)
    x1 = max(lay.x(trace, t1), x0 + 2)
    top = lay.y(epoch.rank) + lay.lane_h * 0.3
    height = max(lay.lane_h * 0.12, 2.0)
    ops = epoch.ops if epoch.access else epoch.incoming
    lines = [f"rank {epoch.rank}, {epoch.summary()}", f"window: {epoch.window}"]
    lines += [op.describe() for op in ops[:20]]
    if len(ops) > 20:
        lines.append(f"… {len(ops) - 20} more")
    open_end = epoch.opened is None or epoch.closed is None
    size = max(lay.font - 4, 6)
    label = ""
    if x0 + 2 + _text_width(epoch.label, size) <= x1 and lay.lane_h >= 30:
        label = (
            f'<text x="{_num(x0 + 2)}" y="{_num(top + height + size)}" font-size="{_num(size)}" '
            f'fill="{EPOCH_COLOUR}">{_esc(epoch.label)}</text>'
        )
    out.append(
        f'<g class="epoch" data-rank="{epoch.rank}" data-kind="{epoch.kind}">'
        f"<title>{_esc(chr(10).join(lines))}</title>"
        f'<rect x="{_num(x0)}" y="{_num(top)}" width="{_num(x1 - x0)}" height="{_num(height)}" '
        f'fill="{EPOCH_COLOUR}" fill-opacity="0.55"'
        + (f' stroke="{EPOCH_COLOUR}" stroke-dasharray="3 2"' if open_end else "")
        + f"/>{label}</g>"
    )


def _svg_rma(lay: _SvgLayout, trace: TraceView, op: RmaOp, labelled: bool, out: list[str]) -> None:
    """A one-sided operation: an arrow from where its data is to where it goes."""
    colour = RMA_COLOURS[op.kind]
    xs, xe = lay.x(trace, op.t0), max(lay.x(trace, op.t1), lay.x(trace, op.t0) + 1)
    ys, ye = lay.y(op.src), lay.y(op.dst)
    size = max(4.0, lay.font * 0.5)
    if op.src == op.dst:  # its own window: a loop above the lane
        xe = max(xe, xs + 8)
        cx, cy = (xs + xe) / 2, ys - lay.lane_h * 0.7
        body = f'<path d="M{_num(xs)},{_num(ys)} Q{_num(cx)},{_num(cy)} {_num(xe)},{_num(ye)}" '
        heads = [_arrow_head(cx, cy, xe, ye, size)]
        mid = (cx, ys - lay.lane_h * 0.4)
    else:
        body = f'<line x1="{_num(xs)}" y1="{_num(ys)}" x2="{_num(xe)}" y2="{_num(ye)}" '
        heads = [_arrow_head(xs, ys, xe, ye, size)]
        if op.way == "both":
            heads.append(_arrow_head(xe, ye, xs, ys, size))
        mid = ((xs + xe) / 2, (ys + ye) / 2)
    text = f"{op.label} {format_bytes(op.nbytes)}"
    epoch = op.epoch.label if op.epoch is not None else "no epoch traced"
    tooltip = (
        f"{op.describe()}\n{op.window}, {epoch} of rank {op.origin}\n"
        f"from {format_time(trace.relative(op.t0))} to {format_time(trace.relative(op.t1))}"
    )
    label = ""
    if labelled:
        small = max(lay.font - 3, 6)
        label = (
            f'<text x="{_num(mid[0] + 3)}" y="{_num(mid[1] + small * 0.35)}" '
            f'font-size="{_num(small)}" fill="{colour}" {HALO}>{_esc(text)}</text>'
        )
    polygons = "".join(f'<polygon points="{head}" fill="{colour}"/>' for head in heads)
    out.append(
        f'<g class="rma" data-origin="{op.origin}" data-target="{op.target}" '
        f'data-call="{_esc(op.call)}"><title>{_esc(tooltip)}</title>'
        f'{body}fill="none" stroke="{colour}" stroke-width="1.6"/>{polygons}{label}</g>'
    )


def _svg_legend(
    lay: _SvgLayout, trace: TraceView, colours: dict[str, str], top: float, width: int
) -> tuple[list[str], float]:
    entries = [(call, colour, False) for call, colour in colours.items()]
    if any(m.coll is None for m in trace.messages):
        entries.append(("point-to-point", P2P_COLOUR, False))
    if any(not m.matched for m in trace.messages):
        entries.append(("receive not traced", P2P_COLOUR, True))
    if trace.unmatched_receives:
        entries.append(("send not traced", P2P_COLOUR, True))
    kinds = {op.kind for op in trace.rma_ops}
    entries += [(RMA_NAMES[k], RMA_COLOURS[k], False) for k in RMA_COLOURS if k in kinds]
    if trace.epochs:
        entries.append(("epoch (one-sided)", EPOCH_COLOUR, False))
    if lay.scale.breaks:
        entries.append(("≈ idle time, compressed", "#b0b6bd", True))
    out: list[str] = []
    x, y = lay.left, top + 12
    size = lay.ui_font - 1
    for text, colour, dashed in entries:
        item_w = 26 + _text_width(text, size) + 16
        if x + item_w > width - 8 and x > lay.left:
            x, y = lay.left, y + size + 8
        dash = ' stroke-dasharray="3 2"' if dashed else ""
        out.append(
            f'<g class="legend-item"><line x1="{_num(x)}" y1="{_num(y - size * 0.35)}" '
            f'x2="{_num(x + 20)}" y2="{_num(y - size * 0.35)}" stroke="{colour}" '
            f'stroke-width="2.5"{dash}/><text x="{_num(x + 26)}" y="{_num(y)}" '
            f'font-size="{_num(size)}" fill="#333">{_esc(text)}</text></g>'
        )
        x += item_w
    return out, (y + 8 if entries else top)


def render_svg(trace: TraceView, width: int = 900) -> str:
    """The space-time diagram of ``trace`` as an SVG document (a string)."""
    if not isinstance(width, int) or width < 200:
        raise ValueError(f"width must be an int of at least 200 pixels, not {width!r}")
    if trace.empty:
        return _empty_svg(trace, width)
    lay = _SvgLayout(trace, width)
    colours = _colours(trace)
    body: list[str] = []
    _svg_lanes(lay, trace, body)
    _svg_breaks(lay, body)
    _svg_header(lay, trace, colours, body)
    spans = 0
    for coll in trace.collectives:
        if spans + len(coll.spans) > MAX_SPANS:
            break
        spans += len(coll.spans)
        _svg_collective(lay, trace, coll, colours.get(coll.call, P2P_COLOUR), body)
    for epoch in trace.epochs[:MAX_SPANS]:
        _svg_epoch(lay, trace, epoch, body)
    for sync in trace.rma_syncs[:MAX_SPANS]:
        _svg_sync(lay, trace, sync, body)
    labelled = len(trace.rma_ops) <= MAX_RMA_LABELS
    for op in trace.rma_ops[:MAX_ARROWS]:
        _svg_rma(lay, trace, op, labelled, body)
    drawn = trace.messages[:MAX_ARROWS]
    collective_of = _collective_of(trace)
    for message in drawn:
        owner = None if message.coll is None else collective_of.get(message.coll)
        _svg_message(lay, trace, message, owner, colours, body)
    for record in trace.unmatched_receives[: max(MAX_ARROWS - len(drawn), 0)]:
        _svg_orphan(lay, trace, record, body)
    _svg_axis(lay, body)
    legend, bottom = _svg_legend(lay, trace, colours, lay.lanes_bottom + 36, width)
    title = f"Trace: {trace.summary()}"
    hidden = len(trace.messages) - len(drawn)
    if hidden > 0:
        title += f" — the first {len(drawn)} messages drawn, {hidden} more not"
    hidden_spans = sum(len(c.spans) for c in trace.collectives) - spans
    if hidden_spans > 0:
        title += f"; {hidden_spans} collective spans not drawn"
    height = math.ceil(bottom + 6)
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" class="ipympi-trace" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" font-family="{FONT}" '
        f'font-size="{_num(lay.font)}">'
        f'<rect width="{width}" height="{height}" fill="#ffffff"/>'
        f'<text x="8" y="{_num(lay.title_y)}" font-size="{_num(lay.ui_font)}" '
        f'fill="{"#b00020" if trace.truncated else "#222"}">{_esc(title)}</text>'
    )
    return head + "".join(body) + "".join(legend) + "</svg>"
