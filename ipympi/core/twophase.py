"""Two-phase collective I/O, the arithmetic: file domains, rounds, pieces (no I/O).

A strided collective access of many ranks (each rank's view interleaved with the
others') would cost every rank one system call per contiguous piece. Two-phase I/O,
as ROMIO does it, gives the job's aggregators one contiguous *file domain* each
(the ranks' common byte range cut in equal parts); in each round, the ranks send an
aggregator the pieces of its domain they write (or receive those they read) and the
aggregator moves its part of the round with a few large ``pwrite``/``preadv`` calls.

This module computes, for every rank alike from the ranks' byte ranges, where the
domains and their rounds (*cells*) begin (:func:`cell_bounds`), cuts one rank's file
segments at those bounds (:func:`split`), joins pieces into the runs an aggregator
reads or writes (:func:`runs`) and copies pieces between buffers (:func:`copy_pieces`),
all on numpy arrays; :mod:`ipympi.mpi.file_collective` does the messages and the I/O.
"""

from __future__ import annotations

from typing import NamedTuple

from .lazynumpy import np

__all__ = [
    "ALIGN",
    "Pieces",
    "bytes_before_eof",
    "cell_bounds",
    "copy_pieces",
    "interleaved",
    "runs",
    "split",
]

_I64 = "int64"  # (a name: numpy is imported on first use)

# Domains and rounds start at multiples of this many bytes (from the file's start), so
# that pieces of a regular view (a vector of 4 KiB blocks, say) are not cut in two and
# copy as rows of one size (see copy_pieces).
ALIGN = 1 << 16


class Pieces(NamedTuple):
    """A rank's segments cut at cell bounds, in file order: the cell of each piece, its
    file offset, its length and its place in the rank's data (stream) bytes."""

    cell: np.ndarray
    start: np.ndarray
    length: np.ndarray
    data: np.ndarray


def interleaved(extents: list[tuple[int, int] | None]) -> bool:
    """Whether the ranks' byte ranges ``(low, high)`` overlap (``None``: no bytes), the
    case where independent accesses would each be cut into many small ones."""
    spans = sorted(e for e in extents if e is not None and e[1] > e[0])
    return any(b[0] < a[1] for a, b in zip(spans, spans[1:]))


def cell_bounds(low: int, high: int, aggregators: int, buffer_size: int) -> tuple[np.ndarray, int]:
    """Cell ``c`` is bytes ``[bounds[c], bounds[c + 1])`` of the file; aggregator
    ``c // rounds`` moves it in round ``c % rounds``. Returns ``(bounds, rounds)``.

    ``[low, high)`` is cut into ``aggregators`` domains of equal size (the last may be
    shorter, some may be empty), each domain into rounds of at most ``buffer_size``
    bytes, all bounds but ``low`` and ``high`` at multiples of :data:`ALIGN`.
    """
    if high <= low:
        return np.array([low, low], _I64), 1
    base = low - low % ALIGN
    domain = -(-(high - base) // aggregators)
    domain = -(-domain // ALIGN) * ALIGN
    step = max(ALIGN, buffer_size - buffer_size % ALIGN)
    rounds = -(-domain // step)
    a = np.arange(aggregators, dtype=_I64)[:, None]
    k = np.arange(rounds, dtype=_I64)[None, :]
    starts = (base + a * domain + np.minimum(k * step, domain)).ravel()
    bounds = np.clip(np.append(starts, high), low, high)
    return bounds, rounds


def split(offs: np.ndarray, lens: np.ndarray, bounds: np.ndarray) -> Pieces:
    """Cut segments (file order, within ``[bounds[0], bounds[-1])``) at the cell bounds."""
    if len(offs) == 0:
        empty = np.zeros(0, _I64)
        return Pieces(empty, empty, empty, empty)
    data = np.cumsum(lens) - lens
    ends = offs + lens
    first = np.searchsorted(bounds, offs, side="right") - 1
    last = np.searchsorted(bounds, ends - 1, side="right") - 1
    count = last - first + 1
    seg = np.repeat(np.arange(len(offs)), count)
    cell = first[seg] + (np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count))
    start = np.maximum(offs[seg], bounds[cell])
    end = np.minimum(ends[seg], bounds[cell + 1])
    keep = end > start
    cell, start, end, seg = cell[keep], start[keep], end[keep], seg[keep]
    return Pieces(cell, start, end - start, data[seg] + (start - offs[seg]))


def runs(starts: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of pieces ``[start, start + len)`` as sorted, disjoint runs."""
    if len(starts) == 0:
        return starts, lens
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], (starts + lens)[order]
    reach = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > reach[:-1]
    heads = np.flatnonzero(new)
    tails = np.append(heads[1:], len(s)) - 1
    return s[heads], reach[tails] - s[heads]


def copy_pieces(
    dst: np.ndarray, at: np.ndarray, src: np.ndarray, frm: np.ndarray, lens: np.ndarray
) -> None:
    """``dst[at[i]:at[i] + lens[i]] = src[frm[i]:frm[i] + lens[i]]`` for every piece, on
    uint8 arrays (where pieces overlap in ``dst``, which one lands is not said: as for
    overlapping accesses of one collective call in MPI).

    Pieces of one length whose places are all multiples of it, as a regular view
    gives, are copied as rows of a 2-D view in one numpy operation; others one by one.
    """
    if len(lens) == 0:
        return
    width = int(lens[0])
    if (
        width > 0
        and bool((lens == width).all())
        and not (at % width).any()
        and not (frm % width).any()
    ):
        rows_dst = dst[: len(dst) - len(dst) % width].reshape(-1, width)
        rows_src = src[: len(src) - len(src) % width].reshape(-1, width)
        rows_dst[at // width] = rows_src[frm // width]
        return
    for a, f, n in zip(at.tolist(), frm.tolist(), lens.tolist()):
        dst[a : a + n] = src[f : f + n]


def bytes_before_eof(offs: np.ndarray, lens: np.ndarray, eof: int) -> int:
    """How many of a read's bytes (segments in stream order) come before the first one
    at or past the end of the file ``eof``: what a read that stops at the end gets."""
    short = np.flatnonzero(offs + lens > eof)
    if len(short) == 0:
        return int(lens.sum())
    i = int(short[0])
    return int(lens[:i].sum()) + max(0, eof - int(offs[i]))
