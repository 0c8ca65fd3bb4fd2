"""Forward the ranks' stdout and stderr to the launcher's own streams, whole lines at a time.

Every rank of a :class:`ipympi.launch.launcher.Job` writes into its own pipes, and
the launcher copies what arrives to one shared stdout and one shared stderr.
An :class:`OutputStream` reads one pipe and writes only whole lines, so the
lines of different ranks never interleave mid-line, optionally behind a
``[rank] `` prefix; a :class:`Sink` is the shared destination, which stops
writing (instead of failing the job) once its reader is gone. They live apart
from the launcher's process management, which only creates them and calls
``read()`` when the event loop sees a pipe readable.
"""

from __future__ import annotations

import os
from typing import IO

__all__ = ["OutputStream", "Sink"]

_CHUNK = 1 << 16  # bytes per read from a rank's pipe
_MAX_PARTIAL = 1 << 16  # a line this long without a newline is forwarded anyway


class Sink:
    """A binary stream the launcher writes to: flushed per write; a broken one discards."""

    def __init__(self, stream: IO[bytes]) -> None:
        self.stream = stream
        self.broken = False

    def write(self, data: bytes) -> None:
        if self.broken or not data:
            return
        try:
            self.stream.write(data)
            self.stream.flush()
        except (OSError, ValueError):  # reader gone (EPIPE) or stream closed
            self.broken = True


class OutputStream:
    """One rank's stdout or stderr pipe, forwarded to a sink in whole lines.

    Lines from different ranks never interleave mid-line. With a ``prefix``
    every line gets it (and a final line without newline gets one). Bytes are
    forwarded unchanged otherwise, and the last partial line is written at EOF.
    """

    def __init__(self, pipe: IO[bytes] | None, sink: Sink, prefix: bytes | None) -> None:
        """``pipe`` is read by :meth:`read`; without one, output comes through :meth:`feed`
        (a rank on another host, whose agent sends its output)."""
        self.pipe = pipe
        self.fd = pipe.fileno() if pipe is not None else -1
        self.sink = sink
        self.prefix = prefix
        self._pending = bytearray()

    def read(self) -> bool:
        """Read what the pipe has (it must be readable) and forward whole lines.

        Returns False at end of file: then ``close()`` forwards the rest.
        """
        try:
            data = os.read(self.fd, _CHUNK)
        except OSError:
            data = b""
        if not data:
            return False
        self.feed(data)
        return True

    def feed(self, data: bytes) -> None:
        """Take ``data`` as the stream's next bytes and forward the whole lines so far."""
        self._pending += data
        cut = self._pending.rfind(b"\n") + 1
        if cut == 0 and len(self._pending) >= _MAX_PARTIAL:
            cut = len(self._pending)
        if cut:
            self._emit(bytes(self._pending[:cut]))
            del self._pending[:cut]

    def _emit(self, chunk: bytes) -> None:
        if not chunk or self.prefix is None:
            self.sink.write(chunk)
            return
        lines = chunk.split(b"\n")
        last = lines.pop()  # b"" when the chunk ends with a newline
        if last:
            lines.append(last)
        self.sink.write(b"".join(self.prefix + line + b"\n" for line in lines))

    def close(self) -> None:
        """Forward any partial line and close the pipe."""
        self._emit(bytes(self._pending))
        self._pending.clear()
        if self.pipe is not None:
            self.pipe.close()
