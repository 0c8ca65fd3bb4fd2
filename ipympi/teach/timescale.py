"""The time axis of a trace drawing, with long idle gaps compressed into axis breaks.

A cell often computes for a second and then runs a collective of 80 µs: on a
linear axis the collective is a sliver. :class:`TimeScale` maps trace times
(relative to the trace's start) to positions piecewise linearly: a gap in
which nothing happens for more than ``gap_fraction`` of the duration becomes
a narrow *break* of fixed width, and each stretch of activity between breaks
gets a fair share of the width (at least half its even share, so a short
burst after a long one stays readable). The SVG diagram uses pixels, the text
chart columns; both label ticks the same way.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .units import format_time

if TYPE_CHECKING:
    from .traced import TraceView

__all__ = ["Segment", "Tick", "TimeScale", "event_times"]


@dataclass
class Segment:
    """A stretch of time ``[t0, t1]`` drawn over ``[x0, x1]``; ``idle`` marks a break."""

    t0: float
    t1: float
    x0: float
    x1: float
    idle: bool


@dataclass
class Tick:
    t: float
    x: float
    label: str


def _nice_step(raw: float) -> float:
    """The smallest 1, 2 or 5 times a power of ten that is at least ``raw``."""
    if raw <= 0:
        return 1.0
    power = 10 ** math.floor(math.log10(raw))
    for factor in (1, 2, 5, 10):
        if factor * power >= raw * (1 - 1e-9):
            return factor * power
    return 10 * power


class TimeScale:
    """Piecewise-linear map from relative time to position, with compressed idle gaps."""

    def __init__(
        self,
        times: Iterable[float],
        duration: float,
        x0: float,
        width: float,
        break_width: float,
        gap_fraction: float = 0.15,
        min_live: float = 0.0,
    ) -> None:
        self.x0, self.width, self.duration = x0, width, max(duration, 0.0)
        points = sorted({min(max(t, 0.0), self.duration) for t in times} | {0.0, self.duration})
        threshold = gap_fraction * self.duration
        gaps = [
            (a, b) for a, b in zip(points, points[1:]) if self.duration > 0 and b - a > threshold
        ]
        stretches: list[tuple[float, float]] = []
        start = 0.0
        for a, b in gaps:
            stretches.append((start, a))
            start = b
        stretches.append((start, self.duration))
        self.segments = self._layout(stretches, gaps, break_width, min_live)
        self._starts = [s.t0 for s in self.segments]

    def _layout(
        self,
        stretches: list[tuple[float, float]],
        gaps: list[tuple[float, float]],
        break_width: float,
        min_live: float,
    ) -> list[Segment]:
        if self.duration <= 0:
            middle = self.x0 + self.width / 2
            return [Segment(0.0, 0.0, middle, middle, False)]
        live_total = sum(b - a for a, b in stretches)
        n_breaks = len(gaps)
        if live_total <= 0:
            break_width = self.width / n_breaks
        break_width = min(break_width, self.width * 0.4 / max(n_breaks, 1))
        # A burst of activity at one instant still gets a little room between two breaks.
        point_width = min_live if live_total > 0 else 0.0
        points = sum(1 for a, b in stretches if b <= a)
        room = max(self.width - n_breaks * break_width - points * point_width, 0.0)
        live = [b - a for a, b in stretches if b > a]
        floor = 0.5 / len(live) if live else 0.0
        shares = [max(d / live_total, floor) for d in live] if live_total > 0 else []
        norm = sum(shares) or 1.0
        segments: list[Segment] = []
        x = self.x0
        share_iter = iter(shares)
        for i, (a, b) in enumerate(stretches):
            w = room * next(share_iter) / norm if b > a else point_width
            segments.append(Segment(a, b, x, x + w, False))
            x += w
            if i < n_breaks:
                ga, gb = gaps[i]
                segments.append(Segment(ga, gb, x, x + break_width, True))
                x += break_width
        return segments

    @property
    def breaks(self) -> list[Segment]:
        return [s for s in self.segments if s.idle]

    def x(self, t: float) -> float:
        """The position of relative time ``t``."""
        i = max(bisect.bisect_right(self._starts, t) - 1, 0)
        seg = self.segments[i]
        if t <= seg.t0 or seg.t1 <= seg.t0:
            return seg.x0 if t <= seg.t0 else seg.x1
        if t >= seg.t1:
            return seg.x1
        return seg.x0 + (t - seg.t0) / (seg.t1 - seg.t0) * (seg.x1 - seg.x0)

    def ticks(self, spacing: float) -> list[Tick]:
        """Labelled ticks at least ``spacing`` apart.

        The first stretch is labelled with times from the start; a stretch after
        a break with its start time, then ``+offsets`` from it, so microseconds
        stay readable a second into the cell.
        """
        ticks: list[Tick] = []
        first = True
        for seg in self.segments:
            if seg.idle:
                continue
            span, extent = seg.t1 - seg.t0, seg.x1 - seg.x0
            candidates = [Tick(seg.t0, seg.x0, format_time(seg.t0))]
            if span > 0 and extent > 0:
                step = _nice_step(spacing * span / extent)
                k = math.ceil((seg.t0 if first else 0.0) / step - 1e-9)
                while True:
                    offset = k * step
                    t = offset if first else seg.t0 + offset
                    if t > seg.t1 + 1e-15:
                        break
                    if t > seg.t0 + 1e-15:
                        unit = format_time(offset, unit_of=seg.t1 if first else span)
                        candidates.append(Tick(t, self.x(t), unit if first else f"+{unit}"))
                    k += 1
            for tick in candidates:
                if ticks and tick.x - ticks[-1].x < spacing:
                    if tick is candidates[0]:  # a stretch's start wins over the last tick
                        ticks.pop()
                    else:
                        continue
                if ticks and tick.x - ticks[-1].x < spacing:
                    continue
                ticks.append(tick)
            first = False
        return ticks


def event_times(trace: TraceView) -> list[float]:
    """When something happens in ``trace`` (relative times): what the scale keeps to scale."""
    times = []
    for m in trace.messages:
        times.append(m.t_send)
        if m.t_recv is not None:
            times.append(m.t_recv)
    times += [float(r["t"]) for r in trace.unmatched_receives]
    for coll in trace.collectives:
        for span in coll.spans.values():
            times += [span.t0, span.t1]
            for rnd in span.rounds:
                times += [t for t in (rnd.t0, rnd.t1) if t is not None]
    times += [t for op in trace.rma_ops for t in (op.t0, op.t1)]
    times += [t for sync in trace.rma_syncs for t in (sync.t0, sync.t1)]
    return [t - trace.start for t in times]
