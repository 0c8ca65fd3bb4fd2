"""One rank's data access of ``MPI.File``: planned (:class:`Access`) and moved with its
own system calls (:func:`move`).

An access turns the message into the file's bytes (:mod:`~ipympi.mpi.file_view`), maps
its range of the view's visible bytes to merged file segments
(:class:`~ipympi.core.fileview.Tiling`) and moves them with ``os.pwrite``/``os.preadv``
on the rank's own descriptor, with no copy for native data; in atomic mode under a
byte-range lock. Collective accesses may move the planned bytes through aggregators
instead (:mod:`~ipympi.mpi.file_collective`).
"""

from __future__ import annotations

import fcntl
import os
import time
from typing import Any, Callable

from ..core import errors as E
from ..core.errors import Exception as MPIException
from ..core.lazynumpy import np
from ..progress import tracing
from .buffers import recv_buffer, send_buffer
from .file_view import os_error

__all__ = ["Access", "Start", "move", "traced", "transfer"]

Start = Callable[[int], int]  # etypes to access -> starting position (etypes)


def _write_segments(fd: int, data: memoryview, offs: np.ndarray, lens: np.ndarray) -> None:
    pos = 0
    for off, length in zip(offs.tolist(), lens.tolist()):
        done = 0
        while done < length:
            done += os.pwrite(fd, data[pos + done : pos + length], off + done)
        pos += length


def _read_segments(fd: int, target: memoryview, offs: np.ndarray, lens: np.ndarray) -> int:
    pos = 0
    for off, length in zip(offs.tolist(), lens.tolist()):
        done = 0
        while done < length:
            got = os.preadv(fd, [target[pos + done : pos + length]], off + done)
            if got == 0:
                return pos + done
            done += got
        pos += length
    return pos


class Access:
    """One rank's part of a data access, planned: its message, the file bytes it
    touches (``offs``/``lens``, in stream order) and the bytes that move: for a write
    the file's form of the message (``data``), for a read where the file's bytes land
    (``target``: the message's memory for native data, else a buffer to convert)."""

    __slots__ = ("count", "data", "datatype", "etypes", "fbytes", "lens", "native", "offs",
                 "spec", "target", "write")  # fmt: skip

    def __init__(self, impl: Any, write: bool, buf: Any, start: Start, call: str) -> None:
        self.write = write
        spec = self.spec = send_buffer(buf) if write else recv_buffer(buf)
        view = impl.view
        count, datatype = self.count, self.datatype = spec.count, spec.datatype
        fbytes = self.fbytes = count * view.file_size(datatype) if count else 0
        if fbytes % view.esize:
            raise MPIException(E.ERR_TYPE, f"{call}: the message is not a whole number of etypes")
        self.etypes = fbytes // view.esize
        first = start(self.etypes)
        if first < 0:
            raise MPIException(E.ERR_ARG, f"{call}: negative offset {first}")
        self.offs, self.lens = view.tiling.segments(first * view.esize, fbytes)
        if fbytes and int(self.offs.min()) < 0:
            raise MPIException(E.ERR_ARG, f"{call}: the view reaches before the file's start")
        self.native = view.datarep in ("native", "internal")
        if write:
            self.data = view.to_file(spec.mem, datatype, count)
            self.target = memoryview(b"")
        else:
            self.data = memoryview(b"")
            self.target = spec.mem if self.native else memoryview(bytearray(fbytes))

    def finish(self, impl: Any, got: int) -> int:
        """After the file's bytes moved (``got`` of them, for a read): the bytes of
        memory the message moved; a read's data converted and unpacked."""
        if self.write:
            return int(self.spec.mem.nbytes)
        if self.native:
            nbytes = got
        else:
            view, datatype = impl.view, self.datatype
            per = view.file_size(datatype)
            whole = got // per if per else 0
            nbytes = whole * datatype._impl.layout.packed
            data = np.frombuffer(self.target, dtype=np.uint8)[: whole * per]
            view.from_file(data, datatype, whole, self.spec.mem[:nbytes])
        if self.spec.unpack is not None and nbytes:
            self.spec.unpack(nbytes)
        return nbytes


def transfer(impl: Any, write: bool, buf: Any, start: Start, call: str) -> tuple[int, int]:
    """Move ``buf``'s message to or from the file at the position ``start`` gives,
    this rank alone; return (bytes of memory moved, etypes asked for)."""
    t0 = time.perf_counter()
    access = Access(impl, write, buf, start, call)
    return move(impl, access, call, t0), access.etypes


def move(impl: Any, access: Access, call: str, t0: float) -> int:
    """Do a planned access with this rank's own system calls; the bytes of memory moved."""
    offs, lens, fbytes = access.offs, access.lens, access.fbytes
    locked = impl.atomic and fbytes
    if locked:
        low, high = int(offs.min()), int((offs + lens).max())
        fcntl.lockf(impl.fd, fcntl.LOCK_EX if access.write else fcntl.LOCK_SH, high - low, low)
    try:
        if access.write:
            impl.dirty = True
            _write_segments(impl.fd, access.data, offs, lens)
            got = fbytes
        else:
            got = _read_segments(impl.fd, access.target, offs, lens)
    except OSError as exc:
        raise os_error(exc, call) from None
    finally:
        if locked:
            fcntl.lockf(impl.fd, fcntl.LOCK_UN, high - low, low)
    traced(impl, call, offs, got, t0)
    return access.finish(impl, got)


def traced(impl: Any, call: str, offs: np.ndarray, nbytes: int, t0: float) -> None:
    if tracing.current is not None:
        offset = int(offs[0]) if len(offs) else 0
        tracing.file_access(impl.world_rank, call, impl.path, offset, nbytes, len(offs), t0)
