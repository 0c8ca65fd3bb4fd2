"""The accumulate lock of a window's targets, and the direct paths of the accumulates.

Every accumulate (``Accumulate``, ``Get_accumulate``, ``Fetch_and_op``,
``Compare_and_swap`` and their request forms) reads, combines and writes its target's
elements holding that target's accumulate lock (:class:`AccumulateLock`): one mutex per
target that all the window's ranks share (``progress.shmlock``, no system call when
free), or the window segment's ``fcntl`` byte ``n + target`` where the host has no
named semaphores. So operations on one target are atomic per element across ranks
(and threads) and applied in the order they are called.

The direct paths serve the frequent forms without parsing buffers: whole numpy
arrays of one native type, at an int displacement in memory this process addresses
(a shared segment, or its own memory), with an operation the general path already
checked on that type (:data:`CHECKED`, filled by ``win_ops``). One element of an
integer or float64 type is combined as a Python number with ``struct``
(:class:`~ipympi.core.reductions.ScalarValues`, exactly what the ufunc gives); larger
arrays with the operation's ufunc on views of the target. Anything else returns False
and takes the general path, with its errors.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Any

from ..core import constants as K
from ..core.lazynumpy import np
from ..core.reductions import ScalarValues
from .buffers import ndarray_datatype
from .datatype import Datatype
from .op import NO_OP, REPLACE, Op

if TYPE_CHECKING:
    from .winimpl import Target, WinImpl

__all__ = ["CHECKED", "AccumulateLock", "direct_accumulate", "direct_fetch", "direct_swap"]

# (op, origin type, target type) ids -> (op object, basic type) of checks that passed
CHECKED: dict[tuple[int, int, int], tuple[Any, Datatype]] = {}
# (op, dtype character) -> (op object, item size, basic type, how) for the pairs in
# CHECKED: how is a (struct codec, combine) pair to combine one element as a Python
# number (combine None: REPLACE; _KEEP: NO_OP), or None where the ufunc combines
_FAST: dict[tuple[int, str], tuple[Any, int, Datatype, Any]] = {}
_KEEP = object()
# element size -> the struct codec comparing elements bit for bit (Compare_and_swap)
_BITS = {1: struct.Struct("B"), 2: struct.Struct("H"), 4: struct.Struct("I"), 8: struct.Struct("Q")}


class AccumulateLock:
    """Holds target ``rank``'s accumulate lock (``with AccumulateLock(impl, rank):``)."""

    __slots__ = ("impl", "rank")

    def __init__(self, impl: WinImpl, rank: int) -> None:
        self.impl = impl
        self.rank = rank

    def __enter__(self) -> None:
        lock(self.impl, self.rank)

    def __exit__(self, *exc: Any) -> None:
        unlock(self.impl, self.rank)


def lock(impl: WinImpl, rank: int) -> None:
    """Take target ``rank``'s accumulate lock."""
    mutexes = impl.mutexes
    if mutexes is not None:
        mutexes.acquire(rank)
    elif impl.segment is not None:
        impl.segment.lock(impl.mutex_byte(rank), 1, True)


def unlock(impl: WinImpl, rank: int) -> None:
    """Give target ``rank``'s accumulate lock back."""
    mutexes = impl.mutexes
    if mutexes is not None:
        mutexes.release(rank)
    elif impl.segment is not None:
        impl.segment.unlock(impl.mutex_byte(rank), 1)


def _fast(op: Op, dtype: np.dtype[Any]) -> tuple[Any, int, Datatype, Any] | None:
    """``(op object, item size, basic type, how)`` of ``op`` on a native ``dtype`` the
    general path checked it on (:data:`CHECKED`), else None (see :data:`_FAST`)."""
    found = _FAST.get((id(op._impl), dtype.char))
    if found is not None and found[0] is op._impl and found[1] == dtype.itemsize:
        return found if dtype.isnative else None
    datatype = ndarray_datatype(dtype)  # None when not native
    known = None
    if datatype is not None:
        known = CHECKED.get((id(op._impl), id(datatype._impl), id(datatype._impl)))
    if known is None or known[0] is not op._impl:
        return None
    how: Any = None
    bits = _BITS.get(dtype.itemsize)
    if op._impl is REPLACE._impl:
        how = None if bits is None else (bits, None)
    elif op._impl is NO_OP._impl:
        how = None if bits is None else (bits, _KEEP)
    else:
        values = ScalarValues.for_array(op._impl, np.empty(1, dtype), None)
        if values is not None and values.codec is not None:
            how = (struct.Struct(dtype.char), values.codec[2])
    if len(_FAST) > 256:
        _FAST.clear()
    entry = _FAST[(id(op._impl), dtype.char)] = (op._impl, dtype.itemsize, known[1], how)
    return entry


def _offset(impl: WinImpl, where: Target, disp: Any, nbytes: int) -> int:
    """The byte offset of displacement ``disp`` in ``where``'s memory when ``nbytes``
    from there are in it and addressable here; -1 otherwise (the general path decides)."""
    if where.array is None or type(disp) is not int or disp < 0:
        return -1
    offset = disp * where.disp_unit
    if offset + nbytes > where.nbytes or impl.flavor == K.WIN_FLAVOR_DYNAMIC:
        return -1
    return offset


