"""Reduction algorithms: reduce, allreduce, reduce-scatter, scan, exscan.

Values are combined with ``combine(left, right)``, where ``left`` always holds
the contributions of lower ranks, so non-commutative operations combine in
ascending rank order (invec on the left) as the standard requires. Partners
of a recursive-doubling round evaluate the same expression on the same
operands, which makes Allreduce bit-identical on every rank, also for floating
point.

* reduce: binomial tree (rooted at the root for commutative operations, at
  rank 0 then forwarded otherwise);
* allreduce: recursive doubling with the usual fold for p not a power of two
  (small), ring reduce-scatter + ring allgather for large commutative ones;
* reduce_scatter: reduce + scatter; scan/exscan: recursive doubling.

A :class:`Values` object hides whether values are numpy arrays (buffer calls),
Python numbers (one-element buffer calls, see :class:`ScalarValues`) or Python
objects (lower-case calls, moved as pickles).

Every round carries the rank's accumulator as ``Round.state`` (for scans, the
rank's prefix so far), updated once the round's received value is combined,
so traces can show each step's partial results.
"""

from __future__ import annotations

import functools
import pickle
import struct
from typing import Any, Callable, NamedTuple

from .lazynumpy import np
from .schedule import Algorithm, Round

__all__ = [
    "ArrayValues",
    "DoublingPlan",
    "ObjectValues",
    "ScalarValues",
    "Values",
    "allreduce_recursive_doubling",
    "allreduce_ring",
    "doubling_plan",
    "exscan_recursive_doubling",
    "reduce_binomial",
    "scan_recursive_doubling",
]


# (wire, decode, combine, nbytes): see Values
Codec = tuple[
    Callable[[Any], bytes], Callable[[memoryview], Any], Callable[[Any, Any], Any], "int | None"
]
# pickle.dumps at the highest protocol, as one C call
_dumps = functools.partial(pickle.dumps, protocol=pickle.HIGHEST_PROTOCOL)


class Values:
    """How an algorithm sends, receives and combines its values.

    ``nbytes`` is the size of every value on the wire when the kind fixes it
    (one element), else None; :meth:`decode` reads a value from its bytes for
    kinds that do not receive into arrays (the straight path, ``mpi.coll.fast``).
    Those kinds also have a ``codec``: (wire, decode, combine, nbytes) as the
    cheapest callables that do the same, for the straight path's rounds.
    """

    nbytes: int | None = None
    codec: Codec | None = None

    def wire(self, value: Any) -> Any:
        raise NotImplementedError

    def target(self, like: Any, reuse: Any = None) -> tuple[Any, memoryview | None]:
        """(holder, receive target) for a value shaped like ``like``."""
        raise NotImplementedError

    def received(self, op: Any, holder: Any) -> Any:
        raise NotImplementedError

    def decode(self, data: memoryview) -> Any:
        raise NotImplementedError

    def combine(self, left: Any, right: Any) -> Any:
        raise NotImplementedError


class ArrayValues(Values):
    """1-D numpy arrays combined in place with the op's vectorised kernel."""

    def __init__(
        self, reduce_arrays: Callable[[np.ndarray, np.ndarray, Any], None], datatype: Any
    ) -> None:
        """``reduce_arrays(invec, inoutvec, datatype)`` is the operation's array kernel."""
        self._reduce = reduce_arrays
        self._datatype = datatype

    def wire(self, value: np.ndarray) -> memoryview:
        return memoryview(value).cast("B") if value.size else memoryview(b"")  # type: ignore[arg-type]

    def target(
        self, like: np.ndarray, reuse: np.ndarray | None = None
    ) -> tuple[np.ndarray, memoryview]:
        """A receive array shaped like ``like`` (``reuse`` when given: large
        arrays are recycled across rounds, sparing fresh pages each time)."""
        arr = np.empty_like(like) if reuse is None else reuse
        return arr, (memoryview(arr).cast("B") if arr.size else memoryview(bytearray()))  # type: ignore[arg-type]

    def received(self, op: Any, holder: np.ndarray) -> np.ndarray:
        return holder

    def combine(self, left: np.ndarray, right: np.ndarray) -> np.ndarray:
        """``left op right``, computed into ``right`` (returned)."""
        self._reduce(left, right, self._datatype)
        return right


