"""Communication calls of windows: put, get, the accumulates and their request forms.

Each call checks its arguments and the epoch, then moves the data at once, so it is
complete when it returns (the request forms return completed requests). The origin's
buffer is any of mpi4py's forms; the target is ``target=disp``,
``(disp, count, datatype)`` (count and datatype default to the origin's), read in the
target's displacement units. Data moves between the origin's packed elements and the
target's memory described by the target datatype (``core.typemap_copy``): in the
shared segment or the rank's own memory with numpy copies, in another process's
memory with one ``process_vm_readv``/``writev`` call over the datatype's runs.

A window whose ranks span hosts (``impl.remote``) hands every data movement to
``win_remote``, which has the target apply it; the checks and errors are these.

Accumulates take the target's accumulate lock (``win_atomic``) for
the whole read-combine-write: operations on one target are atomic per element and
applied in the order they were called. Only the predefined operations, ``REPLACE``
and ``NO_OP`` are allowed (user operations are ``ERR_OP``, as the standard says).

While tracing is on (``progress.tracing.current``), each operation that moved data adds
one ``rma`` record: origin, target, window, call, operation, bytes and displacement.
When it is off, an operation pays one test of ``current``.
"""

from __future__ import annotations

import errno
import operator
import time
from typing import TYPE_CHECKING, Any

from ..core import constants as K
from ..core.errors import (
    ERR_COUNT,
    ERR_DISP,
    ERR_OP,
    ERR_OTHER,
    ERR_RANK,
    ERR_RMA_RANGE,
    ERR_RMA_SYNC,
    ERR_TYPE,
)
from ..core.errors import Exception as MPIException
from ..core.lazynumpy import np
from ..core.typemap import element_dtype
from ..core.typemap_copy import gather, runs, scatter
from ..progress import tracing
from ..progress.largebuf import remote_copy
from ..progress.operation import SEND, Operation
from . import datatype as _dt
from .buffers import (
    BufferSpec,
    data_span,
    datatype_of,
    ndarray_spec,
    recv_buffer,
    send_buffer,
)
from .datatype import Datatype
from .errhandling import mpi_call
from .op import NO_OP, REPLACE, SUM, Op
from .request import Request
from .win_atomic import CHECKED, AccumulateLock, direct_accumulate, direct_fetch, direct_swap

if TYPE_CHECKING:
    from .winimpl import Target, WinImpl

__all__ = ["WinOperations"]

_LEAVES: dict[int, Datatype] = {}
_CHECKED = CHECKED  # the checks that passed, which the direct paths rely on


def _basic(datatype: Datatype) -> Datatype | None:
    """The predefined datatype whose elements ``datatype`` is made of, if only one."""
    if datatype._impl.predefined:
        return datatype
    if not _LEAVES:
        for name in sorted(dir(_dt)):
            handle = getattr(_dt, name)
            if isinstance(handle, Datatype) and handle and handle._impl.predefined:
                leaves = handle._impl.layout.leaf_set
                if len(leaves) == 1:
                    _LEAVES.setdefault(next(iter(leaves)), handle)
    leaves = datatype._impl.layout.leaf_set
    return _LEAVES.get(next(iter(leaves))) if len(leaves) == 1 else None


def _np_dtype(datatype: Datatype) -> np.dtype[Any]:
    impl = datatype._impl
    found = impl.np_dtype if impl.predefined else element_dtype(impl.layout)
    if found is None:
        raise MPIException(ERR_TYPE, f"{datatype!r} has no numeric representation to combine")
    return found


