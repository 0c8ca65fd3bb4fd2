"""Data access of ``MPI.File`` (MPI-4.1 §14.4): the three positionings (explicit
offsets, individual and shared file pointers), blocking, nonblocking and split
collective, independent and collective; plus views, seeking and positions.

Each rank moves its own bytes (:mod:`~ipympi.mpi.file_move`), except in the blocking
collectives (``Write_all``, ``Read_at_all``, split collectives...), where ranks whose
accesses interleave go through aggregators (two-phase I/O,
:mod:`~ipympi.mpi.file_collective`). Nonblocking calls complete at once and return a
completed request (the nonblocking collectives as independent accesses: they must not
wait for the other ranks). The shared file pointer is a fetch-and-add on
the file's side record; ordered accesses take their places from an allgather of the
ranks' sizes on the file's private communicator, so a rank that fails first still takes
part and no rank waits for it.
"""

from __future__ import annotations

import operator
import os
from typing import Any, Callable

from ..core import errors as E
from ..core.constants import (
    ANY_SOURCE,
    ANY_TAG,
    DISPLACEMENT_CURRENT,
    MODE_RDONLY,
    MODE_RDWR,
    MODE_SEQUENTIAL,
    MODE_WRONLY,
    SEEK_CUR,
    SEEK_END,
    SEEK_SET,
)
from ..core.errors import Exception as MPIException
from ..core.lazynumpy import np
from ..progress.operation import RECV, Operation
from .datatype import BYTE, Datatype
from .errhandling import mpi_call
from .file_collective import collective_transfer
from .file_move import Access, Start, transfer
from .file_view import make_view, returned, type_extent
from .request import Request

__all__ = ["FileAccess"]


def _check(impl: Any, write: bool, call: str, positioned: bool = False) -> None:
    if write and not impl.amode & (MODE_WRONLY | MODE_RDWR):
        raise MPIException(E.ERR_READ_ONLY, f"{call}: the file was opened MODE_RDONLY")
    if not write and not impl.amode & (MODE_RDONLY | MODE_RDWR):
        raise MPIException(E.ERR_ACCESS, f"{call}: the file was opened MODE_WRONLY")
    if positioned and impl.amode & MODE_SEQUENTIAL:
        raise MPIException(
            E.ERR_UNSUPPORTED_OPERATION, f"{call}: a MODE_SEQUENTIAL file has no file pointer"
        )


def _status(status: Any, nbytes: int) -> None:
    if status is not None:
        status._set(ANY_SOURCE, ANY_TAG, nbytes)


