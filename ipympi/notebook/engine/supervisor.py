"""The supervisor: a warmed-up template process that forks the engines.

The controller kernel runs many threads, and a process with threads must not
fork. So the controller starts this single-threaded process once
(``python -m ipympi.notebook.engine``); it imports everything an engine needs
(IPython's shell, zmq, numpy, the MPI core) and then forks one engine per
rank whenever the controller asks, in a few milliseconds each. It creates no
zmq context: a context does not survive a fork. The forking itself is
:class:`ipympi.launch.forker.Forker`'s, as for the ranks of ``ipympi.run``.

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
import socket
import sys
from typing import Any

from ... import mpi4py as mpi4py_name
from ...launch.forker import Forker

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
    from ...launch.template import preload as preload_mpi

    preload_mpi()  # MPI and its runtime, not started: each engine starts MPI after the fork
    from . import shell  # noqa: F401


class Supervisor(Forker):
    """Forks engines on command and reports their exits (see ``launch.forker``)."""

    def __init__(self, commands: int = 0, events: int = 1) -> None:
        super().__init__(commands, events)
        self.world_dir: str | None = None  # made here, for a world on several hosts

    def end(self) -> None:
        super().end()
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
                self.emit({"type": "spawned", "rank": rank, "pid": pid})
            return True
        if kind == "signal":
            self.handle_signal(command)
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
        def body() -> int:
            from .shell import run_engine

            return run_engine(rank, spec, bytes.fromhex(spec["key"]))

        return self.fork_child(rank, {**os.environ, **spec["env"][str(rank)]}, body)


def main() -> int:
    preload()
    return Supervisor().run({"type": "ready", "pid": os.getpid(), "host": socket.gethostname()})
