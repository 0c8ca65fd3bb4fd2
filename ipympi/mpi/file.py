"""``MPI.File``: opening, closing and describing files for parallel I/O (MPI-4.1 ch. 14).

A ``File`` is a handle on a :class:`FileImpl`: the rank's own descriptor of the file,
the access mode, a private duplicate of the communicator it was opened on (collective
calls coordinate through it), the hints, the view and the file pointers. Data access
(``Read_at``, ``Write_all``, ...) comes from :class:`~ipympi.mpi.file_access.FileAccess`;
views and data representations from :mod:`~ipympi.mpi.file_view`.

Errors go through the file's error handler; calls not tied to an open file (``Open``,
``Delete``) through ``FILE_NULL``'s, which is ``ERRORS_RETURN`` until the program sets
another (the standard's default for files). A file opened gets ``FILE_NULL``'s handler
when ``mpi4py.rc.errors`` is "default", else the one it asks for, as in mpi4py.
"""

from __future__ import annotations

import errno
import fcntl
import functools
import operator
import os
import struct
import tempfile
from typing import Any, Callable, TypeVar, cast

from ..core import errors as E
from ..core.constants import (
    MODE_APPEND,
    MODE_CREATE,
    MODE_DELETE_ON_CLOSE,
    MODE_EXCL,
    MODE_RDONLY,
    MODE_RDWR,
    MODE_SEQUENTIAL,
    MODE_WRONLY,
)
from ..core.errors import Exception as MPIException
from ..core.fileview import amode_problem
from ..core.handle import Handle, Kind, register
from .errhandling import ERRORS_RETURN, Errhandler, ErrhandlerMethods, mpi_call
from .file_access import FileAccess
from .file_view import View, native_view, os_error
from .info import INFO_NULL, Info
from .process import PROCESS
from .rc import setting
from .runtime import default_errhandler

__all__ = ["FILE_NULL", "File"]

F = TypeVar("F", bound=Callable[..., Any])
_DEFAULT_HINTS = {"cb_buffer_size": "16777216", "romio_cb_read": "automatic",
                  "romio_cb_write": "automatic"}  # fmt: skip
_COUNTER = struct.Struct("<q")


class SharedPointer:
    """The shared file pointer: an 8-byte counter in a side record, updated under an
    ``fcntl`` lock, so that the ranks of the host fetch-and-add it atomically."""

    __slots__ = ("fd", "path")

    def __init__(self, path: str) -> None:
        self.path = path
        self.fd = os.open(path, os.O_RDWR)

    def add(self, amount: int) -> int:
        """Add ``amount``; return the value before."""
        fcntl.lockf(self.fd, fcntl.LOCK_EX)
        try:
            raw = os.pread(self.fd, 8, 0)
            value = _COUNTER.unpack(raw)[0] if len(raw) == 8 else 0
            if amount:
                os.pwrite(self.fd, _COUNTER.pack(value + amount), 0)
            return value
        finally:
            fcntl.lockf(self.fd, fcntl.LOCK_UN)

    def set(self, value: int) -> None:
        fcntl.lockf(self.fd, fcntl.LOCK_EX)
        try:
            os.pwrite(self.fd, _COUNTER.pack(value), 0)
        finally:
            fcntl.lockf(self.fd, fcntl.LOCK_UN)

    def close(self, unlink: bool) -> None:
        os.close(self.fd)
        if unlink:
            try:
                os.unlink(self.path)
            except OSError:
                pass


class FileImpl:
    """One open file on this rank (what ``File`` handles refer to)."""

    __slots__ = ("__weakref__", "amode", "atomic", "comm", "dirty", "errhandler", "fd",
                 "hints", "path", "pos", "shared", "split", "strided", "view",
                 "world_rank")  # fmt: skip

    def __init__(self, path: str, amode: int, fd: int, comm: Any, shared: SharedPointer) -> None:
        self.path = path
        self.amode = amode
        self.fd = fd
        self.comm = comm  # the private duplicate of the communicator
        self.shared = shared
        self.errhandler: Errhandler = Errhandler(_opened_errhandler())
        self.hints: dict[str, str] = dict(_DEFAULT_HINTS)
        self.hints["cb_nodes"] = str(comm.Get_size())
        self.atomic = False
        self.dirty = False  # written since the last Sync
        self.pos = 0  # the individual file pointer, in etypes of the view
        self.view: View = native_view()
        self.strided = False  # whether any rank's view has holes (see Set_view)
        self.split: Any = None  # the pending split collective: (call, status)
        world = PROCESS.world
        self.world_rank = int(world.Get_rank()) if world is not None else 0

    @property
    def rank(self) -> int:
        return int(self.comm.Get_rank())

    @property
    def size(self) -> int:
        return int(self.comm.Get_size())