class ScalarValues(Values):
    """One element of a float64 or integer buffer, combined as a Python number.

    A numpy ufunc call costs about 3 µs even on one element, and three to four
    times that right after a rank wakes up for a message, which made the
    combining the largest part of a one-element Allreduce (a norm, a dot
    product, a residual: the most common one). The operation's scalar kernel
    gives exactly what its ufunc gives for these types: float64 arithmetic is
    IEEE double arithmetic either way, integer results are wrapped to the
    element's width as numpy wraps them, and ``MAX``/``MIN`` follow numpy's
    rules for NaN and ties. On the wire a value is the element's native bytes,
    as with :class:`ArrayValues`, so ranks may use either.
    """

    __slots__ = ("_mask", "_offset", "_pack", "_reduce", "_unpack", "codec", "nbytes")
    nbytes: int  # one element

    def __init__(self, reduce_scalars: Callable[[Any, Any], Any], dtype: np.dtype) -> None:
        self._reduce = reduce_scalars
        codec = struct.Struct(dtype.char)  # native sizes: the element's own bytes
        self._pack = codec.pack
        self._unpack = codec.unpack
        self.nbytes = dtype.itemsize
        bits = 8 * dtype.itemsize
        # integers: v -> ((v + offset) & mask) - offset wraps to the type's range
        self._mask = (1 << bits) - 1 if dtype.kind in "iu" else None
        self._offset = 1 << (bits - 1) if dtype.kind == "i" else 0
        combine = reduce_scalars if self._mask is None else self.combine
        self.codec = (self._pack, self.decode, combine, self.nbytes)

    @classmethod
    def for_array(
        cls, op_impl: Any, array: np.ndarray, out: np.ndarray | None
    ) -> ScalarValues | None:
        """Values for ``array`` if it is one native float64 or integer element, the
        receive buffer ``out`` (if any) has its type, and the operation has a scalar
        kernel; else None."""
        dtype = array.dtype
        reduce_scalars = op_impl.reduce_scalars
        if (
            array.size != 1
            or reduce_scalars is None
            or (out is not None and out.dtype != dtype)
            or not dtype.isnative
            or not (dtype.kind in "iu" or (dtype.kind == "f" and dtype.itemsize == 8))
        ):
            return None
        return _scalar_values(reduce_scalars, dtype)

    def wire(self, value: Any) -> bytes:
        return self._pack(value)

    def target(self, like: Any, reuse: Any = None) -> tuple[bytearray, memoryview]:
        holder = bytearray(self.nbytes)
        return holder, memoryview(holder)

    def received(self, op: Any, holder: bytearray) -> Any:
        return self.decode(memoryview(holder))

    def decode(self, data: memoryview) -> Any:
        return self._unpack(data)[0]

    def combine(self, left: Any, right: Any) -> Any:
        value = self._reduce(left, right)
        if self._mask is not None:
            value = ((value + self._offset) & self._mask) - self._offset
        return value


@functools.lru_cache(maxsize=64)
def _scalar_values(reduce_scalars: Callable[[Any, Any], Any], dtype: np.dtype) -> ScalarValues:
    """One (immutable) ScalarValues per operation and type."""
    return ScalarValues(reduce_scalars, dtype)


class ObjectValues(Values):
    """Python objects, moved as pickles, combined by ``op(left, right)``."""

    def __init__(self, reduce_objects: Callable[[Any, Any], Any]) -> None:
        self._reduce = reduce_objects
        self.codec = (_dumps, pickle.loads, reduce_objects, None)

    def wire(self, value: Any) -> bytes:
        return _dumps(value)

    def target(self, like: Any, reuse: Any = None) -> tuple[None, None]:
        return None, None

    def received(self, op: Any, holder: Any) -> Any:
        return pickle.loads(op.data)

    def decode(self, data: memoryview) -> Any:
        return pickle.loads(data)

    def combine(self, left: Any, right: Any) -> Any:
        return self._reduce(left, right)


