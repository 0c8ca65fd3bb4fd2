"""The supervisor: a warmed-up template process that forks the engines.

The controller kernel runs many threads, and a process with threads must not
fork. So the controller starts this single-threaded process once
(``python -m ipympi.engine``); it imports everything an engine needs
(IPython's shell, zmq, numpy, the MPI core) and then forks one engine per
rank whenever the controller asks, in a few milliseconds each. It creates no
zmq context: a context does not survive a fork.

It talks to the controller through its standard streams, one JSON object per
line: commands on stdin (``spawn``, ``exit``), events on stdout (``ready``,
``spawned``, ``exited``). The pipes are private to the two processes. When
stdin reaches end of file (the controller is gone), the supervisor kills its
engines and exits; on Linux the engines also die with the supervisor
(``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sys
import time
import traceback
from typing import Any

__all__ = ["Supervisor", "main", "preload"]


def preload() -> None:
    """Import what every engine needs, so that a fork starts warm."""
    import IPython.core.completer
    import IPython.core.interactiveshell  # noqa: F401
    import zmq  # noqa: F401

    with contextlib.suppress(ImportError):
        import numpy  # noqa: F401
    from .. import rc

    rc.initialize = False  # each engine initializes MPI after the fork
    from .. import MPI  # noqa: F401
    from . import shell  # noqa: F401


class Supervisor:
    """Forks engines on command and reports their exits."""

    def __init__(self, commands: int = 0, events: int = 1) -> None:
        self.commands = commands
        self.events = events
        self.children: dict[int, int] = {}  # pid -> rank
        self._buffer = b""
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)

    def emit(self, event: dict[str, Any]) -> None:
        data = (json.dumps(event) + "\n").encode()
        with contextlib.suppress(BrokenPipeError):
            os.write(self.events, data)

    def run(self) -> int:
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.set_wakeup_fd(self._wake_w)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # interrupts are for engines only
        self.emit({"type": "ready", "pid": os.getpid()})
        try:
            while True:
                self.reap()
                try:
                    ready, _, _ = select.select([self.commands, self._wake_r], [], [], 1.0)
                except InterruptedError:
                    continue
                if self._wake_r in ready:
                    with contextlib.suppress(BlockingIOError):
                        os.read(self._wake_r, 4096)
                if self.commands in ready:
                    data = os.read(self.commands, 65536)
                    if not data:
                        return 0  # the controller is gone
                    self._buffer += data
                    while b"\n" in self._buffer:
                        line, self._buffer = self._buffer.split(b"\n", 1)
                        if line.strip() and self.handle(json.loads(line)) is False:
                            return 0
        finally:
            self.kill_all()

    def handle(self, command: dict[str, Any]) -> bool:
        kind = command.get("type")
        if kind == "spawn":
            for rank in command["ranks"]:
                pid = self.fork_engine(int(rank), command)
                self.children[pid] = int(rank)
                self.emit({"type": "spawned", "rank": rank, "pid": pid})
            return True
        if kind == "exit":
            return False
        print(f"ipympi supervisor: unknown command {kind!r}", file=sys.stderr)
        return True

    def fork_engine(self, rank: int, spec: dict[str, Any]) -> int:
        pid = os.fork()
        if pid:
            return pid
        status = 1
        try:
            os.setpgid(0, 0)  # Ctrl-C of the engine reaches its own children too
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            devnull = os.open(os.devnull, os.O_RDWR)
            os.dup2(devnull, 0)
            os.dup2(2, 1)  # never write into the event pipe
            os.close(devnull)
            for fd in (self._wake_r, self._wake_w):
                os.close(fd)
            os.environ.update(spec["env"][str(rank)])
            from .shell import run_engine

            status = run_engine(rank, spec, bytes.fromhex(spec["key"]))
        except BaseException:
            with contextlib.suppress(Exception):
                os.write(2, f"ipympi engine {rank}: {traceback.format_exc()}".encode())
        finally:
            os._exit(status)

    def reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            rank = self.children.pop(pid, None)
            code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
            self.emit({"type": "exited", "rank": rank, "pid": pid, "returncode": code})

    def kill_all(self) -> None:
        for pid in list(self.children):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        deadline = time.monotonic() + 2.0
        while self.children and time.monotonic() < deadline:
            self.reap()
            time.sleep(0.01)


def main() -> int:
    preload()
    return Supervisor().run()
