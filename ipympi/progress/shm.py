"""Shared-memory segments that the ranks of one host map together, and locks on them.

A segment is a file in ``/dev/shm`` (the system's temporary folder where that is
missing) that one rank creates and the others open and map; as soon as every rank has
it open, the creator unlinks the name. The memory then lives exactly as long as some
rank maps it: nothing is ever left behind, even when a rank is killed. The ranks that
share a segment agree on its name through a collective of their own choosing (the
caller passes the name along); this module does no communication.

A name can still be left behind when the creator is killed before the others opened
the segment, or a whole job is killed at once: each job notes its names for its
launcher to remove (``launch.sessiondir``), and a launcher killed too leaves them. So
the first segment a process creates reaps the names that are stale for certain
(:func:`reap_stale`): this user's, named as this module names them, older than
:data:`STALE_AFTER` (a name lives milliseconds: until every rank has opened it) and
whose creator, whose pid the name carries, is gone.

A segment's file descriptor also carries POSIX byte-range locks (``fcntl``): a rank
locks byte ``i`` shared or exclusive, blocks until it may, and the kernel releases its
locks when it dies. Locks belong to the process (not the thread), so a rank never
conflicts with itself; the kernel detects deadlocks between processes (``EDEADLK``).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import mmap
import os
import platform
import re
import secrets
import sys
import tempfile
import threading
import time

from ..core.lazynumpy import np
from .largebuf import buffer_address

__all__ = [
    "STALE_AFTER",
    "Segment",
    "fence",
    "is_segment",
    "note_in",
    "noted",
    "process_alive",
    "reap_stale",
    "segment_folder",
    "total_store_order",
]

STALE_AFTER = 60.0  # seconds: a segment's name older than this, its creator gone, is stale
# what :meth:`Segment.create` names segments: prefix, creator's pid, 16 hex digits
_NAME = re.compile(r"ipympi(?:-[a-z]+)?-(\d+)-[0-9a-f]{16}")
_reaped = False  # whether this process has reaped its folder


def total_store_order() -> bool:
    """Whether plain loads and stores to shared memory may serve as a protocol here:
    Linux on x86-64, whose processors keep stores in order and loads in order (a load
    may pass an earlier store only: hence :func:`fence`), and where a native aligned
    8-byte store from Python (a ``memoryview`` cast to ``"q"``) is one store."""
    return sys.platform == "linux" and platform.machine() in ("x86_64", "AMD64")


# What fence() acquires and releases (bound by the busiest callers themselves).
fence_lock = threading.Lock()


def fence() -> None:
    """A full memory fence: a store before it is seen by other processors before a load
    after it is done (Dekker's case, which x86 otherwise allows). CPython acquires and
    releases a ``threading.Lock`` with atomic read-modify-write instructions, which x86
    orders as full fences."""
    fence_lock.acquire()
    fence_lock.release()


def noted(path: str) -> str:
    """The line that notes the shared-memory file ``path`` for removal with its job:
    ``device inode path`` (removed only if still the same file; see
    ``launch.sessiondir``)."""
    st = os.stat(path)
    return f"{st.st_dev} {st.st_ino} {path}\n"


def note_in(directory: str, note: str, path: str) -> None:
    """Add ``path`` to the note file ``note`` (a name starting with ``shm-``) in the
    job's ``directory``, which removes it with the job however the job ends."""
    with open(os.path.join(directory, note), "a") as out:
        out.write(noted(path))


def is_segment(path: str, prefix: str) -> bool:
    """Whether ``path`` names a segment that :meth:`Segment.create` would make with
    ``prefix`` here (what a rank checks before it maps, and removes, a name another
    rank sent it)."""
    folder, name = os.path.split(path)
    match = _NAME.fullmatch(name)
    return match is not None and name.startswith(prefix + "-") and folder == segment_folder()


def segment_folder() -> str:
    """Where segments are created: ``/dev/shm`` (memory) if usable, else the temp folder."""
    folder = "/dev/shm"
    if os.path.isdir(folder) and os.access(folder, os.W_OK):
        return folder
    return tempfile.gettempdir()


def reap_stale(folder: str) -> list[str]:
    """Remove the stale segment names in ``folder`` (see the module's docstring); their
    paths."""
    uid = os.getuid()
    now = time.time()
    reaped = []
    with contextlib.suppress(OSError), os.scandir(folder) as entries:
        for entry in entries:
            match = _NAME.fullmatch(entry.name)
            if match is None:
                continue
            try:
                st = entry.stat(follow_symlinks=False)
                if st.st_uid != uid or now - st.st_mtime < STALE_AFTER:
                    continue
                if process_alive(int(match.group(1))):
                    continue
                os.unlink(entry.path)
            except OSError:
                continue
            reaped.append(entry.path)
    return reaped


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` is alive: it exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            state = stat.read().rpartition(b")")[2].split()[0]
    except (OSError, IndexError):
        return True  # no procfs: existence is all we know
    return state not in (b"Z", b"X")


class Segment:
    """One mapped shared-memory segment of ``size`` bytes (``size`` may be 0).

    Create it on one rank with :meth:`create`, pass :attr:`name` to the others, which
    call :meth:`open`; once all have it open, the creator calls :meth:`unlink`.
    :attr:`array` is a ``uint8`` numpy view of the whole segment.
    """

    def __init__(self, name: str, fd: int, size: int) -> None:
        self.name = name
        self.fd = fd
        self.size = size
        self._map: mmap.mmap | None = None
        self._array: np.ndarray | None = None
        self.address = 0
        if size:
            self._map = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            with memoryview(self._map) as whole:  # no export left: the map can close
                self.address = buffer_address(whole)

    @property
    def array(self) -> np.ndarray:
        """A ``uint8`` numpy view of the whole segment (empty once closed). Made at first
        use: a board does not need numpy, and each rank of a program that never uses it
        would pay for its import."""
        if self._array is None:
            if self._map is None:
                return np.zeros(0, dtype=np.uint8)
            self._array = np.frombuffer(self._map, dtype=np.uint8)
        return self._array

    @classmethod
    def create(cls, size: int, prefix: str = "ipympi", job_dir: str | None = None) -> Segment:
        """A new segment of ``size`` zeroed bytes under a fresh, unguessable name (the
        first in a process reaps the folder's stale names first), noted in ``job_dir``
        when given (:func:`note_in`), so that the name goes with the job however it ends,
        even before the other ranks have mapped it.

        Raises ``OSError`` (``ENOSPC``) when the folder has less room than ``size``: its
        pages are only taken when first written, and a write that finds no room ends
        the process with ``SIGBUS``, where this error can be told to the user."""
        global _reaped
        folder = segment_folder()
        if not _reaped:
            _reaped = True
            reap_stale(folder)
        room = os.statvfs(folder)
        free = room.f_bavail * room.f_frsize
        if size > free:
            raise OSError(
                errno.ENOSPC, f"{size} bytes of shared memory asked for, {free} free in {folder}"
            )
        while True:
            name = os.path.join(folder, f"{prefix}-{os.getpid()}-{secrets.token_hex(8)}")
            try:
                fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
                break
            except FileExistsError:
                continue
        try:
            os.ftruncate(fd, size)
            segment = cls(name, fd, size)
        except BaseException:
            os.close(fd)
            os.unlink(name)
            raise
        if job_dir is not None:
            try:
                note_in(job_dir, f"shm-{prefix}-{os.getpid()}", name)
            except OSError:
                pass  # the name still goes once every rank has mapped the segment
        return segment

    @classmethod
    def open(cls, name: str, size: int) -> Segment:
        """Map the segment another rank created under ``name``."""
        fd = os.open(name, os.O_RDWR)
        try:
            return cls(name, fd, size)
        except BaseException:
            os.close(fd)
            raise

    def view(self) -> memoryview:
        """A byte memoryview of the whole mapping (release it before :meth:`close`)."""
        assert self._map is not None, "a segment of at least one byte"
        return memoryview(self._map)

    def unlink(self) -> None:
        """Remove the segment's name (the memory stays while it is mapped)."""
        try:
            os.unlink(self.name)
        except FileNotFoundError:
            pass

    def drop_fd(self) -> None:
        """Close the file descriptor and keep the mapping: for a segment that takes no
        locks (a rank may map hundreds, and descriptors are counted)."""
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def close(self) -> None:
        """Unmap and close (releasing this process's locks). Views of :attr:`array`
        that are still alive keep the mapping until they go away."""
        self._array = None
        if self._map is not None:
            try:
                self._map.close()
            except BufferError:
                pass  # numpy views are still exported; the map goes with them
            self._map = None
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    # -- byte-range locks ---------------------------------------------------------------
    def lock(self, start: int, length: int = 1, exclusive: bool = True) -> None:
        """Block until this process holds bytes ``[start, start + length)`` locked."""
        kind = fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH
        fcntl.lockf(self.fd, kind, length, start, os.SEEK_SET)

    def try_lock(self, start: int, length: int = 1, exclusive: bool = True) -> bool:
        """Lock without waiting; False when another process holds a conflicting lock."""
        kind = (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB
        try:
            fcntl.lockf(self.fd, kind, length, start, os.SEEK_SET)
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EAGAIN):
                return False
            raise
        return True

    def unlock(self, start: int, length: int = 1) -> None:
        """Release this process's lock on ``[start, start + length)``."""
        fcntl.lockf(self.fd, fcntl.LOCK_UN, length, start, os.SEEK_SET)