# -- reduce ----------------------------------------------------------------------------
def reduce_binomial(
    rank: int, size: int, root: int, values: Values, value: Any, commutative: bool
) -> Algorithm:
    """Binomial reduction; returns the result at the root (None elsewhere).

    Relative rank r holds the combination of ranks r .. r + mask - 1 and
    receives the next block from r + mask, which is higher, so it goes on the
    right. For a commutative operation the tree is rooted at ``root``;
    otherwise at rank 0 (keeping rank order) and the result is forwarded.
    """
    base = root if commutative else 0
    rel = (rank - base) % size
    acc = value
    mask = 1
    while mask < size:
        if rel & mask:
            yield Round(
                "send partial result to parent",
                sends=[((rank - mask) % size, values.wire(acc))],
                state=acc,
            )
            acc = None
            break
        if rel + mask < size:
            holder, target = values.target(acc)
            rnd = Round(
                f"combine with subtree at distance {mask}",
                recvs=[((rank + mask) % size, target)],
                state=acc,
            )
            (op,) = yield rnd
            acc = values.combine(acc, values.received(op, holder))
            rnd.state = acc
        mask <<= 1
    if base == root:
        return acc if rank == root else None
    if rank == base:
        yield Round("forward result to root", sends=[(root, values.wire(acc))], state=acc)
        return None
    if rank == root:
        holder, target = values.target(value)
        rnd = Round("receive result from rank 0", recvs=[(base, target)])
        (op,) = yield rnd
        result = values.received(op, holder)
        rnd.state = result
        return result
    return None


# -- allreduce -------------------------------------------------------------------------
class DoublingPlan(NamedTuple):
    """Who a rank exchanges with in recursive doubling, for p = 2^k + r ranks.

    The first 2r ranks fold in pairs first: an even one sends its value to
    its odd neighbour (``fold_to``), which combines it (``fold_from``). The
    2^k remaining ranks exchange with each partner in turn (``partners``).
    Finally each odd folded rank sends the result back (``unfold_to``) to its
    even neighbour (``unfold_from``).
    """

    fold_to: int | None
    fold_from: int | None
    partners: tuple[int, ...]
    unfold_to: int | None
    unfold_from: int | None


@functools.lru_cache(maxsize=256)
def doubling_plan(rank: int, size: int) -> DoublingPlan:
    """The recursive-doubling schedule of ``rank`` among ``size`` ranks."""
    pof2 = 1 << (size.bit_length() - 1)
    rem = size - pof2
    folded = rank < 2 * rem
    if folded and rank % 2 == 0:
        return DoublingPlan(rank + 1, None, (), None, rank + 1)
    newrank = rank // 2 if folded else rank - rem
    partners = []
    mask = 1
    while mask < pof2:
        partner_new = newrank ^ mask
        partners.append(partner_new * 2 + 1 if partner_new < rem else partner_new + rem)
        mask <<= 1
    if folded:
        return DoublingPlan(None, rank - 1, tuple(partners), rank - 1, None)
    return DoublingPlan(None, None, tuple(partners), None, None)


def allreduce_recursive_doubling(rank: int, size: int, values: Values, value: Any) -> Algorithm:
    """Recursive doubling; with p = 2^k + r, the first 2r ranks fold in pairs first."""
    plan = doubling_plan(rank, size)
    acc = value
    if plan.fold_to is not None:
        yield Round(
            "fold: send to odd neighbour", sends=[(plan.fold_to, values.wire(acc))], state=acc
        )
    elif plan.fold_from is not None:
        holder, target = values.target(acc)
        rnd = Round(
            "fold: receive from even neighbour", recvs=[(plan.fold_from, target)], state=acc
        )
        (op,) = yield rnd
        acc = values.combine(values.received(op, holder), acc)
        rnd.state = acc
    spare = None  # the array not holding the result, reused for the next receive
    for distance, partner in enumerate(plan.partners):
        holder, target = values.target(acc, spare)
        rnd = Round(
            f"exchange at distance {1 << distance}",
            sends=[(partner, values.wire(acc))],
            recvs=[(partner, target)],
            state=acc,
        )
        (op,) = yield rnd
        other = values.received(op, holder)
        if partner < rank:
            acc, spare = values.combine(other, acc), other
        else:
            acc, spare = values.combine(acc, other), acc
        rnd.state = acc
    if plan.unfold_to is not None:
        yield Round(
            "unfold: send result to even neighbour",
            sends=[(plan.unfold_to, values.wire(acc))],
            state=acc,
        )
    elif plan.unfold_from is not None:
        holder, target = values.target(value)
        rnd = Round("unfold: receive result", recvs=[(plan.unfold_from, target)])
        (op,) = yield rnd
        acc = values.received(op, holder)
        rnd.state = acc
    return acc


