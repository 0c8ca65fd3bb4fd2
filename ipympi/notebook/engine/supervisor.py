"""The supervisor: a warmed-up template process that forks the engines.

The controller kernel runs many threads, and a process with threads must not
fork. So the controller starts this single-threaded process once
(``python -m ipympi.notebook.engine``); it imports everything an engine needs
(IPython's shell, zmq, numpy, the MPI core) and then forks one engine per
rank whenever the controller asks, in a few milliseconds each. It creates no
zmq context: a context does not survive a fork.

It talks to the controller through its standard streams, one JSON object per
line: commands on stdin (``spawn``, ``signal``, ``exit``), events on stdout
(``ready``, ``spawned``, ``exited``). The pipes are private to the two
processes. When stdin reaches end of file (the controller is gone), the
supervisor kills its engines and exits; on Linux the engines also die with the
supervisor (``PR_SET_PDEATHSIG``).

A session on several hosts runs one supervisor per host, started through ssh
or srun for the others (:mod:`ipympi.notebook.controller.hosts`); its ``spawn``
command then names the ``host`` (as the host list does), the network
interface (``iface``) and the controller's address (``controller``), and the
supervisor makes the world's private directory on its host and picks the
address its engines' tcp sockets bind (:func:`ipympi.launch.hosts.bind_address_for`).
``signal`` (``signal``, ``ranks``) signals engines on its host, which the
controller cannot do itself.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys
import time
import traceback
from typing import Any

from ... import mpi4py as mpi4py_name
from ...launch.jsonlines import CommandLoop

__all__ = ["Supervisor", "main", "preload"]


def preload() -> None:
    """Import what every engine needs, so that a fork starts warm.

    Engines are ranks of the built-in MPI, so ``import mpi4py`` in a cell gives ipympi
    (:mod:`ipympi.mpi4py`; ``IPYMPI_MPI4PY_NAME=0`` keeps whatever is installed).
    """
    mpi4py_name.install()
    import IPython.core.completer
    import IPython.core.interactiveshell  # noqa: F401
    import zmq  # noqa: F401

    with contextlib.suppress(ImportError):
        import numpy  # noqa: F401
    from ...mpi.rc import rc

    rc.initialize = False  # each engine initializes MPI after the fork
    from ... import MPI  # noqa: F401
    from . import shell  # noqa: F401


class Supervisor(CommandLoop):
    """Forks engines on command and reports their exits."""

    def __init__(self, commands: int = 0, events: int = 1) -> None:
        super().__init__(commands, events)
        self.children: dict[int, int] = {}  # pid -> rank
        self.world_dir: str | None = None  # made here, for a world on several hosts

    def end(self) -> None:
        self.kill_all()
        self.remove_world_dir()

    def handle(self, command: dict[str, Any]) -> bool:
        kind = command.get("type")
        if kind == "spawn":
            if command.get("host") is not None:
                from ...launch.hosts import HostError

                try:
                    self.place_world(command)
                except HostError as exc:  # e.g. no such --iface here: no engine can start
                    print(f"ipympi supervisor: {exc}", file=sys.stderr, flush=True)
                    for rank in command["ranks"]:
                        self.emit({"type": "exited", "rank": rank, "pid": None, "returncode": 1})
                    return True
            for rank in command["ranks"]:
                pid = self.fork_engine(int(rank), command)
                self.children[pid] = int(rank)
                self.emit({"type": "spawned", "rank": rank, "pid": pid})
            return True
        if kind == "signal":
            ranks = {int(rank) for rank in command["ranks"]}
            for pid, rank in list(self.children.items()):
                if rank in ranks:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(pid, int(command["signal"]))
            return True
        if kind == "exit":
            return False
        print(f"ipympi supervisor: unknown command {kind!r}", file=sys.stderr)
        return True

    def place_world(self, spec: dict[str, Any]) -> None:
        """Set up a world of a session on several hosts on this host (see the docstring).

        The engines' environments get the world's directory, made here, the
        address to bind, and single-threaded BLAS/OpenMP pools when this
        host's engines fill its cores.
        """
        from ...core.control import ENV_BIND, ENV_SESSION_DIR
        from ...launch.hosts import bind_address_for
        from ...launch.launcher import THREAD_VARS
        from ...launch.sessiondir import make_session_dir

        self.remove_world_dir()
        self.world_dir = make_session_dir()
        bind = bind_address_for(str(spec["host"]), spec.get("iface"), str(spec["controller"]))
        cpus = os.cpu_count()
        crowded = cpus is not None and len(spec["ranks"]) >= cpus
        for env in spec["env"].values():
            env[ENV_SESSION_DIR], env[ENV_BIND] = self.world_dir, bind
            for var in THREAD_VARS if crowded else ():
                if var not in env and var not in os.environ:
                    env[var] = "1"

    def remove_world_dir(self) -> None:
        if self.world_dir is not None:
            from ...launch.sessiondir import remove_session_dir

            remove_session_dir(self.world_dir)
            self.world_dir = None

    def fork_engine(self, rank: int, spec: dict[str, Any]) -> int:
        pid = os.fork()
        if pid:
            return pid
        status = 1
        try:
            os.setpgid(0, 0)  # Ctrl-C of the engine reaches its own children too
            signal.set_wakeup_fd(-1)
            for signum in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
                signal.signal(signum, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            devnull = os.open(os.devnull, os.O_RDWR)
            os.dup2(devnull, 0)
            os.dup2(2, 1)  # never write into the event pipe
            os.close(devnull)
            self.close_wakeup()
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
    return Supervisor().run({"type": "ready", "pid": os.getpid(), "host": socket.gethostname()})
