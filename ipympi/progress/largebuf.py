"""Single-copy transfer of large buffers between ranks on one host.

A large message is read straight from the sender's memory into the receiver's
buffer with Linux's ``process_vm_readv`` (one copy, the way MPICH's shared-memory
path does it; several times faster than copying through socket frames). The call may be
refused (``EPERM`` under Yama ptrace restrictions or seccomp, ``ENOSYS`` on other
systems): then :class:`VmReader` remembers that and the transport falls back to
sending the data in frames.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys

__all__ = ["VmReader", "allow_peer_reads", "buffer_address", "remote_copy"]


class _IoVec(ctypes.Structure):
    _fields_ = (("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t))


def _load_libc() -> ctypes.CDLL | None:
    """The C library (Linux), found among the symbols already loaded: no search of the
    library path (``find_library`` runs ``ldconfig``, tens of milliseconds per process)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


_LIBC = _load_libc()


def _load_readv(name: str = "process_vm_readv"):
    if _LIBC is None:
        return None
    try:
        fn = getattr(_LIBC, name)
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_ssize_t
    fn.argtypes = (
        ctypes.c_int,
        ctypes.POINTER(_IoVec),
        ctypes.c_ulong,
        ctypes.POINTER(_IoVec),
        ctypes.c_ulong,
        ctypes.c_ulong,
    )
    return fn


_readv = _load_readv()
_writev = _load_readv("process_vm_writev")

# One call moves at most this much (the kernel may return short reads anyway).
_CHUNK = 1 << 30


def buffer_address(mem: memoryview) -> int:
    """Address of the first byte of a contiguous memoryview (0 when empty)."""
    if not mem.nbytes:
        return 0
    if mem.readonly:
        # ctypes refuses read-only buffers; a pointer to bytes' storage works for
        # bytes objects, and numpy exposes any buffer's address without copying.
        import numpy as np

        return int(np.frombuffer(mem, dtype=np.uint8).ctypes.data)
    return ctypes.addressof(ctypes.c_char.from_buffer(mem))


def allow_peer_reads() -> None:
    """Let sibling ranks read this process's memory under Yama ptrace restrictions.

    With ``kernel.yama.ptrace_scope=1`` (a common default) only ancestors may
    use ``process_vm_readv`` on a process, unless it names a permitted tracer;
    ranks are siblings, so each rank allows any process of the same user.
    Harmless where Yama is absent; ignored where ``prctl`` is unavailable.
    """
    if _LIBC is None:
        return
    try:
        pr_set_ptracer, pr_set_ptracer_any = 0x59616D61, ctypes.c_ulong(-1)
        _LIBC.prctl(pr_set_ptracer, pr_set_ptracer_any, 0, 0, 0)
    except (OSError, AttributeError):
        pass


class VmReader:
    """Reads other processes' memory; disables itself when the kernel refuses."""

    def __init__(self) -> None:
        self.available = _readv is not None and os.environ.get("IPYMPI_NO_VM_READV") != "1"
        self.reason = "" if self.available else "process_vm_readv unavailable"

    def read(self, pid: int, remote_address: int, mem: memoryview) -> bool:
        """Copy ``len(mem)`` bytes from ``pid``'s ``remote_address`` into ``mem``.

        Returns False (and disables itself for the rest of the run) when the
        kernel does not permit the call; other failures raise ``OSError``.
        """
        if not self.available or _readv is None:
            return False
        total = mem.nbytes
        if total == 0:
            return True
        local_base = ctypes.addressof(ctypes.c_char.from_buffer(mem))
        done = 0
        while done < total:
            n = min(total - done, _CHUNK)
            local = _IoVec(local_base + done, n)
            remote = _IoVec(remote_address + done, n)
            got = _readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
            if got < 0:
                err = ctypes.get_errno()
                if err in (errno.EPERM, errno.ENOSYS, errno.EACCES) and done == 0:
                    self.available = False
                    self.reason = f"process_vm_readv refused: {os.strerror(err)}"
                    return False
                raise OSError(err, f"process_vm_readv from pid {pid}: {os.strerror(err)}")
            if got == 0:
                raise OSError(errno.EFAULT, f"process_vm_readv from pid {pid} read nothing")
            done += got
        return True


# At most this many pieces per system call (the kernel's IOV_MAX).
_IOV_MAX = 1024


def remote_copy(pid: int, pieces: list[tuple[int, int, int]], write: bool) -> None:
    """Copy between this process and ``pid``'s memory, piece by piece.

    Each piece is ``(local_address, remote_address, length)``; ``write`` copies
    local to remote (``process_vm_writev``), else remote to local. This is how a
    rank reaches another rank's window memory that is not in a shared segment.
    Failures raise ``OSError`` (``EFAULT`` for memory the target does not have,
    ``EPERM`` where the kernel forbids it, ``ENOSYS`` off Linux).
    """
    fn = _writev if write else _readv
    if fn is None:
        raise OSError(errno.ENOSYS, "process_vm_readv/writev are not available")
    pieces = [piece for piece in pieces if piece[2] > 0]
    for first in range(0, len(pieces), _IOV_MAX):
        batch = pieces[first : first + _IOV_MAX]
        count = len(batch)
        local = (_IoVec * count)(*[_IoVec(a, n) for a, _, n in batch])
        remote = (_IoVec * count)(*[_IoVec(r, n) for _, r, n in batch])
        total = sum(n for _, _, n in batch)
        got = fn(pid, local, count, remote, count, 0)
        if got < 0:
            err = ctypes.get_errno()
            raise OSError(
                err,
                f"process_vm_{'writev' if write else 'readv'} with pid {pid}: {os.strerror(err)}",
            )
        if got == 0 and total:
            raise OSError(errno.EFAULT, f"process_vm transfer with pid {pid} moved nothing")
        if got != total:  # a short transfer: move what is left
            rest, skip = [], got
            for a, r, n in batch:
                if skip >= n:
                    skip -= n
                    continue
                rest.append((a + skip, r + skip, n - skip))
                skip = 0
            remote_copy(pid, rest, write)