class _FileNullDefaults:
    """What ``FILE_NULL`` holds: its error handler (``ERRORS_RETURN`` until set), which
    handles ``File.Open``'s errors and, with ``rc.errors`` "default", is the handler
    of files opened from now on (:func:`_opened_errhandler`)."""

    errhandler: Errhandler = ERRORS_RETURN


def _opened_errhandler() -> Errhandler:
    """The error handler of a file just opened: with ``mpi4py.rc.errors`` "default",
    ``FILE_NULL``'s (the standard's rule); else the one it asks for ("exception":
    ``ERRORS_RETURN``, "abort", "fatal"), as mpi4py sets it on every file it opens."""
    if setting("errors") == "default":
        return _FILE_NULL_DEFAULTS.errhandler
    return default_errhandler()


_FILE_NULL_DEFAULTS = _FileNullDefaults()


def _null_call(fn: F) -> F:
    """Route ``MPI.Exception`` of a class method through ``FILE_NULL``'s handler."""
    name = fn.__name__

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except MPIException as exc:
            FILE_NULL._raise(exc, name)

    return cast(F, wrapper)


def _path(filename: Any) -> str:
    if isinstance(filename, bytes):
        return os.fsdecode(filename)
    if isinstance(filename, (str, os.PathLike)):
        return os.fspath(filename)
    raise TypeError(f"filename must be str, bytes or os.PathLike, not {type(filename).__name__}")


def _hints(info: Any) -> dict[str, str]:
    if info is None or not isinstance(info, Info) or not info:
        return {}
    return dict(info.items())


def _agree(comm: Any, problem: MPIException | None) -> None:
    """Raise on every rank the first rank's error, if any rank had one."""
    if comm.Get_size() == 1:
        if problem is not None:
            raise problem
        return
    found = comm.allgather(None if problem is None else (problem.Get_error_class(), str(problem)))
    for rank, item in enumerate(found):
        if item is not None:
            if problem is not None:
                raise problem
            raise MPIException(item[0], f"rank {rank}: {item[1]}")