class FileAccess:
    """The data-access methods of ``MPI.File`` (a mixin; ``self._live()`` is the file)."""

    __slots__ = ()
    _live: Callable[..., Any]

    # -- positioning helpers ---------------------------------------------------------------
    def _explicit(self, offset: Any) -> Start:
        offset = operator.index(offset)
        return lambda n: offset

    def _individual(self, impl: Any) -> Start:
        return lambda n: impl.pos

    def _shared(self, impl: Any) -> Start:
        return impl.shared.add

    def _run(
        self, write: bool, buf: Any, how: str, offset: Any, call: str, collective: bool = False
    ) -> int:
        """One access; ``how`` is ``at``, ``ind``, ``shared`` or ``ordered``;
        ``collective``: a blocking collective (every rank of the file calls it)."""
        impl = self._live()
        if how == "ordered":
            return self._ordered(impl, write, buf, call)
        if collective and impl.strided:

            def prepare() -> Access:
                _check(impl, write, call, positioned=True)
                start = self._explicit(offset) if how == "at" else self._individual(impl)
                return Access(impl, write, buf, start, call)

            nbytes, etypes = collective_transfer(impl, write, prepare, call)
            if how == "ind":
                impl.pos += etypes
            return nbytes
        _check(impl, write, call, positioned=how != "shared")
        if how == "at":
            return transfer(impl, write, buf, self._explicit(offset), call)[0]
        if how == "shared":
            return transfer(impl, write, buf, self._shared(impl), call)[0]
        nbytes, etypes = transfer(impl, write, buf, self._individual(impl), call)
        impl.pos += etypes  # the etypes asked for, as MPICH counts them
        return nbytes

    def _ordered(self, impl: Any, write: bool, buf: Any, call: str) -> int:
        """Ordered access: rank order from the shared pointer; every rank takes part in
        the placement even when its own call is wrong."""
        joined = [False]
        comm = impl.comm

        def place(n: int) -> int:
            joined[0] = True
            if impl.size == 1:
                return impl.shared.add(n)
            sizes = comm.allgather(n)
            base = impl.shared.add(sum(sizes)) if impl.rank == 0 else None
            base = comm.bcast(base, 0)
            return base + sum(sizes[: impl.rank])

        try:
            _check(impl, write, call)
            return transfer(impl, write, buf, place, call)[0]
        except BaseException:
            if not joined[0]:
                place(0)
            raise

    # -- explicit offsets ------------------------------------------------------------------
    @mpi_call
    def Read_at(self, offset: int, buf: Any, status: Any = None) -> None:
        _status(status, self._run(False, buf, "at", offset, "Read_at"))

    @mpi_call
    def Read_at_all(self, offset: int, buf: Any, status: Any = None) -> None:
        _status(status, self._run(False, buf, "at", offset, "Read_at_all", collective=True))

    @mpi_call
    def Write_at(self, offset: int, buf: Any, status: Any = None) -> None:
        _status(status, self._run(True, buf, "at", offset, "Write_at"))

    @mpi_call
    def Write_at_all(self, offset: int, buf: Any, status: Any = None) -> None:
        _status(status, self._run(True, buf, "at", offset, "Write_at_all", collective=True))

    @mpi_call
    def Iread_at(self, offset: int, buf: Any) -> Request:
        return self._done(self._run(False, buf, "at", offset, "Iread_at"), "Iread_at")

    @mpi_call
    def Iread_at_all(self, offset: int, buf: Any) -> Request:
        return self._done(self._run(False, buf, "at", offset, "Iread_at_all"), "Iread_at_all")

    @mpi_call
    def Iwrite_at(self, offset: int, buf: Any) -> Request:
        return self._done(self._run(True, buf, "at", offset, "Iwrite_at"), "Iwrite_at")

    @mpi_call
    def Iwrite_at_all(self, offset: int, buf: Any) -> Request:
        return self._done(self._run(True, buf, "at", offset, "Iwrite_at_all"), "Iwrite_at_all")

    # -- individual file pointer -----------------------------------------------------------
    @mpi_call
    def Read(self, buf: Any, status: Any = None) -> None:
        _status(status, self._run(False, buf, "ind", None, "Read"))

    @mpi_call
    def Read_all(self, buf: Any, status: Any = None) -> None:
        _status(status, self._run(False, buf, "ind", None, "Read_all", collective=True))

    @mpi_call
    def Write(self, buf: Any, status: Any = None) -> None:
        _status(status, self._run(True, buf, "ind", None, "Write"))

    @mpi_call
    def Write_all(self, buf: Any, status: Any = None) -> None:
        _status(status, self._run(True, buf, "ind", None, "Write_all", collective=True))

    @mpi_call
    def Iread(self, buf: Any) -> Request:
        return self._done(self._run(False, buf, "ind", None, "Iread"), "Iread")

    @mpi_call
    def Iread_all(self, buf: Any) -> Request:
        return self._done(self._run(False, buf, "ind", None, "Iread_all"), "Iread_all")

    @mpi_call
    def Iwrite(self, buf: Any) -> Request:
        return self._done(self._run(True, buf, "ind", None, "Iwrite"), "Iwrite")

    @mpi_call
    def Iwrite_all(self, buf: Any) -> Request:
        return self._done(self._run(True, buf, "ind", None, "Iwrite_all"), "Iwrite_all")

    # -- shared file pointer ---------------------------------------------------------------
    @mpi_call
    def Read_shared(self, buf: Any, status: Any = None) -> None:
        _status(status, self._run(False, buf, "shared", None, "Read_shared"))

    @mpi_call
    def Write_shared(self, buf: Any, status: Any = None) -> None:
        _status(status, self._run(True, buf, "shared", None, "Write_shared"))

    @mpi_call
    def Iread_shared(self, buf: Any) -> Request:
        return self._done(self._run(False, buf, "shared", None, "Iread_shared"), "Iread_shared")

    @mpi_call
    def Iwrite_shared(self, buf: Any) -> Request:
        return self._done(self._run(True, buf, "shared", None, "Iwrite_shared"), "Iwrite_shared")

    @mpi_call
    def Read_ordered(self, buf: Any, status: Any = None) -> None:
        _status(status, self._run(False, buf, "ordered", None, "Read_ordered"))

    @mpi_call
    def Write_ordered(self, buf: Any, status: Any = None) -> None:
        _status(status, self._run(True, buf, "ordered", None, "Write_ordered"))

    # -- split collectives -----------------------------------------------------------------
    def _begin(self, write: bool, how: str, offset: Any, buf: Any, call: str) -> None:
        impl = self._live()
        if impl.split is not None:
            raise MPIException(E.ERR_OTHER, f"{call}: {impl.split[0]} is still active")
        nbytes = self._run(write, buf, how, offset, call, collective=how != "ordered")
        impl.split = (call, nbytes)

    def _end(self, begun: str, status: Any, call: str) -> None:
        impl = self._live()
        if impl.split is None or impl.split[0] != begun:
            raise MPIException(E.ERR_OTHER, f"{call}: no matching {begun}")
        _status(status, impl.split[1])
        impl.split = None

    @mpi_call
    def Read_at_all_begin(self, offset: int, buf: Any) -> None:
        self._begin(False, "at", offset, buf, "Read_at_all_begin")

    @mpi_call
    def Read_at_all_end(self, buf: Any, status: Any = None) -> None:
        self._end("Read_at_all_begin", status, "Read_at_all_end")

    @mpi_call
    def Write_at_all_begin(self, offset: int, buf: Any) -> None:
        self._begin(True, "at", offset, buf, "Write_at_all_begin")

    @mpi_call
    def Write_at_all_end(self, buf: Any, status: Any = None) -> None:
        self._end("Write_at_all_begin", status, "Write_at_all_end")

    @mpi_call
    def Read_all_begin(self, buf: Any) -> None:
        self._begin(False, "ind", None, buf, "Read_all_begin")

    @mpi_call
    def Read_all_end(self, buf: Any, status: Any = None) -> None:
        self._end("Read_all_begin", status, "Read_all_end")

    @mpi_call
    def Write_all_begin(self, buf: Any) -> None:
        self._begin(True, "ind", None, buf, "Write_all_begin")

    @mpi_call
    def Write_all_end(self, buf: Any, status: Any = None) -> None:
        self._end("Write_all_begin", status, "Write_all_end")

    @mpi_call
    def Read_ordered_begin(self, buf: Any) -> None:
        self._begin(False, "ordered", None, buf, "Read_ordered_begin")

    @mpi_call
    def Read_ordered_end(self, buf: Any, status: Any = None) -> None:
        self._end("Read_ordered_begin", status, "Read_ordered_end")

    @mpi_call
    def Write_ordered_begin(self, buf: Any) -> None:
        self._begin(True, "ordered", None, buf, "Write_ordered_begin")

    @mpi_call
    def Write_ordered_end(self, buf: Any, status: Any = None) -> None:
        self._end("Write_ordered_begin", status, "Write_ordered_end")

    def _done(self, nbytes: int, call: str) -> Request:
        """A completed request reporting ``nbytes``."""
        op = Operation(RECV, self, call, ANY_SOURCE, ANY_TAG)
        op.count = nbytes
        op.complete()
        return Request._of(op)

    # -- views -----------------------------------------------------------------------------
    @mpi_call
    def Set_view(
        self,
        disp: int = 0,
        etype: Datatype = BYTE,
        filetype: Datatype | None = None,
        datarep: str = "native",
        info: Any = None,
    ) -> None:
        """Set the view (collective); both file pointers go back to 0."""
        impl = self._live()
        disp = operator.index(disp)
        if disp == DISPLACEMENT_CURRENT:
            if not impl.amode & MODE_SEQUENTIAL:
                raise MPIException(
                    E.ERR_ARG, "Set_view: DISPLACEMENT_CURRENT needs MODE_SEQUENTIAL"
                )
            disp = impl.view.tiling.byte_offset(impl.shared.add(0) * impl.view.esize)
        impl.view = make_view(disp, etype, filetype, datarep)
        impl.pos = 0
        if impl.size > 1:
            # Collective accesses can interleave only where a view has holes: then (and
            # only then) they ask the others how they look (see file_collective). The
            # allgather is also the barrier before the shared pointer's reset.
            holes = impl.comm.allgather(not impl.view.tiling.dense)
            impl.strided = any(holes)
        self._reset_shared(impl, 0, arrived=True)

    def _reset_shared(
        self, impl: Any, value: int | None, whence: int = SEEK_SET, arrived: bool = False
    ) -> None:
        """Set the shared pointer (collective; ``arrived``: every rank is known to have
        called already)."""
        if impl.size > 1 and not arrived:
            impl.comm.Barrier()
        if impl.rank == 0:
            if whence == SEEK_CUR:
                value = impl.shared.add(0) + (value or 0)
            elif whence == SEEK_END:
                value = _end_etypes(impl) + (value or 0)
            impl.shared.set(max(0, value or 0))
        if impl.size > 1:
            impl.comm.Barrier()

    @mpi_call
    def Get_view(self) -> tuple[int, Datatype, Datatype, str]:
        view = self._live().view
        return view.disp, returned(view.etype), returned(view.filetype), view.datarep

    @mpi_call
    def Get_type_extent(self, datatype: Datatype) -> int:
        """The extent of ``datatype`` in the file's data representation."""
        return type_extent(datatype, self._live().view.datarep)

    # -- positions -------------------------------------------------------------------------
    @mpi_call
    def Seek(self, offset: int, whence: int = SEEK_SET) -> None:
        """Move the individual file pointer (in etypes of the view)."""
        impl = self._live()
        _check_seek(impl, "Seek")
        offset = operator.index(offset)
        base = {SEEK_SET: 0, SEEK_CUR: impl.pos}.get(whence)
        if base is None:
            if whence != SEEK_END:
                raise MPIException(E.ERR_ARG, f"Seek: invalid whence {whence}")
            base = _end_etypes(impl)
        if base + offset < 0:
            raise MPIException(E.ERR_ARG, f"Seek: position {base + offset} is negative")
        impl.pos = base + offset

    @mpi_call
    def Get_position(self) -> int:
        return int(self._live().pos)

    @mpi_call
    def Get_byte_offset(self, offset: int) -> int:
        """The file byte where etype ``offset`` of the view is."""
        view = self._live().view
        return view.tiling.byte_offset(operator.index(offset) * view.esize)

    @mpi_call
    def Seek_shared(self, offset: int, whence: int = SEEK_SET) -> None:
        """Move the shared file pointer (collective)."""
        impl = self._live()
        offset = operator.index(offset)
        if whence not in (SEEK_SET, SEEK_CUR, SEEK_END):
            raise MPIException(E.ERR_ARG, f"Seek_shared: invalid whence {whence}")
        self._reset_shared(impl, offset, whence)

    @mpi_call
    def Get_position_shared(self) -> int:
        return int(self._live().shared.add(0))


def _check_seek(impl: Any, call: str) -> None:
    if impl.amode & MODE_SEQUENTIAL:
        raise MPIException(
            E.ERR_UNSUPPORTED_OPERATION, f"{call}: a MODE_SEQUENTIAL file has no file pointer"
        )


def _end_etypes(impl: Any) -> int:
    """The number of etypes of the view that lie before the end of the file."""
    tiling, esize = impl.view.tiling, impl.view.esize
    end = os.fstat(impl.fd).st_size - tiling.disp
    if end <= 0 or tiling.size == 0:
        return 0
    full, rest = divmod(end, tiling.extent) if tiling.extent > 0 else (0, end)
    part = np.clip(rest - tiling.off, 0, tiling.length).sum()
    return int((full * tiling.size + int(part)) // esize)
