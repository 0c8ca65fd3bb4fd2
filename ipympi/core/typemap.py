"""Typemaps: the memory layout of MPI datatypes (pure, no MPI objects).

A datatype is a list of (basic type, byte displacement) pairs (MPI-1.1 §3.12). Here the
basic types are *leaves*, one per predefined datatype (:class:`Leaf`), and a
:class:`Layout` describes one element of a datatype in two tiers:

* Scalars, which every constructor computes at once in a few Python operations per block,
  so that building, decoding and freeing datatypes stays cheap: the bounds (``lb``/``ub``,
  ``true_lb``/``true_ub``), the span of the data bytes (``data_lo``/``data_hi``), the
  size (data bytes), the packed size, the number of basic elements, the alignment and
  the set of leaves.
* numpy arrays, built the first time a message, ``Pack`` or an element count needs them
  and then kept: the maximal byte *runs* in typemap order, as three parallel ``int64``
  arrays ``off`` (where a run starts in memory, relative to the element's origin; element
  ``i`` is displaced by ``i * extent``), ``len`` (its length in bytes) and ``pos`` (where
  it goes in the *packed* form, relative to the element's packed start); and the type
  signature as a run-length encoded list of leaf ids (``sig_leaf``, ``sig_count``),
  which Get_elements and external32 need.

The arrays come from the layout's *pieces*: a piece ``(child, starts, counts)`` stands for
blocks of ``counts[i]`` consecutive copies of the child layout (one child extent apart) at
byte ``starts[i]``, and a layout's typemap is its pieces' typemaps in order. A struct has
one piece per block, the other constructors one piece (a resized type: its child at 0,
whose arrays it shares). Constructors whose pieces are grids of many blocks (vectors,
subarrays, distributed arrays) give them as a function, called when the arrays are built.

The packed form is the wire format of a message and of ``Pack``: the leaves in typemap
order without gaps, each leaf taking ``leaf.packed`` bytes. For ordinary leaves that is
the leaf's size; the (value, int) pair types keep their C struct image (``extent`` bytes
with zeroed padding), so that a derived type made of pairs and the predefined pair type
itself carry the same bytes.

Bounds follow MPICH: every constructor derives them from the bounds of its parts;
``Create_struct`` pads the extent to the largest alignment of its parts when the parts
are not all of one type; zero-length results are the empty type with all bounds 0.

The copy engine (:mod:`ipympi.core.typemap_copy`) turns the runs into numpy strided views or
fancy-index gathers; nothing here loops in Python over elements.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Union

from .extfloat import ExternalFloats
from .lazynumpy import np

__all__ = [
    "Ext32Part",
    "Layout",
    "Leaf",
    "Piece",
    "compose",
    "contiguous",
    "element_dtype",
    "hindexed",
    "hvector",
    "leaf_layout",
    "leaf_table",
    "leaves",
    "marker_layout",
    "register_leaf",
    "resized",
    "struct",
    "zerolen",
]

# An external32 part: a big-endian numpy dtype, or a conversion of long doubles.
# (Written as strings: numpy is imported when a typemap is first built, not before.)
Ext32Part = Union["np.dtype[Any]", ExternalFloats]


# --- Leaves ------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Leaf:
    """A predefined datatype seen as a basic element of typemaps.

    ``dtype`` is the numpy dtype of one leaf in packed form (itemsize ``packed``);
    ``parts`` its basic elements as (byte offset, numpy dtype), two for the pair types;
    ``ext32`` the big-endian numpy dtypes of those parts in the external32 representation
    (or, for long doubles, their conversion to IEEE binary128: an
    :class:`ipympi.core.extfloat.ExternalFloats`), or ``None`` when ipympi cannot convert
    the type. ``key`` groups leaves that MPICH
    treats as one type when deciding whether ``Create_struct`` pads (all 4-byte integers,
    for instance).
    """

    name: str
    dtype: np.dtype[Any]
    size: int
    align: int
    key: Hashable
    parts: tuple[tuple[int, np.dtype[Any]], ...]
    ext32: tuple[Ext32Part, ...] | None
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
# Per leaf id: packed bytes and number of basic elements (made again after a new leaf).
_TABLE: tuple[np.ndarray, np.ndarray] | None = None


def register_leaf(leaf: Leaf) -> int:
    """Add a leaf to the registry; return its id (used in type signatures)."""
    global _TABLE
    _LEAVES.append(leaf)
    _TABLE = None
    return len(_LEAVES) - 1


def leaves() -> Sequence[Leaf]:
    """The registered leaves, indexed by id."""
    return _LEAVES


def leaf_table() -> tuple[np.ndarray, np.ndarray]:
    """Per leaf id: bytes in packed form and number of basic elements (int64 arrays)."""
    global _TABLE
    table = _TABLE
    if table is None or len(table[0]) != len(_LEAVES):
        packed = np.array([leaf.packed for leaf in _LEAVES], dtype=np.int64)
        table = _TABLE = (packed, np.array([len(leaf.parts) for leaf in _LEAVES], dtype=np.int64))
    return table


# --- Layouts -----------------------------------------------------------------------------

Runs = tuple["np.ndarray", "np.ndarray", "np.ndarray"]
Sig = tuple["np.ndarray", "np.ndarray"]
# (child, block starts in bytes, block counts): a sequence of ints or an int64 array each.
Piece = tuple["Layout", Any, Any]
Pieces = Union[tuple[Piece, ...], Callable[[], tuple[Piece, ...]]]

_NO_LEAVES: frozenset[int] = frozenset()


@functools.cache
def _empty_runs() -> Runs:
    """The runs of an element without data (one array object, shared)."""
    none = np.zeros(0, dtype=np.int64)
    return (none, none, none)


@functools.cache
def _empty_sig() -> Sig:
    """The signature of an element without data."""
    return (np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int64))


class Layout:
    """One element of a datatype: scalars at once, arrays on demand (see module doc).

    Layouts are immutable once shared (a ``Dup`` shares its parent's). ``key``
    identifies "the same type" for struct padding: a leaf's key for predefined types, the
    layout itself otherwise. ``marker`` is -1/+1 for the MPI-1 bound markers ``LB``/``UB``.
    ``leaf_set`` holds the ids of the leaves in the signature, ``msg_ok`` whether all of
    them may describe message data.
    """

    __slots__ = (
        "_cache",
        "_pieces",
        "_runs",
        "_sig",
        "align",
        "data_hi",
        "data_lo",
        "key",
        "lb",
        "leaf_set",
        "marker",
        "msg_ok",
        "nelem",
        "packed",
        "size",
        "true_lb",
        "true_ub",
        "ub",
    )

    def __init__(
        self,
        size: int,
        packed: int,
        nelem: int,
        bounds: tuple[int, int, int, int],
        data: tuple[int, int],
        align: int,
        leaf_set: frozenset[int],
        msg_ok: bool = True,
        *,
        pieces: Pieces = (),
        runs: Runs | None = None,
        sig: Sig | None = None,
        key: Hashable | None = None,
        marker: int = 0,
    ) -> None:
        self.size = size
        self.packed = packed
        self.nelem = nelem
        self.lb, self.ub, self.true_lb, self.true_ub = bounds
        self.data_lo, self.data_hi = data
        self.align = align
        self.leaf_set = leaf_set
        self.msg_ok = msg_ok
        self._pieces = pieces
        self._runs = runs
        self._sig = sig
        self.key: Hashable = self if key is None else key
        self.marker = marker
        self._cache: dict[str, Any] = {}

    @property
    def extent(self) -> int:
        """``ub - lb``: the stride between consecutive elements."""
        return self.ub - self.lb

    @property
    def pieces(self) -> tuple[Piece, ...]:
        """The blocks of child layouts the typemap is made of (see module doc)."""
        pieces = self._pieces
        return pieces() if callable(pieces) else pieces

    @property
    def runs(self) -> Runs:
        """``(off, len, pos)``: the maximal byte runs of one element, built once."""
        runs = self._runs
        if runs is None:
            runs = self._runs = _build_runs(self) if self.packed else _empty_runs()
        return runs

    @property
    def off(self) -> np.ndarray:
        """Memory offset of each run, relative to the element's origin."""
        return self.runs[0]

    @property
    def len(self) -> np.ndarray:
        """Length of each run in bytes."""
        return self.runs[1]

    @property
    def pos(self) -> np.ndarray:
        """Position of each run in the packed form of the element."""
        return self.runs[2]

    @property
    def sig(self) -> Sig:
        """``(sig_leaf, sig_count)``: the run-length encoded type signature, built once."""
        sig = self._sig
        if sig is None:
            sig = self._sig = _build_sig(self) if self.packed else _empty_sig()
        return sig

    @property
    def sig_leaf(self) -> np.ndarray:
        """Leaf id of each signature entry."""
        return self.sig[0]

    @property
    def sig_count(self) -> np.ndarray:
        """Number of consecutive leaves of each signature entry."""
        return self.sig[1]

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
            self.packed == self.extent > 0
            and self.data_lo == self.lb
            and len(self.off) == 1
            and int(self.len[0]) == self.packed
        )

    @property
    def leaf_ids(self) -> tuple[int, ...]:
        """The distinct leaf ids of the signature, in increasing order."""
        return tuple(sorted(self.leaf_set))

    def __repr__(self) -> str:
        return (
            f"<Layout size={self.size} packed={self.packed} lb={self.lb} ub={self.ub} "
            f"true=({self.true_lb}, {self.true_ub})>"
        )


