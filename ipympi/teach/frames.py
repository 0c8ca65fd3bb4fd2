"""Step-by-step views: frames of a title, lines, a picture and a table per rank.

:class:`FrameView` shows its frames as text, as HTML one under the other, or with a
stepper (ipywidgets). The explanation of a collective call (:mod:`.explain`) and the
epochs of one-sided communication (:mod:`.rma_steps`) are such views; :func:`step_svg`
draws the ranks of a step in a circle with an arrow per message or operation.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Frame", "FrameView", "Row", "step_svg"]

STEP_COLOUR = "#1f77b4"
CHANGED_BACKGROUND = "#fff1a8"
_MONO = "ui-monospace, SFMono-Regular, Menlo, Consolas, monospace"


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


# -- the step picture --------------------------------------------------------------------
def step_svg(ranks: Sequence[int], messages: Sequence[Any], payloads: list[str]) -> str:
    """The ranks in a circle and an arrow per message (``src``, ``dst``, ``matched``)."""
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


# -- frames shown one after another -------------------------------------------------------
class FrameView:
    """Frames under a header: as text, as HTML, or with a stepper (ipywidgets).

    The step-by-step views (:class:`Explanation`, ``rma_steps.EpochSteps``) provide
    ``frames``, :meth:`header` and :meth:`_notes`.
    """

    frames: list[Frame]

    def header(self) -> str:
        raise NotImplementedError

    def _notes(self) -> list[str]:
        return []

    def to_text(self) -> str:
        lines = [self.header(), *self._notes()]
        for frame in self.frames:
            lines += ["", frame.title]
            lines += [f"  {text}" for text in frame.messages]
            lines += _text_table(frame)
        lines += ["", "(* changed)"]
        return "\n".join(lines)

    def _header_html(self) -> str:
        notes = "".join(
            f'<div style="color:#555;margin-top:2px">{html.escape(n)}</div>' for n in self._notes()
        )
        return (
            f'<div style="font-weight:600;font-size:1.05em">{html.escape(self.header())}</div>'
            f"{notes}"
        )

    def frame_html(self, index: int) -> str:
        """One frame as HTML (``index`` 0 is the first)."""
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