class File(ErrhandlerMethods, FileAccess, Handle):
    """A file opened collectively by the ranks of a communicator."""

    __slots__ = ("_impl",)
    _mpi_kind = Kind("File", 4, E.ERR_FILE, None)
    _impl: FileImpl | None

    def __bool__(self) -> bool:
        return self._impl is not None

    def __repr__(self) -> str:
        if self._impl is None:
            return "<MPI.FILE_NULL>" if type(self) is File else f"<{type(self).__name__} null>"
        return f"<MPI.{type(self).__name__} {self._impl.path!r}>"

    def _reduce_created(self) -> Any:
        raise ValueError(f"cannot pickle {self!r}: an open file is local to its ranks")

    def free(self) -> None:
        """Close the file if it is open (``Close``); a null handle stays as it is."""
        if self._impl is not None:
            self.Close()

    def __enter__(self) -> File:
        return self

    def __exit__(self, *exc: object) -> None:
        """Leaving a ``with`` block closes the file (collective), unless already closed."""
        if self._impl is not None:
            self.Close()

    def _live(self) -> FileImpl:
        impl = self._impl
        if impl is None:
            raise MPIException(E.ERR_FILE, "invalid file: FILE_NULL (null or closed handle)")
        return impl

    # -- errors --------------------------------------------------------------------------
    _call_prefix = "File."
    _null_handler_class = E.ERR_ARG

    def _null_errhandler(self) -> Errhandler:
        return _FILE_NULL_DEFAULTS.errhandler

    def _errhandler_holder(self) -> Any:
        """The open file, or for ``FILE_NULL`` the defaults of files opened from now on."""
        return _FILE_NULL_DEFAULTS if self._impl is None else self._impl

    @classmethod
    def Create_errhandler(cls, errhandler_fn: Callable[[File, int], None]) -> Errhandler:
        """A new error handler calling ``errhandler_fn(file, errorcode)``."""
        return Errhandler._create_user(errhandler_fn)

    # -- opening and closing -------------------------------------------------------------
    @classmethod
    @_null_call
    def Open(cls, comm: Any, filename: Any, amode: int = MODE_RDONLY, info: Any = INFO_NULL) -> Any:
        """Open ``filename`` on every rank of ``comm`` (collective)."""
        path = _path(filename)
        amode = operator.index(amode)
        if not comm or not comm.Is_intra():
            raise MPIException(E.ERR_COMM, "Open: the communicator must be an intracommunicator")
        private = comm.Dup()
        try:
            impl = _open(private, path, amode, _hints(info))
        except BaseException:
            private.Free()
            raise
        handle = object.__new__(cls)
        handle._impl = impl
        return handle

    @mpi_call
    def Close(self) -> None:
        """Close the file (collective); ``MODE_DELETE_ON_CLOSE`` deletes it."""
        impl = self._live()
        if impl.size > 1:
            impl.comm.Barrier()
        os.close(impl.fd)
        first = impl.rank == 0
        impl.shared.close(unlink=first)
        if first and impl.amode & MODE_DELETE_ON_CLOSE:
            try:
                os.unlink(impl.path)
            except FileNotFoundError:
                pass
        if impl.size > 1:
            impl.comm.Barrier()
        impl.comm.Free()
        self._impl = None

    @classmethod
    @_null_call
    def Delete(cls, filename: Any, info: Any = INFO_NULL) -> None:
        """Delete a file (``ERR_NO_SUCH_FILE`` if there is none)."""
        path = _path(filename)
        try:
            os.unlink(path)
        except OSError as exc:
            raise os_error(exc, "Delete") from None

    # -- size, mode, group, info ---------------------------------------------------------
    @mpi_call
    def Set_size(self, size: int) -> None:
        """Truncate or extend the file to ``size`` bytes (collective)."""
        impl = self._live()
        size = _size_arg(size, "Set_size")
        problem = None
        if impl.size > 1:
            impl.comm.Barrier()  # the ranks' earlier accesses come first
        if impl.rank == 0:

            def resize() -> None:
                if size != os.fstat(impl.fd).st_size:  # (truncating costs even when idle)
                    os.ftruncate(impl.fd, size)
                    impl.dirty = True

            problem = _try(resize, "Set_size", impl)
        _agree(impl.comm, problem)

    @mpi_call
    def Preallocate(self, size: int) -> None:
        """Make room for ``size`` bytes (collective); the file never shrinks."""
        impl = self._live()
        size = _size_arg(size, "Preallocate")
        problem = None
        if impl.rank == 0 and size > os.fstat(impl.fd).st_size:
            problem = _try(lambda: os.posix_fallocate(impl.fd, 0, size), "Preallocate", impl)
            impl.dirty = True
        _agree(impl.comm, problem)

    @mpi_call
    def Get_size(self) -> int:
        """The file's size in bytes."""
        return os.fstat(self._live().fd).st_size

    @mpi_call
    def Get_amode(self) -> int:
        return self._live().amode

    @mpi_call
    def Get_group(self) -> Any:
        """The group of the communicator the file was opened on."""
        return self._live().comm.Get_group()

    @mpi_call
    def Set_info(self, info: Any) -> None:
        """Take the hints of ``info`` (collective)."""
        self._live().hints.update(_hints(info))

    @mpi_call
    def Get_info(self) -> Info:
        """A new info object with the hints in use."""
        return Info._of(dict(self._live().hints))

    # -- consistency ---------------------------------------------------------------------
    @mpi_call
    def Set_atomicity(self, flag: bool) -> None:
        """Atomic mode (collective): each access locks the bytes it touches."""
        self._live().atomic = bool(flag)

    @mpi_call
    def Get_atomicity(self) -> bool:
        return self._live().atomic

    @mpi_call
    def Sync(self) -> None:
        """Transfer this rank's writes to the storage device (collective)."""
        impl = self._live()
        if impl.dirty:
            try:
                os.fdatasync(impl.fd)
                impl.dirty = False
            except OSError as exc:
                raise os_error(exc, "Sync") from None

    # -- properties ----------------------------------------------------------------------
    size = property(lambda self: self.Get_size(), doc="Size of the file in bytes.")
    amode = property(lambda self: self.Get_amode(), doc="File access mode.")
    group = property(lambda self: self.Get_group(), doc="Group of the file's communicator.")
    group_size = property(lambda self: self._live_call().size, doc="Number of ranks.")
    group_rank = property(lambda self: self._live_call().rank, doc="This rank.")
    info = property(lambda self: self.Get_info(), lambda self, v: self.Set_info(v), doc="Hints.")
    atomicity = property(
        lambda self: self.Get_atomicity(),
        lambda self, v: self.Set_atomicity(v),
        doc="Atomic mode.",
    )

    @mpi_call
    def _live_call(self) -> FileImpl:
        return self._live()