def _combine_one(
    impl: WinImpl, where: Target, offset: int, how: Any, origin: Any, result: Any
) -> None:
    """Combine one element at ``offset`` with ``origin``'s as Python numbers (``how``)
    under the target's accumulate lock; the old value into ``result`` (None: not
    wanted). Nothing but the combine happens while the lock is held."""
    codec, combine = how
    memory, rank = where.array, where.rank
    value = codec.unpack_from(origin)[0]
    lock(impl, rank)
    try:
        old = codec.unpack_from(memory, offset)[0]
        if combine is None:
            codec.pack_into(memory, offset, value)
        elif combine is not _KEEP:
            codec.pack_into(memory, offset, combine(value, old))
    finally:
        unlock(impl, rank)
    if result is not None:
        codec.pack_into(result, 0, old)


def _combine_many(
    impl: WinImpl, where: Target, offset: int, op: Op, basic: Datatype, origin: Any, result: Any
) -> None:
    """Combine ``origin``'s elements into the target's at ``offset`` with ``op``'s ufunc,
    in place, under the target's accumulate lock; the old contents into ``result``
    (None: not wanted)."""
    here = where.array[offset : offset + origin.nbytes]
    lock(impl, where.rank)
    try:
        if result is not None:
            result.reshape(-1).view(np.uint8)[:] = here
        if op._impl is REPLACE._impl:
            here[:] = origin.reshape(-1).view(np.uint8)
        elif op._impl is not NO_OP._impl:
            op._reduce_arrays(origin.reshape(-1), here.view(origin.dtype), basic)
    finally:
        unlock(impl, where.rank)


def direct_fetch(
    impl: WinImpl, where: Target, origin: Any, result: Any, disp: Any, op: Any
) -> bool:
    """``Fetch_and_op`` of one-element numpy arrays of one type (see the module
    docstring); False for anything else."""
    if type(origin) is not np.ndarray or type(result) is not np.ndarray or type(op) is not Op:
        return False
    # one element each (so contiguous), of one native type with a predefined datatype
    if origin.size != 1 or result.size != 1 or not origin.ndim or not result.ndim:
        return False
    if origin.dtype.char != result.dtype.char or not result.flags.writeable:
        return False
    return _apply(impl, where, origin, result, disp, op)


def direct_accumulate(
    impl: WinImpl, where: Target, origin: Any, result: Any, target: Any, op: Any
) -> bool:
    """``Accumulate`` (``result`` None) or ``Get_accumulate`` of whole numpy arrays of
    one type at ``target`` (None or an int displacement), see the module docstring;
    False for anything else."""
    if type(origin) is not np.ndarray or type(op) is not Op:
        return False
    size = origin.size  # one element is contiguous: no flags to build then
    if not size or not origin.ndim or (size != 1 and not origin.flags.c_contiguous):
        return False
    if result is not None:
        if type(result) is not np.ndarray or result.dtype.char != origin.dtype.char:
            return False
        if result.size != size or not result.ndim:
            return False
        flags = result.flags
        if not flags.writeable or (size != 1 and not flags.c_contiguous):
            return False
    return _apply(impl, where, origin, result, 0 if target is None else target, op)


def _apply(impl: WinImpl, where: Target, origin: Any, result: Any, disp: Any, op: Op) -> bool:
    """Combine ``origin`` (checked by the caller) into the target at ``disp``, ``result``
    (if not None) getting what was there: one element as a Python number where the
    operation and type allow, else with numpy; False if neither direct path applies."""
    fast = _fast(op, origin.dtype)
    offset = _offset(impl, where, disp, origin.nbytes)
    if fast is None or offset < 0:
        return False
    if fast[3] is not None and origin.size == 1:
        _combine_one(impl, where, offset, fast[3], origin, result)
    else:
        _combine_many(impl, where, offset, op, fast[2], origin, result)
    return True


def direct_swap(
    impl: WinImpl, where: Target, origin: Any, compare: Any, result: Any, disp: Any
) -> bool:
    """``Compare_and_swap`` of one-element numpy arrays of one type of 1, 2, 4 or 8
    bytes, compared bit for bit, in memory this process addresses; False for
    anything else."""
    if type(origin) is not np.ndarray or type(compare) is not np.ndarray:
        return False
    if type(result) is not np.ndarray or not result.flags.writeable:
        return False
    if origin.size != 1 or compare.size != 1 or result.size != 1:
        return False
    if not origin.ndim or not compare.ndim or not result.ndim:
        return False
    char = origin.dtype.char
    if compare.dtype.char != char or result.dtype.char != char:
        return False
    codec = _BITS.get(origin.itemsize)
    offset = _offset(impl, where, disp, origin.itemsize)
    if codec is None or offset < 0 or ndarray_datatype(origin.dtype) is None:
        return False
    source: Any = origin  # (any buffer)
    value = codec.unpack_from(source)[0]
    expected = codec.unpack_from(compare.data)[0]
    memory, rank = where.array, where.rank
    lock(impl, rank)
    try:
        old = codec.unpack_from(memory, offset)[0]
        if old == expected:
            codec.pack_into(memory, offset, value)
    finally:
        unlock(impl, rank)
    codec.pack_into(result.data, 0, old)
    return True
