"""The controller's handle on the engine supervisor process.

A :class:`~ipympi.controller.cluster.Cluster` forks its engines through one
``python -m ipympi.engine`` process, the supervisor, because the threaded
controller kernel must not fork itself. :class:`SupervisorProcess` starts that
process with the session's environment, writes commands to its stdin, turns
what it writes to its stdout into event dicts, and stops it. The pipe
protocol (one JSON object per line: ``spawn``/``exit`` commands, ``ready``/
``spawned``/``exited`` events) is described in :mod:`ipympi.engine.supervisor`.

This class only manages the process and parses its pipe. What the events mean
for the engines and for the requests waiting on them is the cluster's
business: it polls :attr:`SupervisorProcess.fd` with its sockets and handles the
events :meth:`SupervisorProcess.read` returns.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Mapping
from typing import Any

from .._launcher import THREAD_VARS, _die_with_parent

__all__ = ["SupervisorProcess", "engine_environment"]


def engine_environment(env: Mapping[str, str], ranks: int) -> dict[str, str]:
    """The environment of a world's engines: ``env`` with the engines' defaults.

    When the ranks fill every core, BLAS/OpenMP thread pools default to one
    thread (unless ``env`` sets them), as in
    :func:`ipympi._launcher.rank_environment`; figures are drawn inline.
    """
    env = dict(env)
    cpus = os.cpu_count()
    if cpus is not None and ranks >= cpus:
        for var in THREAD_VARS:
            env.setdefault(var, "1")
    env.setdefault("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    env["PYTHONUNBUFFERED"] = "1"
    return env


class SupervisorProcess:
    """One running ``python -m ipympi.engine`` process and its two pipes.

    ``env`` is the session's environment; ``ranks`` is the size of the world
    it is started for (see :func:`engine_environment`). The process gets its
    own session, so the notebook's SIGINT reaches the ranks only through the
    controller, and on Linux it dies with the controller.
    """

    def __init__(self, env: Mapping[str, str], ranks: int) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ipympi.engine"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=engine_environment(env, ranks),
            start_new_session=True,  # the notebook's SIGINT reaches ranks only through us
            preexec_fn=_die_with_parent(),
        )
        assert self.proc.stdout is not None
        self.fd = self.proc.stdout.fileno()  # the event pipe, for the cluster's poller
        os.set_blocking(self.fd, False)
        self._buffer = b""

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def alive(self) -> bool:
        """True until the process has exited (as far as ``poll()`` can tell)."""
        return self.proc.poll() is None

    def command(self, command: dict[str, Any]) -> None:
        """Send one command (``spawn``, ``exit``) as a JSON line on the supervisor's stdin."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(command).encode() + b"\n")
        self.proc.stdin.flush()

    def read(self) -> list[dict[str, Any]] | None:
        """The events in what the event pipe has now (it should be readable).

        Returns the complete lines read so far as dicts (a partial line waits
        for the next read), or None at end of file: the supervisor died (and
        with it, on Linux, its engines). It is then reaped and its pipes are
        closed.
        """
        assert self.proc.stdout is not None
        try:
            data = os.read(self.fd, 65536)
        except BlockingIOError:
            return []
        if not data:
            self.proc.wait()
            for pipe in (self.proc.stdin, self.proc.stdout):
                with contextlib.suppress(OSError):
                    pipe.close()  # type: ignore[union-attr]
            return None
        self._buffer += data
        events = []
        while b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            events.append(json.loads(line))
        return events

    def stop(self, grace: float) -> None:
        """End the process and close its pipes.

        End of file on its stdin makes the supervisor end its engines and
        exit; after ``grace`` seconds it is killed.
        """
        with contextlib.suppress(OSError, ValueError):
            assert self.proc.stdin is not None
            self.proc.stdin.close()  # end of file: the supervisor exits
        try:
            self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(grace)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