def _size_arg(size: Any, call: str) -> int:
    size = operator.index(size)
    if size < 0:
        raise MPIException(E.ERR_ARG, f"{call}: negative size {size}")
    return size


def _try(action: Callable[[], Any], call: str, impl: FileImpl) -> MPIException | None:
    if not impl.amode & (MODE_WRONLY | MODE_RDWR):
        return MPIException(E.ERR_READ_ONLY, f"{call}: the file was opened MODE_RDONLY")
    try:
        action()
    except OSError as exc:
        return os_error(exc, call)
    return None


def _open(comm: Any, path: str, amode: int, hints: dict[str, str]) -> FileImpl:
    """Open ``path`` on each rank of ``comm`` (the private duplicate), all or none."""
    single = comm.Get_size() == 1
    if not single and len(set(comm.allgather((path, amode)))) != 1:
        raise MPIException(E.ERR_NOT_SAME, "Open: the ranks gave different names or modes")
    problem = amode_problem(amode)
    if problem is not None:
        raise MPIException(E.ERR_AMODE, f"Open: {problem}")
    made: Any = None
    if comm.Get_rank() == 0:
        made = _create(path, amode)
    if not single:
        made = comm.bcast(made, 0)
    if isinstance(made, tuple):
        raise MPIException(made[0], made[1])
    flags = os.O_RDWR if amode & MODE_RDWR else os.O_WRONLY if amode & MODE_WRONLY else os.O_RDONLY
    fd = -1
    failed: MPIException | None = None
    try:
        fd = os.open(path, flags | getattr(os, "O_CLOEXEC", 0))
        if os.path.isdir(path):
            raise IsADirectoryError(errno.EISDIR, "is a directory")
    except OSError as exc:
        failed = os_error(exc, "Open")
    shared: SharedPointer | None = None
    if failed is None:
        try:
            shared = SharedPointer(made)
        except OSError as exc:
            failed = os_error(exc, "Open")
    try:
        _agree(comm, failed)
    except MPIException:
        if fd >= 0:
            os.close(fd)
        if shared is not None:
            shared.close(unlink=comm.Get_rank() == 0)
        raise
    assert shared is not None
    impl = FileImpl(path, amode, fd, comm, shared)
    impl.hints.update(hints)
    if amode & MODE_APPEND:  # both file pointers start at the end
        impl.pos = os.fstat(fd).st_size
        if comm.Get_rank() == 0:
            shared.set(impl.pos)
        if not single:
            comm.Barrier()
    return impl


def _create(path: str, amode: int) -> Any:
    """On rank 0: create the file if asked, and the shared pointer's record; the record's
    path, or ``(error class, message)``."""
    if amode & MODE_CREATE:
        flags = os.O_CREAT | os.O_WRONLY | (os.O_EXCL if amode & MODE_EXCL else 0)
        try:
            os.close(os.open(path, flags, 0o666))
        except OSError as exc:
            err = os_error(exc, "Open")
            return (err.Get_error_class(), str(err))
    elif not os.path.exists(path):
        return (E.ERR_NO_SUCH_FILE, f"Open: no such file {path!r}")
    if amode & MODE_SEQUENTIAL and not amode & (MODE_RDONLY | MODE_WRONLY):
        return (E.ERR_AMODE, "Open: MODE_SEQUENTIAL needs MODE_RDONLY or MODE_WRONLY")
    # in the job's private directory (the temp folder without a launcher)
    fd, record = tempfile.mkstemp(prefix=".ipympi-shfp-", dir=PROCESS.job_dir())
    os.close(fd)
    return record


FILE_NULL: File = File()
register(globals(), ["FILE_NULL"])
