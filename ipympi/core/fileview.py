"""File views: where the bytes of a data access land in a file (pure, no I/O).

A view (MPI-4.1 §14.3) is a displacement and a filetype tiled from it: the file's
visible bytes are the filetype's data runs, instance after instance, and a data access
reads or writes a contiguous range of that *stream* of visible bytes. This module maps a
stream range to the file's byte segments, merged where they touch, so that the I/O layer
issues one system call per contiguous piece; and it checks access modes.
"""

from __future__ import annotations

from .constants import (
    MODE_CREATE,
    MODE_EXCL,
    MODE_RDONLY,
    MODE_RDWR,
    MODE_SEQUENTIAL,
    MODE_WRONLY,
)
from .lazynumpy import np

__all__ = ["Tiling", "amode_problem"]


def amode_problem(amode: int) -> str | None:
    """Why ``amode`` is not a valid access mode (MPI-4.1 §14.2.1), or ``None``."""
    access = [m for m in (MODE_RDONLY, MODE_WRONLY, MODE_RDWR) if amode & m]
    if len(access) != 1:
        return "exactly one of MODE_RDONLY, MODE_WRONLY and MODE_RDWR must be given"
    if amode & MODE_RDONLY and amode & (MODE_CREATE | MODE_EXCL):
        return "MODE_RDONLY cannot be combined with MODE_CREATE or MODE_EXCL"
    if amode & MODE_RDWR and amode & MODE_SEQUENTIAL:
        return "MODE_RDWR cannot be combined with MODE_SEQUENTIAL"
    if amode < 0 or amode >= 512:
        return f"unknown bits in access mode {amode}"
    return None


class Tiling:
    """A filetype's runs tiled from a displacement: the visible bytes of a view.

    ``off``/``length`` are one instance's data runs (byte offsets relative to the
    instance's origin, in typemap order), ``extent`` the distance between instances.
    """

    __slots__ = ("cum", "dense", "disp", "extent", "length", "off", "size")

    def __init__(self, disp: int, off: np.ndarray, length: np.ndarray, extent: int) -> None:
        keep = length > 0
        self.disp = disp
        self.off = np.asarray(off, dtype=np.int64)[keep]
        self.length = np.asarray(length, dtype=np.int64)[keep]
        self.extent = extent
        self.size = int(self.length.sum())
        self.cum = np.cumsum(self.length) - self.length
        self.dense = len(self.off) == 1 and int(self.length[0]) == extent

    def segments(self, start: int, nbytes: int) -> tuple[np.ndarray, np.ndarray]:
        """File offsets and lengths of stream bytes ``[start, start + nbytes)``: in stream
        order, touching segments merged."""
        if nbytes <= 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        if self.size == 0:
            raise ValueError("the filetype holds no data")
        if self.dense:
            at = self.disp + int(self.off[0]) + start
            return np.array([at], np.int64), np.array([nbytes], np.int64)
        size = self.size
        first, last = start // size, (start + nbytes - 1) // size
        inst = np.arange(first, last + 1, dtype=np.int64)
        base = (self.disp + inst * self.extent)[:, None]
        offs = (base + self.off[None, :]).ravel()
        pos = ((inst * size)[:, None] + self.cum[None, :]).ravel()
        lens = np.broadcast_to(self.length, (len(inst), len(self.length))).ravel()
        lo = np.maximum(pos, start)
        hi = np.minimum(pos + lens, start + nbytes)
        keep = hi > lo
        offs = offs[keep] + (lo - pos)[keep]
        lens = (hi - lo)[keep]
        return _merge(offs, lens)

    def byte_offset(self, start: int) -> int:
        """The file offset of stream byte ``start``."""
        if self.size == 0:
            return self.disp
        inst, within = divmod(start, self.size)
        k = int(np.searchsorted(self.cum, within, side="right")) - 1
        return self.disp + inst * self.extent + int(self.off[k]) + within - int(self.cum[k])


def _merge(offs: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Join consecutive segments where one ends where the next starts."""
    if len(offs) <= 1:
        return offs, lens
    ends = offs + lens
    new: np.ndarray = np.ones(len(offs), dtype=bool)
    new[1:] = offs[1:] != ends[:-1]
    heads = np.flatnonzero(new)
    merged_off = offs[heads]
    tails = np.append(heads[1:], len(offs)) - 1
    return merged_off, ends[tails] - merged_off
