"""Capture an engine's output and send it to the controller as ``stream`` messages.

Two layers, both feeding one :class:`RankStream` per stream name:

* ``sys.stdout``/``sys.stderr`` are replaced by :class:`RankStream` objects,
  so ``print`` and tracebacks cost no system call per write;
* file descriptors 1 and 2 are redirected into pipes read by a thread
  (:class:`FdCapture`), so output of C code, ``os.write`` and child
  processes (``subprocess.run(["ls"])``) reaches the notebook too.

Text is sent in batches: when :data:`FLUSH_INTERVAL` passes (a background
flusher), when :data:`FLUSH_BYTES` accumulate, and always before anything
else the engine sends (a display, a result, an error, the reply), so that
the controller sees each rank's output in the order it was written and a
cell's output is complete when its reply arrives.
"""

from __future__ import annotations

import codecs
import ctypes
import io
import os
import select
import threading
from collections.abc import Mapping
from typing import Callable

__all__ = ["FLUSH_BYTES", "FLUSH_INTERVAL", "FdCapture", "RankStream"]

try:  # C stdio buffers are flushed before a cell's output is declared complete
    _libc: ctypes.CDLL | None = ctypes.CDLL(None)
except OSError:
    _libc = None

FLUSH_INTERVAL = 0.05  # seconds: live output within a twentieth of a second
FLUSH_BYTES = 64 * 1024

Sender = Callable[[str, dict], None]


class RankStream(io.TextIOBase):
    """A text stream whose writes become ``stream`` messages."""

    def __init__(self, name: str, send: Sender, fileno: int | None = None) -> None:
        super().__init__()
        self.name = name
        self._send = send
        self._fileno = fileno
        self._parts: list[str] = []
        self._size = 0
        self._lock = threading.Lock()

    # io.TextIOBase interface -------------------------------------------------
    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    @property
    def errors(self) -> str:  # type: ignore[override]
        return "replace"

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        if self._fileno is None:
            raise io.UnsupportedOperation("fileno")
        return self._fileno

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        if not text:
            return 0
        with self._lock:
            self._parts.append(text)
            self._size += len(text)
            full = self._size >= FLUSH_BYTES
        if full:
            self.flush()
        return len(text)

    def flush(self) -> None:
        """Send what was written so far (from any thread)."""
        with self._lock:
            if not self._parts:
                return
            text = "".join(self._parts)
            self._parts.clear()
            self._size = 0
            # Sent under the lock: two flushes never reorder their chunks.
            self._send("stream", {"name": self.name, "text": text})

    @property
    def pending(self) -> bool:
        return bool(self._parts)


class FdCapture:
    """Redirect file descriptors 1 and 2 into pipes and feed them to RankStreams.

    The original descriptors are kept (``original_stderr``) for messages that
    must reach the supervisor's terminal even when the engine is broken.
    ``pipes`` may give the pipe (read end, write end) to use for a descriptor,
    e.g. one whose read end another process also holds; ``watch(fd, data)``,
    if given, sees every chunk read, before it is queued.
    """

    def __init__(
        self,
        streams: dict[int, RankStream],
        pipes: Mapping[int, tuple[int, int]] | None = None,
        watch: Callable[[int, bytes], None] | None = None,
    ) -> None:
        self.streams = streams
        self.watch = watch
        self.original_stderr = os.dup(2)
        self._pipes: dict[int, int] = {}  # read end -> target fd
        self._decoders: dict[int, codecs.IncrementalDecoder] = {}
        self._lock = threading.Lock()
        for fd in streams:
            r, w = (pipes or {}).get(fd) or os.pipe()
            os.dup2(w, fd)
            os.close(w)
            os.set_blocking(r, False)
            self._pipes[r] = fd
            self._decoders[r] = codecs.getincrementaldecoder("utf-8")("replace")
        self._stop_r, self._stop_w = os.pipe()
        self._thread = threading.Thread(target=self._run, name="ipympi-fd-capture", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        readers = [*self._pipes, self._stop_r]
        while True:
            try:
                ready, _, _ = select.select(readers, [], [])
            except InterruptedError:
                continue
            if self._stop_r in ready:
                return
            for r in ready:
                self._drain(r)

    def _drain(self, r: int) -> None:
        with self._lock:
            while True:
                try:
                    data = os.read(r, 65536)
                except BlockingIOError:
                    return
                except OSError:
                    return
                if not data:
                    return
                if self.watch is not None:
                    self.watch(self._pipes[r], data)
                text = self._decoders[r].decode(data)
                self.streams[self._pipes[r]].write(text)

    def sync(self) -> None:
        """Move everything already written to fds 1/2 (C stdio included) into the streams."""
        if _libc is not None:
            _libc.fflush(None)
        for r in self._pipes:
            self._drain(r)
