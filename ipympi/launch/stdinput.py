"""The launcher's standard input, forwarded to rank 0 of a job on hosts through its agent.

``ipympi.run -n 4 prog.py < input.txt`` gives rank 0 the launcher's stdin, as
``mpiexec`` does. On this machine rank 0 simply inherits it; in a job on
several hosts (:mod:`ipympi.launch.agents`) rank 0 is started by a host agent
(:mod:`ipympi.launch.node`), so the bytes travel as ``input`` commands:

* :class:`InputSource`, in the launcher, reads its stdin in chunks of at most
  :data:`CHUNK` bytes while fewer than :data:`WINDOW` bytes it sent are still
  unwritten on the agent's side, and sends each chunk (base64) then, at end of
  file, ``eof``. The window bounds what waits anywhere between the two (the
  agent's command pipe, ssh, the agent's buffer) and keeps every command the
  launcher writes within what the agent's command pipe holds, so the launcher
  never blocks on an agent whose rank 0 does not read.
* :class:`InputSink`, in the agent, writes what comes into the pipe that is
  rank 0's stdin without blocking, tells the launcher how many bytes it
  ``taken`` (which reopens the window), closes the pipe after ``eof``, and says
  ``closed`` once rank 0 cannot take more (its stdin was closed or it exited):
  the launcher then stops reading.

A terminal that is the launcher's controlling one is read only while the
launcher is its foreground job (reading it from the background would stop the
launcher): after ``&``, or Ctrl-Z and ``bg``, input waits until ``fg``.
Nothing waits for the end of the launcher's stdin: the job ends when its ranks do.
"""

from __future__ import annotations

import base64
import contextlib
import os
from collections.abc import Mapping
from typing import Any, Callable

__all__ = ["CHUNK", "WINDOW", "InputSink", "InputSource", "forwardable", "in_foreground"]

CHUNK = 16 << 10  # bytes of input per command (about 22 KB of base64)
WINDOW = 2 * CHUNK  # bytes sent, not yet in rank 0's stdin: 44 KB of commands < a pipe

Send = Callable[[Mapping[str, Any]], None]


def forwardable(fd: int | None) -> int | None:
    """``fd`` if it is an open descriptor, else None."""
    if fd is None:
        return None
    try:
        os.fstat(fd)
    except OSError:
        return None
    return fd


def in_foreground(fd: int) -> bool:
    """False when ``fd`` is this process's controlling terminal and another process
    group is its foreground job, so that reading it would stop this process."""
    if not os.isatty(fd):
        return True
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:  # not this process's controlling terminal: no job control
        return True


class InputSource:
    """The launcher's side: reads ``fd`` for ``rank``, whose agent gets it by ``send``."""

    def __init__(self, fd: int, rank: int, send: Send) -> None:
        self.fd = fd
        self.rank = rank
        self._send = send
        self.unwritten = 0  # bytes sent that the agent has not written into the pipe yet
        self.done = False  # end of input was sent, or the rank takes no more
        self.tty = os.isatty(fd)

    def has_room(self) -> bool:
        """Not done, and a whole chunk fits in the window."""
        return not self.done and self.unwritten + CHUNK <= WINDOW

    def wants_input(self) -> bool:
        """Whether to read now: there is room, and reading would not stop this process."""
        return self.has_room() and (not self.tty or in_foreground(self.fd))

    def paused(self) -> bool:
        """Whether only the terminal's job control keeps it from reading (then the
        caller checks again from time to time)."""
        return self.tty and self.has_room() and not in_foreground(self.fd)

    def read(self) -> None:
        """Read what ``fd`` has (it is readable) and send it, or end of input."""
        try:
            data = os.read(self.fd, CHUNK)
        except BlockingIOError:
            return
        except OSError:  # e.g. EIO: a terminal this process may no longer read
            data = b""
        if data:
            self.unwritten += len(data)
            self._send({"type": "input", "rank": self.rank, "data": _encode(data)})
            return
        self.done = True
        self._send({"type": "input", "rank": self.rank, "eof": True})

    def on_event(self, event: Mapping[str, Any]) -> None:
        """The agent's ``input`` event: bytes ``taken``, or the rank's stdin ``closed``."""
        self.unwritten = max(0, self.unwritten - int(event.get("taken", 0)))
        if event.get("closed"):
            self.stop()

    def stop(self) -> None:
        """Read no more (the rank is gone, or cannot take more)."""
        self.done = True


class InputSink:
    """The agent's side: writes a rank's input into ``fd`` (the write end of its stdin
    pipe, made non-blocking here) and reports to the launcher by ``emit``."""

    def __init__(self, rank: int, fd: int, emit: Send) -> None:
        os.set_blocking(fd, False)
        self.rank = rank
        self.fd: int | None = fd
        self._emit = emit
        self._pending = bytearray()
        self._eof = False

    def feed(self, command: Mapping[str, Any]) -> None:
        """One ``input`` command: more bytes, or end of input."""
        if self.fd is None:
            return  # the rank takes no more; the launcher was told
        if command.get("data"):
            self._pending += base64.b64decode(command["data"])
        if command.get("eof"):
            self._eof = True
        self.flush()

    def wants_write(self) -> bool:
        """Whether bytes wait for room in the pipe."""
        return self.fd is not None and bool(self._pending)

    def flush(self) -> None:
        """Write what the pipe takes now; close it after the last byte of input."""
        if self.fd is None:
            return
        taken = 0
        while self._pending:
            try:
                written = os.write(self.fd, self._pending)
            except BlockingIOError:
                break
            except OSError:  # EPIPE: the rank closed its stdin or exited
                self._emit({"type": "input", "rank": self.rank, "taken": taken})
                self.gone()
                return
            del self._pending[:written]
            taken += written
        if taken:
            self._emit({"type": "input", "rank": self.rank, "taken": taken})
        if self._eof and not self._pending:
            self._close()

    def gone(self) -> None:
        """The rank takes no more input (it exited, or its stdin is closed): drop what
        waits and tell the launcher, unless its input already ended."""
        if self.fd is None:
            return
        dropped = len(self._pending)
        self._pending.clear()
        if not self._eof:
            self._emit({"type": "input", "rank": self.rank, "taken": dropped, "closed": True})
        self._close()

    def _close(self) -> None:
        if self.fd is not None:
            with contextlib.suppress(OSError):
                os.close(self.fd)
            self.fd = None


def _encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