def _target_spec(target: Any, origin: BufferSpec) -> tuple[int, int, Datatype]:
    """``(disp, count, datatype)`` of a target argument, defaults from the origin."""
    disp, count, datatype = 0, origin.count, origin.datatype
    if target is None:
        return disp, count, datatype
    if isinstance(target, (list, tuple)):
        if len(target) > 3:
            raise ValueError(f"target: expecting 3 items at most, got {len(target)}")
        items = list(target) + [None] * (3 - len(target))
        if items[0] is not None:
            disp = operator.index(items[0])
        if items[1] is not None:
            count = operator.index(items[1])
        if items[2] is not None:
            found = datatype_of(items[2])
            datatype = found if found is not None else datatype
        return disp, count, datatype
    try:
        return operator.index(target), count, datatype
    except TypeError:
        raise ValueError("target: expecting integral or list/tuple") from None


_now = time.perf_counter


def _traced(impl: WinImpl, region: _Region, call: str, op: Any, way: str, t0: float) -> None:
    """Record the operation ``call`` on ``region`` that started at ``t0`` (tracing on)."""
    if op is not None and op._impl is NO_OP._impl:
        way = "get"  # nothing combined: only the old contents move
    target = region.target
    record = impl.traced()
    record.update(
        target=impl.world_rank(target.rank),
        ctarget=target.rank,
        call=call,
        op=None if op is None else op._impl.key,
        dir=way,
        bytes=region.nbytes,
        disp=region.offset // target.disp_unit,
    )
    tracing.rma_op(record, t0)


def _done(win: Any, call: str, rank: int) -> Request:
    op = Operation(SEND, win._live().comm, call, rank, 0)
    op.complete_empty()
    return Request._of(op)


class _Region:
    """``count`` elements of ``datatype`` at byte ``offset`` of a target's memory."""

    __slots__ = ("count", "datatype", "layout", "nbytes", "offset", "target")

    def __init__(self, target: Target, offset: int, count: int, datatype: Datatype) -> None:
        self.target = target
        self.offset = offset
        self.count = count
        self.datatype = datatype
        self.layout = datatype._impl.layout
        self.nbytes = int(count * self.layout.packed)

    def direct(self) -> np.ndarray | None:
        """The target's bytes as a view of this process's memory, when the elements are
        one dense run this process can address (then combining happens in place)."""
        array, layout = self.target.array, self.layout
        if array is None or not layout.raw:
            return None
        start = self.offset + layout.lb
        return array[start : start + self.nbytes]

    def read(self, out: np.ndarray) -> None:
        """Copy the elements, packed, into ``out``."""
        target, layout, count = self.target, self.layout, self.count
        if not count or not layout.packed:
            return
        if target.array is not None:
            if layout.raw:
                start = self.offset + layout.lb
                out[: self.nbytes] = target.array[start : start + self.nbytes]
            else:
                gather(layout, target.array, self.offset, count, out)
            return
        self._remote(out, write=False)

    def write(self, packed: np.ndarray) -> None:
        """Store packed elements ``packed`` into the target's memory."""
        target, layout, count = self.target, self.layout, self.count
        if not count or not layout.packed:
            return
        if target.array is not None:
            if layout.raw:
                start = self.offset + layout.lb
                target.array[start : start + self.nbytes] = packed[: self.nbytes]
            else:
                scatter(layout, packed, 0, count, self.nbytes, target.array, self.offset)
            return
        self._remote(packed, write=True)

    def _remote(self, local: np.ndarray, write: bool) -> None:
        here = int(local.ctypes.data)
        there = self.target.base + self.offset
        if self.layout.raw:  # one dense run
            pieces = [(here, there + self.layout.lb, self.nbytes)]
        else:
            off, length, pos = runs(self.layout, self.count)
            pieces = [(here + int(p), there + int(o), int(n)) for o, n, p in zip(off, length, pos)]
        try:
            remote_copy(self.target.pid, pieces, write)
        except OSError as exc:
            if exc.errno == errno.EFAULT:
                raise MPIException(
                    ERR_RMA_RANGE,
                    f"the target's memory at {there:#x} is not attached to the window",
                ) from None
            raise MPIException(
                ERR_OTHER, f"cannot reach rank {self.target.rank}'s memory: {exc}"
            ) from None