def leaf_layout(leaf_id: int, extent: int, true_extent: int) -> Layout:
    """The layout of a predefined datatype: one leaf at offset 0."""
    leaf = _LEAVES[leaf_id]
    off = np.array([p[0] for p in leaf.parts], dtype=np.int64)
    length = np.array([p[1].itemsize for p in leaf.parts], dtype=np.int64)
    runs = _merge(off, length, off.copy())
    return Layout(
        leaf.size,
        leaf.packed,
        len(leaf.parts),
        (0, extent, 0, true_extent),
        (int(runs[0][0]), int((runs[0] + runs[1]).max())),
        leaf.align,
        frozenset((leaf_id,)),
        leaf.msg_ok,
        runs=runs,
        sig=(np.array([leaf_id], dtype=np.int32), np.array([1], dtype=np.int64)),
        key=leaf.key,
    )


def zerolen(marker: int = 0) -> Layout:
    """The empty datatype: no data, all bounds 0 (a bound marker with ``marker``)."""
    key = ("marker", marker) if marker else None
    return Layout(
        0, 0, 0, (0, 0, 0, 0), (0, 0), 1, _NO_LEAVES, key=key, marker=marker,
    )  # fmt: skip


def marker_layout(marker: int) -> Layout:
    """The layout of the MPI-1 pseudo-type ``LB`` (-1) or ``UB`` (+1)."""
    return zerolen(marker)


