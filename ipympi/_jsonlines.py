"""A helper process driven through its standard streams, one JSON object per line.

The host agents of ``ipympi.run --hosts`` (:mod:`ipympi._node`) and the engine
supervisors of notebook sessions (:mod:`ipympi.engine.supervisor`) are such
processes: commands go to their stdin, events come from their stdout, and end
of file on their stdin tells them to end what they started and exit. They may
run here or on another host behind ssh or srun, whose own complaints
("Connection refused") arrive on stderr: :class:`JsonLinesProcess` keeps the
last lines of it to explain a failure, when asked to capture it.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import subprocess
import time
from collections.abc import Mapping, Sequence
from typing import Any, Callable

__all__ = ["JsonLinesProcess"]

TAIL_LINES = 20  # lines of stderr kept to explain a failure
REAP_WAIT = 0.5  # seconds to learn the exit status of a process whose events ended


class JsonLinesProcess:
    """One running helper process: ``command()`` in, ``read()`` events out.

    ``fd`` is its event pipe (non-blocking, for the caller's poller); with
    ``capture_stderr``, ``err_fd`` is its stderr pipe, read by
    :meth:`read_errors`. The process gets its own session (a terminal's Ctrl-C
    does not reach it), and ``preexec`` runs in the child before exec.
    """

    def __init__(
        self,
        argv: Sequence[str],
        env: Mapping[str, str] | None = None,
        *,
        capture_stderr: bool = False,
        preexec: Callable[[], None] | None = None,
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
        self.errors.extend(lines)
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