def _direct(impl: WinImpl, where: Target, origin: Any, target: Any, put: bool) -> bool:
    """A Put (``put``) or Get of a whole numpy array in the common case of the buffer
    parser (:func:`~ipympi.mpi.buffers.ndarray_spec`) at a target displacement
    (``target``: None or an int) in memory this process addresses, done with one copy;
    False for anything else, which takes the general path (and its errors). The most
    frequent one-sided call, at a third less of its time."""
    if type(origin) is not np.ndarray or where.array is None:
        return False
    if target is None:
        offset = 0
    elif type(target) is int and target >= 0:
        offset = target * where.disp_unit
    else:
        return False
    spec = ndarray_spec(origin, not put)
    if spec is None or impl.flavor == K.WIN_FLAVOR_DYNAMIC:
        return False
    mine = spec.mem
    nbytes = mine.nbytes
    if not nbytes or offset + nbytes > where.nbytes:
        return False
    if put:
        where.array.data[offset : offset + nbytes] = mine
    else:
        mine[:] = where.array.data[offset : offset + nbytes]
    return True


def _packed(spec: BufferSpec) -> np.ndarray:
    if not spec.mem.nbytes:
        return np.zeros(0, np.uint8)
    return np.frombuffer(spec.mem, np.uint8)


class WinOperations:
    """The communication methods of ``MPI.Win``."""

    __slots__ = ()

    def _live(self) -> WinImpl:  # provided by Win
        raise NotImplementedError

    # -- checks -----------------------------------------------------------------------
    def _reach(self, impl: WinImpl, rank: Any, call: str) -> Target | None:
        """The target ``rank`` if this rank may access it now; None for ``PROC_NULL``."""
        rank = operator.index(rank)
        if rank == K.PROC_NULL:
            return None
        if not 0 <= rank < impl.size:
            raise MPIException(ERR_RANK, f"{call}: invalid target rank {rank}")
        if not (
            impl.fence
            or impl.lock_all
            or rank in impl.locks
            or (impl.access is not None and rank in impl.access)
        ):
            raise MPIException(
                ERR_RMA_SYNC,
                f"{call}: no access epoch to rank {rank} (call Fence, Start, Lock or Lock_all)",
            )
        return impl.targets[rank]

    def _region(
        self, impl: WinImpl, target: Target, disp: int, count: int, datatype: Datatype, call: str
    ) -> _Region:
        tinfo = datatype._impl
        if not datatype or not tinfo.committed or not tinfo.msg_ok:
            raise MPIException(ERR_TYPE, f"{call}: invalid target datatype {datatype!r}")
        if count < 0:
            raise MPIException(ERR_COUNT, f"{call}: negative target count {count}")
        dynamic = impl.flavor == K.WIN_FLAVOR_DYNAMIC
        if disp < 0 and not dynamic:
            raise MPIException(ERR_DISP, f"{call}: negative target displacement {disp}")
        offset = disp * target.disp_unit
        low, high = data_span(tinfo.layout, count)
        if not dynamic and count and (offset + low < 0 or offset + high > target.nbytes):
            raise MPIException(
                ERR_RMA_RANGE,
                f"{call}: bytes {offset + low} to {offset + high} are outside rank "
                f"{target.rank}'s window of {target.nbytes} bytes",
            )
        if dynamic and count and not self._attached(impl, target.rank, offset + low, offset + high):
            raise MPIException(
                ERR_RMA_RANGE,
                f"{call}: address {offset:#x} is not in a region rank {target.rank} attached",
            )
        return _Region(target, offset, count, datatype)

    @staticmethod
    def _attached(impl: WinImpl, rank: int, low: int, high: int) -> bool:
        """Whether rank ``rank`` of dynamic window ``impl`` has bytes ``[low, high)``
        attached, as far as this rank can tell (across hosts the target checks)."""
        if rank == impl.rank:
            return any(start <= low and high <= start + size for start, size, _ in impl.attached)
        table = impl.attach_table
        return table is None or table.covers(rank, low, high)

    @staticmethod
    def _same_size(origin: BufferSpec, region: _Region, call: str) -> None:
        have = origin.count * origin.datatype._impl.size
        if have != region.count * region.datatype._impl.size:
            raise MPIException(
                ERR_TYPE,
                f"{call}: the origin has {have} bytes of data, the target "
                f"{region.count * region.datatype._impl.size}",
            )

    @staticmethod
    def _check_op(op: Any, origin: Datatype, region: _Region, call: str) -> Datatype:
        key = (
            id(op._impl) if isinstance(op, Op) else 0,
            id(origin._impl),
            id(region.datatype._impl),
        )
        known = _CHECKED.get(key)
        if known is not None and known[0] is op._impl and region.count:
            return known[1]
        basic = WinOperations._check_op_slowly(op, origin, region, call)
        if region.count and basic._impl.predefined:
            if len(_CHECKED) > 256:
                _CHECKED.clear()
            _CHECKED[key] = (op._impl, basic)
        return basic

    @staticmethod
    def _check_op_slowly(op: Any, origin: Datatype, region: _Region, call: str) -> Datatype:
        if not isinstance(op, Op):
            raise TypeError(f"{call}: op must be an MPI.Op, not {type(op).__name__}")
        if not op or not op._is_predefined():
            raise MPIException(
                ERR_OP, f"{call}: only predefined operations are allowed in accumulates"
            )
        basic = _basic(region.datatype)
        if basic is None or (region.count and _basic(origin) not in (None, basic)):
            if region.count:
                raise MPIException(
                    ERR_TYPE, f"{call}: origin and target must be made of one predefined type"
                )
            return basic if basic is not None else origin
        if op != REPLACE and op != NO_OP and region.count:
            op._check_datatype(basic)
        return basic

    def _mutex(self, impl: WinImpl, target: Target) -> Any:
        return AccumulateLock(impl, target.rank)

    # -- put and get ------------------------------------------------------------------
    @mpi_call
    def Put(self, origin: Any, target_rank: int, target: Any = None) -> None:
        """Store the origin's data into ``target_rank``'s window."""
        self._put(origin, target_rank, target, "Put")

    def _put(self, origin: Any, target_rank: int, target: Any, call: str) -> None:
        t0 = _now() if tracing.current is not None else 0.0
        impl = self._live()
        where = self._reach(impl, target_rank, call)
        if where is None:  # PROC_NULL: the origin buffer is not read, as in mpi4py
            return
        if not t0 and _direct(impl, where, origin, target, True):
            return
        spec = send_buffer(origin)
        region = self._region(impl, where, *_target_spec(target, spec), call)
        self._same_size(spec, region, call)
        if impl.remote is not None:
            impl.remote.put(region, _packed(spec), call)
        else:
            region.write(_packed(spec))
        if t0:
            _traced(impl, region, call, None, "put", t0)

    @mpi_call
    def Get(self, origin: Any, target_rank: int, target: Any = None) -> None:
        """Load data from ``target_rank``'s window into the origin buffer."""
        self._get(origin, target_rank, target, "Get")

    def _get(self, origin: Any, target_rank: int, target: Any, call: str) -> None:
        t0 = _now() if tracing.current is not None else 0.0
        impl = self._live()
        where = self._reach(impl, target_rank, call)
        if where is None:  # PROC_NULL: the origin buffer is not read, as in mpi4py
            return
        if not t0 and _direct(impl, where, origin, target, False):
            return
        spec = recv_buffer(origin)
        region = self._region(impl, where, *_target_spec(target, spec), call)
        self._same_size(spec, region, call)
        if impl.remote is not None:
            impl.remote.get(region, _packed(spec), call)
        else:
            region.read(_packed(spec))
        if spec.unpack is not None:
            spec.unpack(spec.mem.nbytes)
        if t0:
            _traced(impl, region, call, None, "get", t0)

    # -- accumulates ------------------------------------------------------------------
    def _combine(
        self, region: _Region, basic: Datatype, op: Op, origin: np.ndarray, fetch: Any
    ) -> None:
        """Read-combine-write ``region`` with packed ``origin`` (holding its lock);
        ``fetch`` (a packed array or None) gets the old contents."""
        if not region.nbytes:
            return
        here = region.direct()
        if here is not None:  # in place, in memory this process addresses
            if fetch is not None:
                fetch[: region.nbytes] = here
            if op._impl is NO_OP._impl:
                return
            if op._impl is REPLACE._impl:
                here[:] = origin[: region.nbytes]
                return
            dtype = _np_dtype(basic)
            op._reduce_arrays(origin[: region.nbytes].view(dtype), here.view(dtype), basic)
            return
        old = np.empty(region.nbytes, np.uint8)
        region.read(old)
        if fetch is not None:
            fetch[: region.nbytes] = old
        if op == NO_OP:
            return
        if op == REPLACE:
            region.write(origin)
            return
        dtype = _np_dtype(basic)
        left = old.view(dtype)
        right = origin[: region.nbytes].copy().view(dtype)
        op._reduce_arrays(left, right, basic)
        region.write(right.view(np.uint8))

    def _accumulate(
        self, origin: Any, result: Any, target_rank: int, target: Any, op: Any, call: str
    ) -> None:
        t0 = _now() if tracing.current is not None else 0.0
        impl = self._live()
        where = self._reach(impl, target_rank, call)
        if where is None:  # PROC_NULL: no buffer is read, as in mpi4py
            return
        direct = not t0 and (result is not None or call == "Accumulate" or call == "Raccumulate")
        if direct and direct_accumulate(impl, where, origin, result, target, op):
            return
        fetching = result is not None or call.startswith(("Get", "Rget"))
        spec = send_buffer(origin)
        out = recv_buffer(result) if fetching else None
        if out is not None and op == NO_OP and spec.count == 0:
            spec = BufferSpec(spec.mem, out.count, out.datatype)
        region = self._region(impl, where, *_target_spec(target, spec), call)
        basic = self._check_op(op, spec.datatype, region, call)
        if op != NO_OP:
            self._same_size(spec, region, call)
        fetch = None
        if out is not None:
            self._same_size(out, region, call)
            fetch = _packed(out)
        if impl.remote is not None:
            impl.remote.combine(region, basic, op, _packed(spec), fetch, call)
        else:
            with self._mutex(impl, where):
                self._combine(region, basic, op, _packed(spec), fetch)
        if out is not None and out.unpack is not None:
            out.unpack(out.mem.nbytes)
        if t0:
            _traced(impl, region, call, op, "put" if out is None else "both", t0)

    @mpi_call
    def Accumulate(self, origin: Any, target_rank: int, target: Any = None, op: Op = SUM) -> None:
        """Combine the origin's data into ``target_rank``'s window with ``op``."""
        self._accumulate(origin, None, target_rank, target, op, "Accumulate")

    @mpi_call
    def Get_accumulate(
        self, origin: Any, result: Any, target_rank: int, target: Any = None, op: Op = SUM
    ) -> None:
        """``Accumulate``, fetching the target's previous contents into ``result``."""
        self._accumulate(origin, result, target_rank, target, op, "Get_accumulate")

    @staticmethod
    def _single(spec: BufferSpec, what: str, like: BufferSpec | None) -> None:
        if spec.count != 1:
            raise ValueError(f"{what}: expecting a single element, got {spec.count}")
        if like is not None and spec.datatype != like.datatype:
            raise ValueError(f"{what}: mismatch in origin and {what} MPI datatypes")

    @mpi_call
    def Fetch_and_op(
        self, origin: Any, result: Any, target_rank: int, target_disp: int = 0, op: Op = SUM
    ) -> None:
        """Combine one element into the target with ``op``, fetching its old value."""
        t0 = _now() if tracing.current is not None else 0.0
        impl = self._live()
        where = self._reach(impl, target_rank, "Fetch_and_op")
        if where is None:  # PROC_NULL: no buffer is read, as in mpi4py
            return
        if not t0 and direct_fetch(impl, where, origin, result, target_disp, op):
            return
        spec = send_buffer(origin)
        out = recv_buffer(result)
        self._single(spec, "origin", None)
        self._single(out, "result", spec)
        disp = operator.index(target_disp)
        region = self._region(impl, where, disp, 1, spec.datatype, "Fetch_and_op")
        basic = self._check_op(op, spec.datatype, region, "Fetch_and_op")
        if impl.remote is not None:
            impl.remote.combine(region, basic, op, _packed(spec), _packed(out), "Fetch_and_op")
        else:
            with self._mutex(impl, where):
                self._combine(region, basic, op, _packed(spec), _packed(out))
        if out.unpack is not None:
            out.unpack(out.mem.nbytes)
        if t0:
            _traced(impl, region, "Fetch_and_op", op, "both", t0)

    @mpi_call
    def Compare_and_swap(
        self, origin: Any, compare: Any, result: Any, target_rank: int, target_disp: int = 0
    ) -> None:
        """Replace one target element by the origin's if it equals ``compare``;
        ``result`` gets the old value."""
        t0 = _now() if tracing.current is not None else 0.0
        impl = self._live()
        where = self._reach(impl, target_rank, "Compare_and_swap")
        if where is None:  # PROC_NULL: no buffer is read, as in mpi4py
            return
        if not t0 and direct_swap(impl, where, origin, compare, result, target_disp):
            return
        spec = send_buffer(origin)
        cmp = send_buffer(compare)
        out = recv_buffer(result)
        self._single(spec, "origin", None)
        self._single(cmp, "compare", spec)
        self._single(out, "result", spec)
        disp = operator.index(target_disp)
        region = self._region(impl, where, disp, 1, spec.datatype, "Compare_and_swap")
        fetch = _packed(out)
        if impl.remote is not None:
            impl.remote.compare_and_swap(
                region, _packed(cmp), _packed(spec), fetch, "Compare_and_swap"
            )
            if t0:
                _traced(impl, region, "Compare_and_swap", None, "both", t0)
            return
        with self._mutex(impl, where):
            old = np.empty(region.nbytes, np.uint8)
            region.read(old)
            fetch[: region.nbytes] = old
            if bytes(old) == bytes(_packed(cmp)[: region.nbytes]):
                region.write(_packed(spec))
        if t0:
            _traced(impl, region, "Compare_and_swap", None, "both", t0)

    # -- request forms ----------------------------------------------------------------
    @mpi_call
    def Rput(self, origin: Any, target_rank: int, target: Any = None) -> Request:
        """``Put`` returning a request (complete at once)."""
        self._put(origin, target_rank, target, "Rput")
        return _done(self, "Rput", target_rank)

    @mpi_call
    def Rget(self, origin: Any, target_rank: int, target: Any = None) -> Request:
        """``Get`` returning a request (complete at once)."""
        self._get(origin, target_rank, target, "Rget")
        return _done(self, "Rget", target_rank)

    @mpi_call
    def Raccumulate(
        self, origin: Any, target_rank: int, target: Any = None, op: Op = SUM
    ) -> Request:
        """``Accumulate`` returning a request (complete at once)."""
        self._accumulate(origin, None, target_rank, target, op, "Raccumulate")
        return _done(self, "Raccumulate", target_rank)

    @mpi_call
    def Rget_accumulate(
        self, origin: Any, result: Any, target_rank: int, target: Any = None, op: Op = SUM
    ) -> Request:
        """``Get_accumulate`` returning a request (complete at once)."""
        self._accumulate(origin, result, target_rank, target, op, "Rget_accumulate")
        return _done(self, "Rget_accumulate", target_rank)