# --- Assembling layouts from pieces --------------------------------------------------------

# A part is (child, lowest copy offset, highest copy offset, number of copies): what the
# scalars of a piece depend on, which each constructor computes in its own cheap way.
Part = tuple[Layout, int, int, int]


def compose(pieces: Pieces, parts: Sequence[Part]) -> Layout:
    """The layout whose typemap is ``pieces``, with scalars from their ``parts`` (at
    least one; offsets are Python ints).

    Bounds follow MPICH's block rule: a block spans its lowest and highest copy, so the
    bounds are the extreme copies' offsets plus the child's bounds. The data span only
    counts parts with data. This runs once per derived datatype, so it sticks to plain
    comparisons.
    """
    child, low, high, _ = parts[0]
    lb, ub = low + child.lb, high + child.ub
    tlb, tub = low + child.true_lb, high + child.true_ub
    dlo = dhi = 0
    size = packed = nelem = 0
    align = 1
    leaf_set = _NO_LEAVES
    msg_ok = True
    for child, low, high, copies in parts:
        if low + child.lb < lb:
            lb = low + child.lb
        if high + child.ub > ub:
            ub = high + child.ub
        if low + child.true_lb < tlb:
            tlb = low + child.true_lb
        if high + child.true_ub > tub:
            tub = high + child.true_ub
        if child.packed:
            if not packed or low + child.data_lo < dlo:
                dlo = low + child.data_lo
            if not packed or high + child.data_hi > dhi:
                dhi = high + child.data_hi
            size += child.size * copies
            packed += child.packed * copies
            nelem += child.nelem * copies
            if not child.leaf_set <= leaf_set:
                leaf_set = leaf_set | child.leaf_set
                msg_ok = msg_ok and child.msg_ok
        if child.align > align:
            align = child.align
    bounds = (lb, ub, tlb, tub)
    data = (dlo, dhi)
    return Layout(size, packed, nelem, bounds, data, align, leaf_set, msg_ok, pieces=pieces)


