"""Make the README's images from real runs: per-rank output and a message trace.

    python docs/make_images.py [--out docs/images] [-n 4]

Starts a session of ranks as the ``ipympi`` kernel does, runs two cells, and
writes what the notebook would show: ``per_rank_output.svg`` (the labelled
output of a cell, as a notebook renders it) and ``trace.svg`` (the diagram of
``%%px --trace``). Nothing is drawn by hand: rerun the script after changing
the output format or the diagram.
"""

from __future__ import annotations

import argparse
import html
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ipympi.notebook.controller.cluster import Cluster  # noqa: E402
from ipympi.notebook.controller.execute import CellOptions, run_cell  # noqa: E402

OUTPUT_CELL = """\
import numpy as np
x = np.arange(4) + 10 * rank
total = comm.allreduce(rank)
print(f"rank {rank} of {size}: x = {x}, sum of ranks = {total}")
if rank == 1:
    import sys
    print("a warning from rank 1 only", file=sys.stderr)
"""

TRACE_CELL = """\
import numpy as np
comm.Barrier()
a = np.full(4, float(rank))
b = np.empty(4)
comm.Allreduce(a, b)
if rank == 0:
    comm.send("hello", dest=size - 1, tag=7)
elif rank == size - 1:
    comm.recv(source=0, tag=7)
comm.Bcast(b, root=1)
"""

# ANSI colours used by the output labels, as SVG fill colours.
_COLOURS = {"0;90": "#6e7781", "0;31": "#b42318", "0;32": "#1a7f37", "0;34": "#0550ae"}
_ANSI = re.compile(r"\x1b\[([0-9;]*)m")


def run(cluster: Cluster, code: str, **options: Any) -> tuple[Any, list[tuple[str, str]]]:
    """Run ``code`` as a notebook cell; its result and the (stream name, text) it published."""
    shown: list[tuple[str, str]] = []

    def publish(kind: str, content: dict, metadata: dict) -> None:
        if kind == "stream":
            shown.append((content["name"], content["text"]))

    result = run_cell(cluster, code, CellOptions(**options), publish, 1)
    result.raise_for_error()
    return result, shown


def terminal_svg(shown: list[tuple[str, str]], title: str) -> str:
    """An SVG of output text as a notebook shows it: label colours kept, stderr shaded."""
    rows: list[tuple[str, list[tuple[str, str | None]]]] = []
    for name, text in shown:
        for line in text.splitlines():
            pieces: list[tuple[str, str | None]] = []
            colour = None
            position = 0
            for match in _ANSI.finditer(line):
                if match.start() > position:
                    pieces.append((line[position : match.start()], colour))
                colour = _COLOURS.get(match.group(1))
                position = match.end()
            if position < len(line):
                pieces.append((line[position:], colour))
            rows.append((name, pieces))
    char_w, line_h, pad = 8.4, 20, 14
    width = int(pad * 2 + char_w * max([len("".join(t for t, _ in p)) for _, p in rows] + [60]))
    height = pad * 2 + 26 + line_h * len(rows)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="Menlo, Consolas, monospace" font-size="14">',
        f'<rect width="{width}" height="{height}" rx="6" fill="#ffffff" stroke="#d0d7de"/>',
        f'<text x="{pad}" y="{pad + 12}" fill="#57606a" font-family="sans-serif">'
        f"{html.escape(title)}</text>",
    ]
    y = pad + 26
    for name, pieces in rows:
        if name == "stderr":
            shade = f'width="{width - 2}" height="{line_h}" fill="#fdecea"'
            out.append(f'<rect x="1" y="{y}" {shade}/>')
        spans = "".join(
            f'<tspan fill="{colour or "#1f2328"}">{html.escape(text)}</tspan>'
            for text, colour in pieces
        )
        out.append(f'<text x="{pad}" y="{y + 15}" xml:space="preserve">{spans}</text>')
        y += line_h
    out.append("</svg>")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images")
    parser.add_argument("-n", type=int, default=4, help="number of ranks (default 4)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    with Cluster(args.n) as cluster:
        cluster.start()
        _, shown = run(cluster, OUTPUT_CELL)
        (args.out / "per_rank_output.svg").write_text(
            terminal_svg(shown, f"a cell on {args.n} ranks"), encoding="utf-8"
        )
        result, _ = run(cluster, TRACE_CELL, trace=True)
        trace = result.trace()
        (args.out / "trace.svg").write_text(trace.to_svg(), encoding="utf-8")
    for name in ("per_rank_output.svg", "trace.svg"):
        print(f"wrote {args.out / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
