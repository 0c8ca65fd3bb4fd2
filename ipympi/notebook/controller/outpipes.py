"""The output pipes of processes the controller does not drive, read in a thread of their own.

A process that writes to a pipe nobody reads stops once the pipe's buffer (64 KiB on
Linux) is full. The controller's driving thread reads its sockets only while it waits
for something (a cell, a magic); between cells nobody would read the pipes, and a
spawned process that prints a lot after the cell that started it has ended would stall
until the next cell (so would a real MPI's ``mpiexec``, which forwards the output of the
processes its ranks spawn). :class:`PipeReader` reads them always, in a daemon thread
that lives while pipes are open: the bytes it reads wait in order until the driving
thread takes them (:meth:`PipeReader.take`), woken by a byte on :attr:`PipeReader.fd`
that its poller watches; the taker decodes them.

What waits may be bounded: beyond ``limit`` bytes (a process that prints on and on while
no cell runs) the rest goes to the log, where output no cell asked for goes, and the
next take carries one line saying so, so that memory does not grow without end.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import threading
from dataclasses import dataclass

__all__ = ["HELD_LIMIT", "Chunk", "PipeReader"]

HELD_LIMIT = 8 * 2**20  # bytes waiting for the driving thread, beyond which they are logged
READ_SIZE = 65536


@dataclass(frozen=True)
class Chunk:
    """Bytes read from one pipe (``ended``: its writers have all closed it)."""

    key: int  # whose pipe: a process index, say
    name: str  # "stdout" or "stderr"
    data: bytes
    ended: bool = False


class PipeReader:
    """Reads registered pipes in a thread; the driving thread takes what they said."""

    def __init__(self, limit: int | None = HELD_LIMIT) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        self._pipes: dict[int, tuple[int, str]] = {}  # fd -> (key, name)
        self._pending: list[Chunk] = []
        self._held = 0  # bytes in _pending
        self._logged: set[int] = set()  # keys whose output went to the log since the last take
        self._wake_r, self._wake_w = os.pipe()  # for the driving thread's poller
        self._poke_r, self._poke_w = os.pipe()  # for the reading thread: the pipes changed
        for fd in (self._wake_r, self._wake_w, self._poke_r, self._poke_w):
            os.set_blocking(fd, False)
        self._thread: threading.Thread | None = None

    @property
    def fd(self) -> int:
        """Readable when text waits: the driving thread's poller watches it."""
        return self._wake_r

    def add(self, fd: int, key: int, name: str) -> None:
        """Read ``fd`` (made non-blocking) from now on as stream ``name`` of ``key``."""
        os.set_blocking(fd, False)
        with self._lock:
            self._pipes[fd] = (key, name)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._follow, name="ipympi-child-output", daemon=True
                )
                self._thread.start()
        _poke(self._poke_w)

    def forget(self, fd: int) -> None:
        """Stop reading ``fd`` (its owner closes it next)."""
        with self._lock:
            self._pipes.pop(fd, None)
        _poke(self._poke_w)

    def take(self, now: bool = False) -> list[Chunk]:
        """What the pipes said since the last take, in order; with ``now``, first read
        whatever the pipes hold at this moment, without waiting."""
        with contextlib.suppress(BlockingIOError):
            while os.read(self._wake_r, 4096):
                pass
        with self._lock:
            if now:
                for fd in list(self._pipes):
                    self._read(fd)
            chunks, self._pending, self._held = self._pending, [], 0
            self._logged = set()
        return chunks

    def close(self) -> None:
        """Stop reading every pipe and close the reader's own (the thread then ends)."""
        with self._lock:
            self._pipes.clear()
        _poke(self._poke_w)
        thread = self._thread
        if thread is not None:
            thread.join(5.0)
        for fd in (self._wake_r, self._wake_w, self._poke_r, self._poke_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    # -- the reading thread --------------------------------------------------------------
    def _follow(self) -> None:
        while True:
            with self._lock:
                fds = list(self._pipes)
                if not fds:
                    self._thread = None
                    return
            try:
                ready, _, _ = select.select([*fds, self._poke_r], [], [], 1.0)
            except (OSError, ValueError):  # a pipe closed meanwhile: look again
                ready = []
            if self._poke_r in ready:
                with contextlib.suppress(BlockingIOError, OSError):
                    while os.read(self._poke_r, 4096):
                        pass
            said = False
            with self._lock:
                for fd in ready:
                    if fd in self._pipes:  # not closed (and its number reused) meanwhile
                        said = self._read(fd) or said
            if said:
                _poke(self._wake_w)

    def _read(self, fd: int) -> bool:
        """Under the lock: read ``fd`` until it would block; whether anything came."""
        data, ended = b"", False
        while True:
            try:
                chunk = os.read(fd, READ_SIZE)
            except BlockingIOError:
                break
            except OSError:
                chunk = b""
            if not chunk:
                ended = True
                break
            data += chunk
        key, name = self._pipes[fd]
        if ended:
            del self._pipes[fd]
        if not data and not ended:
            return False
        room = len(data) if self.limit is None else max(0, self.limit - self._held)
        if len(data) > room:  # what fits waits; the rest goes to the log
            self._overflow(key, name, data[room:])
            data = data[:room]
        self._held += len(data)
        self._pending.append(Chunk(key, name, data, ended))
        return True

    def _overflow(self, key: int, name: str, data: bytes) -> None:
        if key not in self._logged:
            self._logged.add(key)
            note = (
                f"[more output of spawned process {key}, written while no cell ran, "
                "went to the kernel's log]\n"
            )
            self._pending.append(Chunk(key, "stderr", note.encode()))
        text = data.decode(errors="replace").rstrip("\n")
        logging.getLogger(__name__).warning("[%s:%d] %s", name, key, text)


def _poke(fd: int) -> None:
    with contextlib.suppress(BlockingIOError, OSError):
        os.write(fd, b"\0")