def _single(piece: Piece) -> bool:
    """Whether a piece is one copy of its child at offset 0 (the child's typemap)."""
    _, starts, counts = piece
    return len(starts) == 1 and starts[0] == 0 and counts[0] == 1


def _copies(counts: Any) -> int:
    return int(counts[0]) if len(counts) == 1 else int(np.sum(counts))


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


def _merge_sig(leaf: np.ndarray, count: np.ndarray) -> Sig:
    """Join adjacent signature entries of the same leaf."""
    if len(leaf) <= 1:
        return leaf, count
    same = leaf[1:] == leaf[:-1]
    if not same.any():
        return leaf, count
    starts = np.flatnonzero(np.concatenate(([True], ~same)))
    return leaf[starts], np.add.reduceat(count, starts)


def _piece_runs(child: Layout, starts: Any, counts: Any) -> Runs:
    """The runs (not yet merged) of blocks of ``counts[i]`` copies of ``child`` at
    ``starts[i]``, in packed positions from 0."""
    if len(starts) == 1 and counts[0] == 1:
        return child.off + int(starts[0]), child.len, child.pos
    starts, counts = np.asarray(starts, dtype=np.int64), np.asarray(counts, dtype=np.int64)
    ext = child.extent
    if child.dense and ext > 0:
        pos = np.concatenate(([0], np.cumsum(counts[:-1]))).astype(np.int64) * child.packed
        return starts + child.lb, counts * ext, pos
    total = int(counts.sum())
    first: np.ndarray = np.repeat(np.cumsum(counts) - counts, counts)
    disps = np.repeat(starts, counts) + (np.arange(total, dtype=np.int64) - first) * ext
    off = (disps[:, None] + child.off[None, :]).ravel()
    pos = (np.arange(total, dtype=np.int64)[:, None] * child.packed + child.pos[None, :]).ravel()
    return off, np.tile(child.len, total), pos


def _build_runs(layout: Layout) -> Runs:
    """The merged runs of a layout with data, from its pieces."""
    pieces = layout.pieces
    if len(pieces) == 1 and _single(pieces[0]):
        return pieces[0][0].runs
    offs, lens, poss = [], [], []
    shift = 0
    for child, starts, counts in pieces:
        if child.packed:
            off, length, pos = _piece_runs(child, starts, counts)
            offs.append(off)
            lens.append(length)
            poss.append(pos + shift if shift else pos)
            shift += child.packed * _copies(counts)
    if len(offs) == 1:
        return _merge(offs[0], lens[0], poss[0])
    return _merge(np.concatenate(offs), np.concatenate(lens), np.concatenate(poss))


def _build_sig(layout: Layout) -> Sig:
    """The merged signature of a layout with data, from its pieces."""
    pieces = layout.pieces
    if len(pieces) == 1 and _single(pieces[0]):
        return pieces[0][0].sig
    leaves_: list[np.ndarray] = []
    counts_: list[Any] = []
    for child, _, counts in pieces:
        if child.packed:
            leaf, count = child.sig
            copies = _copies(counts)
            if len(leaf) == 1:
                leaves_.append(leaf)
                counts_.append(count * copies)
            else:
                leaves_.append(np.tile(leaf, copies))
                counts_.append(np.tile(count, copies))
    return _merge_sig(np.concatenate(leaves_), np.concatenate(counts_))


