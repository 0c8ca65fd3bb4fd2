"""Array-shaped typemaps: subarrays and distributed arrays (MPI-2 §4.1.3, §4.1.4).

Both are grids of copies of a child layout: the indices owned in each dimension of an
array, combined in the array's storage order (C: the last dimension varies fastest,
Fortran: the first). The scalars of the result (:func:`ipympi.core.typemap.compose`) come
from the extreme indices of each dimension, in a few operations per dimension; the blocks
(runs of consecutive indices in the fastest dimension) are only laid out as arrays when
the typemap's arrays are needed. The result always spans the whole array: lower bound 0,
extent ``prod(sizes) * child extent``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from .constants import (
    DISTRIBUTE_BLOCK,
    DISTRIBUTE_CYCLIC,
    DISTRIBUTE_DFLT_DARG,
    DISTRIBUTE_NONE,
    ORDER_C,
)
from .lazynumpy import np
from .typemap import Layout, Piece, compose, resized, zerolen

__all__ = ["darray", "darray_indices", "subarray"]


def _grid(
    child: Layout, dims: Sequence[np.ndarray], strides: Sequence[int], order: int, extent: int
) -> Layout:
    """Copies of ``child`` at the index grid ``dims`` (sorted indices per dimension) of an
    array with per-dimension element ``strides``, in the array's storage order; the result
    spans the whole array (lb 0, ``extent``)."""
    ext = child.extent
    if any(len(d) == 0 for d in dims) or child.size == 0:
        return resized(zerolen(), 0, extent)
    low = high = 0
    for index, stride in zip(dims, strides):
        first, last = int(index[0]) * stride * ext, int(index[-1]) * stride * ext
        low, high = low + min(first, last), high + max(first, last)
    copies = math.prod(len(d) for d in dims)

    def pieces() -> tuple[Piece, ...]:
        fast = list(zip(dims, strides))
        if order != ORDER_C:
            fast.reverse()
        # Runs of consecutive indices in the fastest dimension become blocks.
        inner, inner_stride = fast[-1]
        breaks = np.flatnonzero(np.diff(inner) != 1) + 1
        block_first = inner[np.concatenate(([0], breaks))]
        block_len = np.diff(np.concatenate(([0], breaks, [len(inner)])))
        base: np.ndarray = np.zeros(1, dtype=np.int64)
        for index, stride in fast[:-1]:
            base = (base[:, None] + index[None, :] * stride).ravel()
        starts = (base[:, None] + block_first[None, :] * inner_stride).ravel() * ext
        return ((child, starts, np.tile(block_len, len(base)).astype(np.int64)),)

    grid = compose(pieces, ((child, low, high, copies),))
    grid.lb, grid.ub = 0, extent  # not shared yet
    return grid


def _strides(sizes: Sequence[int], order: int) -> list[int]:
    """Element strides of each dimension of an array of shape ``sizes``."""
    strides = [1] * len(sizes)
    dims = range(len(sizes) - 2, -1, -1) if order == ORDER_C else range(1, len(sizes))
    for d in dims:
        if order == ORDER_C:
            strides[d] = strides[d + 1] * sizes[d + 1]
        else:
            strides[d] = strides[d - 1] * sizes[d - 1]
    return strides


def subarray(
    child: Layout,
    sizes: Sequence[int],
    subsizes: Sequence[int],
    starts: Sequence[int],
    order: int,
) -> Layout:
    """A ``subsizes`` block at ``starts`` of a ``sizes`` array of ``child``; the result
    spans the whole array (lb 0, extent ``prod(sizes) * extent``)."""
    dims = [np.arange(s, s + n, dtype=np.int64) for s, n in zip(starts, subsizes)]
    return _grid(child, dims, _strides(sizes, order), order, math.prod(sizes) * child.extent)


def darray_indices(gsize: int, distrib: int, darg: int, psize: int, coord: int) -> np.ndarray:
    """The global indices of one dimension that process coordinate ``coord`` owns."""
    if distrib == DISTRIBUTE_NONE:
        return np.arange(gsize, dtype=np.int64)
    if distrib == DISTRIBUTE_BLOCK:
        block = -(-gsize // psize) if darg == DISTRIBUTE_DFLT_DARG else darg
        return np.arange(coord * block, min((coord + 1) * block, gsize), dtype=np.int64)
    assert distrib == DISTRIBUTE_CYCLIC
    block = 1 if darg == DISTRIBUTE_DFLT_DARG else darg
    index = np.arange(gsize, dtype=np.int64)
    return index[(index // block) % psize == coord]


def darray(
    child: Layout,
    rank: int,
    gsizes: Sequence[int],
    distribs: Sequence[int],
    dargs: Sequence[int],
    psizes: Sequence[int],
    order: int,
) -> Layout:
    """The part of a ``gsizes`` array of ``child`` that ``rank`` of a row-major process
    grid ``psizes`` owns; the result spans the whole array."""
    coords = np.unravel_index(rank, tuple(psizes)) if psizes else ()
    dims = [
        darray_indices(g, d, a, p, int(c))
        for g, d, a, p, c in zip(gsizes, distribs, dargs, psizes, coords)
    ]
    extent = math.prod(gsizes) * child.extent
    return _grid(child, dims, _strides(gsizes, order), order, extent)
