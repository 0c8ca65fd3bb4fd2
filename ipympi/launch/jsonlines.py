"""Helper processes driven through their standard streams, one JSON object per line.

The host agents of ``ipympi.run --hosts`` (:mod:`ipympi.launch.node`) and the engine
supervisors of notebook sessions (:mod:`ipympi.notebook.engine.supervisor`) are such
processes: commands go to their stdin, events come from their stdout, and end
of file on their stdin tells them to end what they started and exit. They may
run here or on another host behind ssh or srun, whose own complaints
("Connection refused") arrive on stderr: :class:`JsonLinesProcess` keeps the
last lines of it to explain a failure, when asked to capture it.
:class:`CommandLoop` is the helper's own side of the conversation.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import select
import subprocess
import time
from collections.abc import Mapping, Sequence
from typing import Any, Callable

__all__ = ["CommandLoop", "JsonLinesProcess"]

TAIL_LINES = 20  # lines of stderr kept to explain a failure
REAP_WAIT = 0.5  # seconds to learn the exit status of a process whose events ended


class JsonLinesProcess:
    """One running helper process: ``command()`` in, ``read()`` events out.

    ``fd`` is its event pipe (non-blocking, for the caller's poller); with
    ``capture_stderr``, ``err_fd`` is its stderr pipe, read by
    :meth:`read_errors`. The process gets its own session (a terminal's Ctrl-C
    does not reach it), ``preexec`` runs in the child before exec, and it inherits
    the descriptors ``pass_fds`` besides its standard streams.
    """

    def __init__(
        self,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        *,
        capture_stderr: bool = False,
        preexec: Callable[[], None] | None = None,
        pass_fds: Sequence[int] = (),
    ) -> None:
        self.argv = list(argv)
        self.proc = subprocess.Popen(
            self.argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE if capture_stderr else None,
            env=None if env is None else dict(env),
            start_new_session=True,
            preexec_fn=preexec,
            pass_fds=tuple(pass_fds),
        )
        assert self.proc.stdout is not None
        self.fd = self.proc.stdout.fileno()
        os.set_blocking(self.fd, False)
        self.err_fd: int | None = None
        if self.proc.stderr is not None:
            self.err_fd = self.proc.stderr.fileno()
            os.set_blocking(self.err_fd, False)
        self.gone = False  # its event pipe reached end of file
        self.errors: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self._untaken: collections.deque[str] = collections.deque(maxlen=TAIL_LINES)
        self._buffer = b""
        self._err_buffer = b""

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def alive(self) -> bool:
        """True until the process has exited (as far as ``poll()`` can tell)."""
        return self.proc.poll() is None

    def command(self, command: Mapping[str, Any]) -> None:
        """Send one command line; a process that is gone ignores it (its events say so)."""
        if self.gone or self.proc.stdin is None:
            return
        with contextlib.suppress(OSError, ValueError):
            self.proc.stdin.write(json.dumps(command).encode() + b"\n")
            self.proc.stdin.flush()

    def read(self) -> list[dict[str, Any]] | None:
        """The complete events in what the event pipe has now; None at end of file.

        At end of file the process is reaped (if it exits within a moment) and
        its stdin and event pipe are closed; a line that is not JSON is kept
        with the errors.
        """
        try:
            data = os.read(self.fd, 1 << 16)
        except BlockingIOError:
            return []
        except OSError:
            data = b""
        if not data:
            self.gone = True
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(REAP_WAIT)
            self.read_errors()
            for pipe in (self.proc.stdin, self.proc.stdout):
                if pipe is not None:
                    with contextlib.suppress(OSError):
                        pipe.close()
            return None
        self._buffer += data
        events = []
        while b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            try:
                events.append(json.loads(line))
            except ValueError:
                self.errors.append(line.decode(errors="replace"))
        return events

    def read_errors(self) -> list[str]:
        """The complete lines its stderr has now (also kept in ``errors``)."""
        if self.err_fd is None:
            return []
        lines = []
        while True:
            try:
                data = os.read(self.err_fd, 1 << 16)
            except (BlockingIOError, OSError):
                break
            if not data:
                if self._err_buffer:
                    lines.append(self._err_buffer.decode(errors="replace"))
                    self._err_buffer = b""
                break
            *complete, self._err_buffer = (self._err_buffer + data).split(b"\n")
            lines += [line.decode(errors="replace") for line in complete]
        lines = [line.rstrip() for line in lines if line.strip()]
        self._keep(lines)
        return lines

    def _keep(self, lines: list[str]) -> None:
        self.errors.extend(lines)
        self._untaken.extend(lines)

    def new_errors(self) -> list[str]:
        """The lines of stderr no caller has taken yet: :meth:`read_errors` returns a
        line once, but :meth:`read` reads them too at the end of the events, keeping
        them in ``errors`` only."""
        self.read_errors()
        lines = list(self._untaken)
        self._untaken.clear()
        return lines

    def exit_note(self) -> str:
        """`` (exit status 255: ssh: connect to host b port 22: Connection refused)``, or ""."""
        status = self.proc.poll()
        said = self.errors[-1] if self.errors else ""
        parts = [f"exit status {status}" if status not in (None, 0) else "", said]
        text = ": ".join(part for part in parts if part)
        return f" ({text})" if text else ""

    def close_stdin(self) -> None:
        """End of file on its stdin: it ends what it started and exits."""
        with contextlib.suppress(OSError, ValueError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()

    def finish(self, deadline: float) -> list[str]:
        """Wait until ``deadline`` (a ``time.monotonic()``) for it to exit, then kill it;
        close its pipes. Returns the lines of stderr not read before."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(max(0.0, deadline - time.monotonic()))
        if self.proc.returncode is None:
            self.proc.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(REAP_WAIT)
        last = self.read_errors()
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        return last

    def stop(self, grace: float) -> list[str]:
        """End of file on its stdin; killed if it has not exited after ``grace`` seconds.
        Returns the lines of stderr not read before."""
        self.close_stdin()
        return self.finish(time.monotonic() + grace)


class CommandLoop:
    """The helper's own side: commands from stdin, events to stdout, children reaped.

    Subclasses say what a command does (:meth:`handle`), what else to watch
    (:meth:`watched`, :meth:`on_readable`), how to notice ended children
    (:meth:`reap`) and how to end everything (:meth:`end`). SIGCHLD wakes the
    loop; SIGINT is ignored (interrupts come as commands); SIGTERM and SIGHUP,
    like end of file on stdin, end the helper after :meth:`end`.
    """

    def __init__(self, commands: int = 0, events: int = 1) -> None:
        self.commands = commands
        self.events = events
        self._buffer = b""
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)

    def emit(self, event: Mapping[str, Any]) -> None:
        """Write one event line (all of it; nothing once the reader is gone)."""
        data = (json.dumps(event) + "\n").encode()
        with contextlib.suppress(BrokenPipeError):
            while data:
                data = data[os.write(self.events, data) :]

    def run(self, first: Mapping[str, Any] | None = None) -> int:
        """Emit ``first`` (if any), then serve until end of file or a false :meth:`handle`."""
        import signal
        import sys

        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(self._wake_w)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        for signum in (signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, lambda *_: sys.exit(0))
        if first is not None:
            self.emit(first)
        try:
            while True:
                self.reap()
                extra = self.watched()
                outs = self.watched_writable()
                try:
                    ready, writable, _ = select.select(
                        [self.commands, self._wake_r, *extra], outs, [], 1.0
                    )
                except InterruptedError:
                    continue
                if self._wake_r in ready:
                    with contextlib.suppress(BlockingIOError):
                        os.read(self._wake_r, 4096)
                for fd in ready:
                    if fd in extra:
                        self.on_readable(fd)
                for fd in writable:
                    self.on_writable(fd)
                if self.commands in ready:
                    more = self._read_commands()
                    self.after_commands()
                    if not more:
                        return 0
        finally:
            self.end()

    def _read_commands(self) -> bool:
        """Handle the complete command lines waiting; False at end of file or when told to."""
        data = os.read(self.commands, 65536)
        if not data:
            return False  # whoever started us is gone
        self._buffer += data
        while b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            if line.strip() and not self.handle(json.loads(line)):
                return False
        return True

    def close_wakeup(self) -> None:
        """Close the wake-up pipe (in a forked child, which must not share it)."""
        for fd in (self._wake_r, self._wake_w):
            with contextlib.suppress(OSError):
                os.close(fd)

    # -- what subclasses say ----------------------------------------------------------
    def handle(self, command: dict[str, Any]) -> bool:
        """Carry out one command; False ends the helper."""
        raise NotImplementedError

    def watched(self) -> list[int]:
        """File descriptors to watch besides stdin."""
        return []

    def on_readable(self, fd: int) -> None:
        """One of :meth:`watched` is readable."""

    def watched_writable(self) -> list[int]:
        """File descriptors waiting to be writable."""
        return []

    def on_writable(self, fd: int) -> None:
        """One of :meth:`watched_writable` is writable."""

    def after_commands(self) -> None:
        """The commands that came together have been handled."""

    def reap(self) -> None:
        """Notice children that have ended (called on every turn of the loop)."""

    def end(self) -> None:
        """End whatever the helper started (it is about to exit)."""