def _array(values: Sequence[int] | np.ndarray) -> np.ndarray:
    return np.asarray(values, dtype=np.int64).reshape(-1)


def _span(copies: int, step: int) -> tuple[int, int]:
    """Lowest and highest of ``0, step, ..., (copies - 1) * step``."""
    last = (copies - 1) * step
    return min(last, 0), max(last, 0)


# --- Constructors ------------------------------------------------------------------------


def contiguous(child: Layout, count: int) -> Layout:
    """``count`` copies of ``child``, each one extent after the previous."""
    if count == 0 or child.size == 0:
        return zerolen()
    low, high = _span(count, child.extent)
    return compose(((child, (0,), (count,)),), ((child, low, high, count),))


def hvector(child: Layout, count: int, blocklength: int, stride: int) -> Layout:
    """``count`` blocks of ``blocklength`` copies, block starts ``stride`` bytes apart."""
    if count == 0 or child.size == 0:
        return zerolen()
    ext = child.extent
    if blocklength == 0:
        # No data, but MPICH still gives the type the bounds of its block grid.
        last = stride * (count - 1)
        if ext >= 0:
            lb, ub = child.lb + min(last, 0), child.ub - ext + max(last, 0)
        else:
            lb, ub = child.lb - ext + min(last, 0), child.ub + max(last, 0)
        bounds = (lb, ub, lb + child.true_lb - child.lb, ub + child.true_ub - child.ub)
        return Layout(0, 0, 0, bounds, (0, 0), child.align, _NO_LEAVES)
    block_low, block_high = _span(count, stride)
    low, high = _span(blocklength, ext)

    def pieces() -> tuple[Piece, ...]:
        starts = np.arange(count, dtype=np.int64) * stride
        return ((child, starts, np.full(count, blocklength, dtype=np.int64)),)

    part = (child, block_low + low, block_high + high, count * blocklength)
    return compose(pieces, (part,))


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
    last: np.ndarray = (counts - 1) * child.extent
    low = int((starts + np.minimum(last, 0)).min())
    high = int((starts + np.maximum(last, 0)).max())
    return compose(((child, starts, counts),), ((child, low, high, int(counts.sum())),))


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
    pieces: list[Piece] = []
    parts: list[Part] = []
    keys: set[Hashable] = set()
    lb_marks: list[int] = []
    ub_marks: list[int] = []
    for child, count, disp in zip(children, blocklengths, displacements):
        if count == 0:
            continue
        if child.marker:
            (lb_marks if child.marker < 0 else ub_marks).append(disp)
            continue
        if count == 1:
            parts.append((child, disp, disp, 1))
        else:
            low, high = _span(count, child.extent)
            parts.append((child, disp + low, disp + high, count))
        pieces.append((child, (disp,), (count,)))
        keys.add(child.key)
    if not parts:
        result = zerolen()
    else:
        result = compose(tuple(pieces), parts)
        extent = result.extent
        if len(keys) > 1 and extent > 0 and extent % result.align:
            result.ub += result.align - extent % result.align  # not shared yet
    if lb_marks or ub_marks:
        lb = min(lb_marks) if lb_marks else result.lb
        ub = max(ub_marks) if ub_marks else result.ub
        result = resized(result, lb, ub - lb)
    return result


def resized(child: Layout, lb: int, extent: int) -> Layout:
    """The same typemap with bounds ``lb`` and ``lb + extent``."""
    return Layout(
        child.size,
        child.packed,
        child.nelem,
        (lb, lb + extent, child.true_lb, child.true_ub),
        (child.data_lo, child.data_hi),
        child.align,
        child.leaf_set,
        child.msg_ok,
        pieces=((child, (0,), (1,)),),
    )


# --- Element types -----------------------------------------------------------------------


def element_dtype(layout: Layout) -> np.dtype[Any] | None:
    """The numpy dtype of the leaves when they are all alike, else None."""
    if "dtype" not in layout._cache:
        dtypes = {_LEAVES[int(i)].dtype for i in layout.leaf_ids}
        layout._cache["dtype"] = dtypes.pop() if len(dtypes) == 1 else None
    return layout._cache["dtype"]
