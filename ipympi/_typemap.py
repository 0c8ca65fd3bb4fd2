"""Typemaps: the memory layout of MPI datatypes as numpy arrays (pure, no MPI objects).

A datatype is a list of (basic type, byte displacement) pairs (MPI-1.1 §3.12). Here the
basic types are *leaves*, one per predefined datatype (:class:`Leaf`), and a
:class:`Layout` stores one element of a datatype as three parallel ``int64`` arrays of
maximal byte *runs* in typemap order:

* ``off``: where the run starts in memory, relative to the element's origin (the buffer
  address for element 0; element ``i`` is displaced by ``i * extent``);
* ``len``: its length in bytes;
* ``pos``: where it goes in the *packed* form, relative to the element's packed start.

The packed form is the wire format of a message and of ``Pack``: the leaves in typemap
order without gaps, each leaf taking ``leaf.packed`` bytes. For ordinary leaves that is
the leaf's size; the (value, int) pair types keep their C struct image (``extent`` bytes
with zeroed padding), so that a derived type made of pairs and the predefined pair type
itself carry the same bytes. A Layout also keeps its bounds (``lb``/``ub``, ``true_lb``/
``true_ub``), its size (data bytes) and its type signature as a run-length encoded list of
leaf ids (``sig_leaf``, ``sig_count``), which Get_elements and external32 need.

Bounds follow MPICH: every constructor derives them from the bounds of its parts;
``Create_struct`` pads the extent to the largest alignment of its parts when the parts
are not all of one type; zero-length results are the empty type with all bounds 0.

The copy engine (:mod:`ipympi._typemap_copy`) turns layouts into numpy strided views or
fancy-index gathers; nothing here loops in Python over elements.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ._constants import (
    DISTRIBUTE_BLOCK,
    DISTRIBUTE_CYCLIC,
    DISTRIBUTE_DFLT_DARG,
    DISTRIBUTE_NONE,
    ORDER_C,
    UNDEFINED,
)

__all__ = [
    "Layout",
    "Leaf",
    "bytes_of_elements",
    "complete_bytes",
    "contiguous",
    "darray",
    "darray_indices",
    "element_dtype",
    "elements_in",
    "hindexed",
    "hvector",
    "leaf_layout",
    "leaves",
    "marker_layout",
    "register_leaf",
    "resized",
    "struct",
    "subarray",
    "zerolen",
]

_I64 = np.int64
_NONE = np.zeros(0, dtype=_I64)
_NO_LEAF = np.zeros(0, dtype=np.int32)


# --- Leaves ------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Leaf:
    """A predefined datatype seen as a basic element of typemaps.

    ``dtype`` is the numpy dtype of one leaf in packed form (itemsize ``packed``);
    ``parts`` its basic elements as (byte offset, numpy dtype), two for the pair types;
    ``ext32`` the big-endian numpy dtypes of those parts in the external32 representation,
    or ``None`` when ipympi cannot convert the type. ``key`` groups leaves that MPICH
    treats as one type when deciding whether ``Create_struct`` pads (all 4-byte integers,
    for instance).
    """

    name: str
    dtype: np.dtype[Any]
    size: int
    align: int
    key: Hashable
    parts: tuple[tuple[int, np.dtype[Any]], ...]
    ext32: tuple[np.dtype[Any], ...] | None
    msg_ok: bool = True

    @property
    def packed(self) -> int:
        """Bytes of one leaf in packed form."""
        return self.dtype.itemsize

    @property
    def ext32_size(self) -> int | None:
        """Bytes of one leaf in external32 form, or None when not convertible."""
        return None if self.ext32 is None else sum(d.itemsize for d in self.ext32)


_LEAVES: list[Leaf] = []
# Per leaf id: packed bytes and number of basic elements.
_PACKED = np.zeros(0, dtype=_I64)
_PARTS = np.zeros(0, dtype=_I64)


def register_leaf(leaf: Leaf) -> int:
    """Add a leaf to the registry; return its id (used in type signatures)."""
    global _PACKED, _PARTS
    _LEAVES.append(leaf)
    _PACKED = np.append(_PACKED, leaf.packed)
    _PARTS = np.append(_PARTS, len(leaf.parts))
    return len(_LEAVES) - 1


def leaves() -> Sequence[Leaf]:
    """The registered leaves, indexed by id."""
    return _LEAVES


# --- Layouts -----------------------------------------------------------------------------


class Layout:
    """One element of a datatype: runs, bounds, size and signature (see module doc).

    Layouts are immutable and shared (a ``Dup`` shares its parent's). ``key`` identifies
    "the same type" for struct padding: a leaf's key for predefined types, the layout
    itself otherwise. ``marker`` is -1/+1 for the MPI-1 bound markers ``LB``/``UB``.
    """

    __slots__ = (
        "_cache",
        "align",
        "data_hi",
        "data_lo",
        "key",
        "lb",
        "len",
        "marker",
        "nelem",
        "off",
        "packed",
        "pos",
        "sig_count",
        "sig_leaf",
        "size",
        "true_lb",
        "true_ub",
        "ub",
    )

    def __init__(
        self,
        *,
        size: int,
        packed: int,
        bounds: tuple[int, int, int, int],
        align: int,
        runs: tuple[np.ndarray, np.ndarray, np.ndarray],
        sig: tuple[np.ndarray, np.ndarray],
        key: Hashable | None = None,
        marker: int = 0,
    ) -> None:
        self.size = int(size)
        self.packed = int(packed)
        self.lb, self.ub, self.true_lb, self.true_ub = (int(b) for b in bounds)
        self.align = int(align)
        self.off, self.len, self.pos = runs
        self.sig_leaf, self.sig_count = sig
        self.key: Hashable = self if key is None else key
        self.marker = marker
        if len(self.off):
            self.data_lo = int(self.off.min())
            self.data_hi = int((self.off + self.len).max())
        else:
            self.data_lo = self.data_hi = 0
        self.nelem = int((_PARTS[self.sig_leaf] * self.sig_count).sum()) if len(sig[0]) else 0
        self._cache: dict[str, Any] = {}

    @property
    def extent(self) -> int:
        """``ub - lb``: the stride between consecutive elements."""
        return self.ub - self.lb

    @property
    def raw(self) -> bool:
        """Whether the packed form of ``n`` elements is the memory from ``lb`` on.

        True for dense types; also for types made of pair leaves that tile memory
        exactly, whose packed form only differs from memory in padding bytes.
        """
        cached = self._cache.get("raw")
        if cached is None:
            cached = bool(
                self.packed == self.extent
                and self.packed > 0
                and np.array_equal(self.off - self.lb, self.pos)
            )
            self._cache["raw"] = cached
        return cached

    @property
    def dense(self) -> bool:
        """Whether one element is a single run filling ``[lb, ub)`` exactly."""
        return (
            len(self.off) == 1
            and int(self.len[0]) == self.packed == self.extent > 0
            and int(self.off[0]) == self.lb
        )

    @property
    def leaf_ids(self) -> np.ndarray:
        """The distinct leaf ids of the signature."""
        cached = self._cache.get("leaf_ids")
        if cached is None:
            cached = self._cache["leaf_ids"] = np.unique(self.sig_leaf)
        return cached

    def __repr__(self) -> str:
        return (
            f"<Layout size={self.size} packed={self.packed} lb={self.lb} ub={self.ub} "
            f"true=({self.true_lb}, {self.true_ub}) runs={len(self.off)}>"
        )


def leaf_layout(leaf_id: int, extent: int, true_extent: int) -> Layout:
    """The layout of a predefined datatype: one leaf at offset 0."""
    leaf = _LEAVES[leaf_id]
    off = np.array([p[0] for p in leaf.parts], dtype=_I64)
    length = np.array([p[1].itemsize for p in leaf.parts], dtype=_I64)
    off, length, pos = _merge(off, length, off.copy())
    return Layout(
        size=leaf.size,
        packed=leaf.packed,
        bounds=(0, extent, 0, true_extent),
        align=leaf.align,
        runs=(off, length, pos),
        sig=(np.array([leaf_id], dtype=np.int32), np.array([1], dtype=_I64)),
        key=leaf.key,
    )


def zerolen() -> Layout:
    """The empty datatype: no data, all bounds 0."""
    return Layout(
        size=0,
        packed=0,
        bounds=(0, 0, 0, 0),
        align=1,
        runs=(_NONE, _NONE, _NONE),
        sig=(_NO_LEAF, _NONE),
    )


def marker_layout(marker: int) -> Layout:
    """The layout of the MPI-1 pseudo-type ``LB`` (-1) or ``UB`` (+1)."""
    empty = zerolen()
    empty.marker = marker
    empty.key = ("marker", marker)
    return empty


# --- Building blocks ---------------------------------------------------------------------


Runs = tuple[np.ndarray, np.ndarray, np.ndarray]


def _merge(off: np.ndarray, length: np.ndarray, pos: np.ndarray) -> Runs:
    """Join runs that continue each other both in memory and in packed form."""
    if len(off) <= 1:
        return off, length, pos
    end = off[:-1] + length[:-1]
    joined = (off[1:] == end) & (pos[1:] == pos[:-1] + length[:-1])
    if not joined.any():
        return off, length, pos
    starts = np.flatnonzero(np.concatenate(([True], ~joined)))
    return off[starts], np.add.reduceat(length, starts), pos[starts]


def _merge_sig(leaf: np.ndarray, count: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Join adjacent signature entries of the same leaf."""
    if len(leaf) <= 1:
        return leaf, count
    same = leaf[1:] == leaf[:-1]
    if not same.any():
        return leaf, count
    starts = np.flatnonzero(np.concatenate(([True], ~same)))
    return leaf[starts], np.add.reduceat(count, starts)


def _tile_sig(child: Layout, copies: int) -> tuple[np.ndarray, np.ndarray]:
    """The signature of ``copies`` consecutive copies of ``child``."""
    if len(child.sig_leaf) == 1:
        return child.sig_leaf, child.sig_count * copies
    return _merge_sig(np.tile(child.sig_leaf, copies), np.tile(child.sig_count, copies))


def _blocks(child: Layout, starts: np.ndarray, counts: np.ndarray) -> Layout:
    """Blocks of ``counts[i]`` consecutive copies of ``child`` at byte ``starts[i]``.

    Every count must be positive. Bounds follow MPICH's block rule: a block spans its
    first and last copy (the last is the lowest one for a negative extent).
    """
    ext = child.extent
    span = (counts - 1) * ext
    low, high = np.minimum(span, 0), np.maximum(span, 0)
    bounds = (
        int((starts + low).min()) + child.lb,
        int((starts + high).max()) + child.ub,
        int((starts + low).min()) + child.true_lb,
        int((starts + high).max()) + child.true_ub,
    )
    total = int(counts.sum())
    runs: Runs
    if child.dense and ext > 0:
        pos = np.concatenate(([0], np.cumsum(counts[:-1]))) * child.packed
        runs = _merge(starts + child.off[0], counts * ext, pos.astype(_I64))
    elif len(child.off):
        first = np.repeat(np.cumsum(counts) - counts, counts)
        disps = np.repeat(starts, counts) + (np.arange(total, dtype=_I64) - first) * ext
        off = (disps[:, None] + child.off[None, :]).ravel()
        pos = (np.arange(total, dtype=_I64)[:, None] * child.packed + child.pos[None, :]).ravel()
        runs = _merge(off, np.tile(child.len, total), pos)
    else:
        runs = (_NONE, _NONE, _NONE)
    return Layout(
        size=child.size * total,
        packed=child.packed * total,
        bounds=bounds,
        align=child.align,
        runs=runs,
        sig=_tile_sig(child, total),
    )


def _concat(parts: Sequence[Layout]) -> Layout:
    """The concatenation of typemaps (the blocks of a struct), bounds min/max."""
    shifts = np.cumsum([0] + [p.packed for p in parts[:-1]])
    runs = _merge(
        np.concatenate([p.off for p in parts]),
        np.concatenate([p.len for p in parts]),
        np.concatenate([p.pos + s for p, s in zip(parts, shifts)]),
    )
    sig = _merge_sig(
        np.concatenate([p.sig_leaf for p in parts]), np.concatenate([p.sig_count for p in parts])
    )
    return Layout(
        size=sum(p.size for p in parts),
        packed=sum(p.packed for p in parts),
        bounds=(
            min(p.lb for p in parts),
            max(p.ub for p in parts),
            min(p.true_lb for p in parts),
            max(p.true_ub for p in parts),
        ),
        align=max(p.align for p in parts),
        runs=runs,
        sig=sig,
    )


def _array(values: Sequence[int] | np.ndarray) -> np.ndarray:
    return np.asarray(values, dtype=_I64).reshape(-1)


# --- Constructors ------------------------------------------------------------------------


def contiguous(child: Layout, count: int) -> Layout:
    """``count`` copies of ``child``, each one extent after the previous."""
    if count == 0 or child.size == 0:
        return zerolen()
    return _blocks(child, _array([0]), _array([count]))


def hvector(child: Layout, count: int, blocklength: int, stride: int) -> Layout:
    """``count`` blocks of ``blocklength`` copies, block starts ``stride`` bytes apart."""
    if count == 0 or child.size == 0:
        return zerolen()
    if blocklength == 0:
        # No data, but MPICH still gives the type the bounds of its block grid.
        ext, last = child.extent, stride * (count - 1)
        if ext >= 0:
            lb, ub = child.lb + min(last, 0), child.ub - ext + max(last, 0)
        else:
            lb, ub = child.lb - ext + min(last, 0), child.ub + max(last, 0)
        bounds = (lb, ub, lb + child.true_lb - child.lb, ub + child.true_ub - child.ub)
        return Layout(
            size=0,
            packed=0,
            bounds=bounds,
            align=child.align,
            runs=(_NONE, _NONE, _NONE),
            sig=(_NO_LEAF, _NONE),
        )
    starts = np.arange(count, dtype=_I64) * stride
    return _blocks(child, starts, np.full(count, blocklength, dtype=_I64))


def hindexed(
    child: Layout,
    blocklengths: Sequence[int] | np.ndarray,
    displacements: Sequence[int] | np.ndarray,
) -> Layout:
    """Blocks of ``blocklengths[i]`` copies at byte ``displacements[i]``; empty blocks
    are left out."""
    counts, starts = _array(blocklengths), _array(displacements)
    keep = counts > 0
    if child.size == 0 or not keep.any():
        return zerolen()
    if not keep.all():
        counts, starts = counts[keep], starts[keep]
    return _blocks(child, starts, counts)


def struct(
    children: Sequence[Layout],
    blocklengths: Sequence[int],
    displacements: Sequence[int],
) -> Layout:
    """The general constructor: block ``i`` holds ``blocklengths[i]`` copies of
    ``children[i]`` at byte ``displacements[i]``.

    ``LB``/``UB`` markers set the bounds of the result (MPI-1.1 §3.12.3). The extent is
    padded to the largest alignment of the parts unless all parts are of one type.
    """
    parts: list[Layout] = []
    keys: set[Hashable] = set()
    lb_marks: list[int] = []
    ub_marks: list[int] = []
    for child, count, disp in zip(children, blocklengths, displacements):
        if count == 0:
            continue
        if child.marker:
            (lb_marks if child.marker < 0 else ub_marks).append(disp)
            continue
        parts.append(_blocks(child, _array([disp]), _array([count])))
        keys.add(child.key)
    if not parts:
        result = zerolen()
    else:
        result = _concat(parts)
        extent = result.extent
        if len(keys) > 1 and extent > 0 and extent % result.align:
            result.ub += result.align - extent % result.align
    if lb_marks or ub_marks:
        lb = min(lb_marks) if lb_marks else result.lb
        ub = max(ub_marks) if ub_marks else result.ub
        result = resized(result, lb, ub - lb)
    return result


def resized(child: Layout, lb: int, extent: int) -> Layout:
    """The same typemap with bounds ``lb`` and ``lb + extent``."""
    return Layout(
        size=child.size,
        packed=child.packed,
        bounds=(lb, lb + extent, child.true_lb, child.true_ub),
        align=child.align,
        runs=(child.off, child.len, child.pos),
        sig=(child.sig_leaf, child.sig_count),
    )


def _grid(child: Layout, dims: Sequence[np.ndarray], strides: Sequence[int], order: int) -> Layout:
    """Copies of ``child`` at the index grid ``dims`` (sorted indices per dimension) of an
    array with per-dimension element ``strides``, in the array's storage order."""
    ext = child.extent
    if order == ORDER_C:
        dims, strides = list(dims), list(strides)
    else:
        dims, strides = list(dims)[::-1], list(strides)[::-1]
    if any(len(d) == 0 for d in dims) or child.size == 0:
        return zerolen()
    # Runs of consecutive indices in the fastest dimension become blocks.
    inner = dims[-1]
    breaks = np.flatnonzero(np.diff(inner) != 1) + 1
    block_first = inner[np.concatenate(([0], breaks))]
    block_len = np.diff(np.concatenate(([0], breaks, [len(inner)])))
    base = np.zeros(1, dtype=_I64)
    for index, stride in zip(dims[:-1], strides[:-1]):
        base = (base[:, None] + index[None, :] * stride).ravel()
    starts = (base[:, None] + block_first[None, :] * strides[-1]).ravel() * ext
    counts = np.tile(block_len, len(base))
    return _blocks(child, starts, counts)


def _strides(sizes: Sequence[int], order: int) -> list[int]:
    """Element strides of each dimension of an array of shape ``sizes``."""
    shape = list(sizes) if order == ORDER_C else list(sizes)[::-1]
    strides = [int(np.prod(shape[i + 1 :], dtype=_I64)) for i in range(len(shape))]
    return strides if order == ORDER_C else strides[::-1]


def subarray(
    child: Layout,
    sizes: Sequence[int],
    subsizes: Sequence[int],
    starts: Sequence[int],
    order: int,
) -> Layout:
    """A ``subsizes`` block at ``starts`` of a ``sizes`` array of ``child``; the result
    spans the whole array (lb 0, extent ``prod(sizes) * extent``)."""
    dims = [np.arange(s, s + n, dtype=_I64) for s, n in zip(starts, subsizes)]
    grid = _grid(child, dims, _strides(sizes, order), order)
    return resized(grid, 0, int(np.prod(sizes, dtype=_I64)) * child.extent)


def darray_indices(gsize: int, distrib: int, darg: int, psize: int, coord: int) -> np.ndarray:
    """The global indices of one dimension that process coordinate ``coord`` owns."""
    if distrib == DISTRIBUTE_NONE:
        return np.arange(gsize, dtype=_I64)
    if distrib == DISTRIBUTE_BLOCK:
        block = -(-gsize // psize) if darg == DISTRIBUTE_DFLT_DARG else darg
        return np.arange(coord * block, min((coord + 1) * block, gsize), dtype=_I64)
    assert distrib == DISTRIBUTE_CYCLIC
    block = 1 if darg == DISTRIBUTE_DFLT_DARG else darg
    index = np.arange(gsize, dtype=_I64)
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
    grid = _grid(child, dims, _strides(gsizes, order), order)
    return resized(grid, 0, int(np.prod(gsizes, dtype=_I64)) * child.extent)


# --- Counting basic elements -------------------------------------------------------------


def _entry_table(layout: Layout) -> tuple[np.ndarray, np.ndarray]:
    """Cumulative packed bytes and basic elements at the end of each signature entry."""
    cached = layout._cache.get("entries")
    if cached is None:
        cached = (
            np.cumsum(_PACKED[layout.sig_leaf] * layout.sig_count),
            np.cumsum(_PARTS[layout.sig_leaf] * layout.sig_count),
        )
        layout._cache["entries"] = cached
    return cached


def _prefix(layout: Layout, nbytes: int) -> tuple[int, int, bool]:
    """For ``0 <= nbytes < layout.packed``: the basic elements complete within the first
    ``nbytes`` packed bytes of one element, the byte just past the last of them, and
    whether ``nbytes`` falls on an element boundary (or in padding)."""
    if nbytes == 0:
        return 0, 0, True
    byte_end, elem_end = _entry_table(layout)
    entry = int(np.searchsorted(byte_end, nbytes, side="right"))
    byte0 = int(byte_end[entry - 1]) if entry else 0
    elem0 = int(elem_end[entry - 1]) if entry else 0
    leaf = _LEAVES[int(layout.sig_leaf[entry])]
    whole, rest = divmod(nbytes - byte0, leaf.packed)
    elements = elem0 + whole * len(leaf.parts)
    start = byte0 + whole * leaf.packed
    end, exact = start, rest == 0
    for offset, dtype in leaf.parts:
        if offset + dtype.itemsize <= rest:
            elements += 1
            end = start + offset + dtype.itemsize
            exact = True
        elif offset < rest:
            exact = False
            break
    return elements, end, exact


def elements_in(layout: Layout, nbytes: int) -> int:
    """Basic elements in ``nbytes`` of packed data, or ``UNDEFINED`` when ``nbytes`` ends
    inside a basic element (``Status.Get_elements``)."""
    if layout.packed == 0:
        return 0 if nbytes == 0 else UNDEFINED
    whole, rest = divmod(nbytes, layout.packed)
    elements, _, exact = _prefix(layout, rest)
    return whole * layout.nelem + elements if exact else UNDEFINED


def complete_bytes(layout: Layout, nbytes: int) -> int:
    """The longest prefix of ``nbytes`` packed bytes made of whole basic elements."""
    if layout.packed == 0:
        return 0
    whole, rest = divmod(nbytes, layout.packed)
    return whole * layout.packed + _prefix(layout, rest)[1]


def bytes_of_elements(layout: Layout, count: int) -> int:
    """Packed bytes of the first ``count`` basic elements (``Status.Set_elements``)."""
    if layout.nelem == 0:
        return 0
    whole, rest = divmod(count, layout.nelem)
    nbytes = whole * layout.packed
    if rest:
        byte_end, elem_end = _entry_table(layout)
        entry = int(np.searchsorted(elem_end, rest, side="right"))
        byte0 = int(byte_end[entry - 1]) if entry else 0
        elem0 = int(elem_end[entry - 1]) if entry else 0
        leaf = _LEAVES[int(layout.sig_leaf[entry])]
        leaves_done, parts_done = divmod(rest - elem0, len(leaf.parts))
        nbytes += byte0 + leaves_done * leaf.packed
        if parts_done:
            offset, dtype = leaf.parts[parts_done - 1]
            nbytes += offset + dtype.itemsize
    return nbytes


def element_dtype(layout: Layout) -> np.dtype[Any] | None:
    """The numpy dtype of the leaves when they are all alike, else None."""
    if "dtype" not in layout._cache:
        dtypes = {_LEAVES[int(i)].dtype for i in layout.leaf_ids}
        layout._cache["dtype"] = dtypes.pop() if len(dtypes) == 1 else None
    return layout._cache["dtype"]  # type: ignore[no-any-return]