def allreduce_ring(
    rank: int, size: int, values: ArrayValues, value: np.ndarray, own: np.ndarray | None = None
) -> Algorithm:
    """Large commutative allreduce: ring reduce-scatter, then ring allgather.

    ``value`` is a private array; the result is computed in it. With ``own`` (this
    rank's contribution, of ``value``'s size), ``value`` is only where the result goes
    (a receive buffer): every piece of ``own`` but this rank's is copied into it, and
    this rank's piece, which the first step sends and the allgather brings back
    combined, is sent from ``own``.

    Each rank sends and receives 2 (p-1)/p of the data; every piece is reduced
    on exactly one rank and then copied, so all ranks end bit-identical.
    """
    acc = value
    bounds = np.linspace(0, acc.size, size + 1).astype(int)
    scratch = np.empty(int(np.diff(bounds).max()), dtype=acc.dtype)
    right, left = (rank + 1) % size, (rank - 1) % size

    def piece(i: int) -> np.ndarray:
        return acc[bounds[i] : bounds[i + 1]]

    first = piece(rank)
    if own is not None:
        first = own[bounds[rank] : bounds[rank + 1]]
        for i in range(size):
            if i != rank:
                piece(i)[:] = own[bounds[i] : bounds[i + 1]]
    for step in range(size - 1):
        send_i, recv_i = (rank - step) % size, (rank - step - 1) % size
        holder, target = values.target(piece(recv_i), scratch[: piece(recv_i).size])
        yield Round(
            f"reduce-scatter step {step + 1}",
            sends=[(right, values.wire(piece(send_i) if step else first))],
            recvs=[(left, target)],
            state=acc,
        )
        values.combine(holder, piece(recv_i))
    for step in range(size - 1):
        send_i, recv_i = (rank - step + 1) % size, (rank - step) % size
        yield Round(
            f"allgather step {step + 1}",
            sends=[(right, values.wire(piece(send_i)))],
            recvs=[(left, values.wire(piece(recv_i)))],
            state=acc,
        )
    return acc


# -- scan / exscan -----------------------------------------------------------------------
def scan_recursive_doubling(rank: int, size: int, values: Values, value: Any) -> Algorithm:
    """Inclusive prefix: rank i gets ranks 0..i combined."""
    return (yield from _prefix(rank, size, values, value, inclusive=True))


def exscan_recursive_doubling(rank: int, size: int, values: Values, value: Any) -> Algorithm:
    """Exclusive prefix; rank 0 gets nothing (its receive buffer stays untouched)."""
    return (yield from _prefix(rank, size, values, value, inclusive=False))


def _prefix(rank: int, size: int, values: Values, value: Any, inclusive: bool) -> Algorithm:
    """Recursive doubling: after round k, ``partial`` covers the 2^(k+1) aligned ranks
    around this one and ``result`` the lower ones among them (and this one if inclusive).
    """
    result = _copy(values, value) if inclusive else None
    partial = value
    mask = 1
    while mask < size:
        partner = rank ^ mask
        if partner < size:
            holder, target = values.target(partial)
            rnd = Round(
                f"exchange at distance {mask}",
                sends=[(partner, values.wire(partial))],
                recvs=[(partner, target)],
                state=result,
            )
            (op,) = yield rnd
            other = values.received(op, holder)
            if partner < rank:
                result = other if result is None else values.combine(_copy(values, other), result)
                partial = values.combine(_copy(values, other), partial)
            else:
                partial = values.combine(_copy(values, partial), other)
            rnd.state = result
        mask <<= 1
    return result


def _copy(values: Values, value: Any) -> Any:
    """A private copy of an array value (combine writes into its right operand)."""
    return value.copy() if isinstance(values, ArrayValues) else value
