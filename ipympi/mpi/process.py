"""This process's MPI: one object, :data:`PROCESS`, holding what the whole rank shares.

Whether MPI is initialized or finalized, the thread level, the progress engine, the
host name the launcher gave, the predefined communicators, the process's buffer for
buffered sends, and what ends the job (``Abort``, a fatal error handler). The runtime
(``mpi.runtime``: ``Init``, ``Finalize``) is its one writer; every other module reads it
here. So the objects that need to know the world (attributes, groups, error handling,
communicator constructors) import this small module instead of the runtime, which
builds the communicators and therefore sits above them.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, NoReturn

from ..core.constants import THREAD_SINGLE
from ..core.errors import ERR_OTHER
from ..core.errors import Exception as MPIException

if TYPE_CHECKING:
    from ..progress.engine import Engine
    from .bsend import Pool
    from .comm import Comm

__all__ = ["PROCESS", "Process"]


class Process:
    """The MPI state of this process (see the module docstring)."""

    def __init__(self) -> None:
        self.started = False  # Init was called (so the messages below apply)
        self.initialized = False
        self.finalized = False
        self.failed = False  # an uncaught exception: skip the collective part of Finalize
        self.launched = False  # started by a launcher, with peers and a control socket
        self.thread_level = THREAD_SINGLE
        self.main_thread: threading.Thread | None = None
        self.engine: Engine | None = None
        self.progress: Any = None  # the progress thread, when there is one
        self.host = ""  # this rank's host as the launcher names it
        self.world: Comm | None = None  # COMM_WORLD and COMM_SELF (the runtime makes them)
        self.self_comm: Comm | None = None
        self.bsend: Pool | None = None  # the buffer of Attach_buffer (not a communicator's)
        self.sessions = 0  # sessions alive (``Session.Init``; MPI runs for them too)
        self.world_ranks: list[int] = [0]  # the process indexes of COMM_WORLD's ranks
        # Processes started by ``Comm.Spawn``: their parents (``context,base,i;j;...``,
        # "" in others), ``APPNUM``; and ``UNIVERSE_SIZE`` (None: the host's processors).
        self.parent = ""
        self.appnum = 0
        self.can_spawn = False  # the launcher serves Spawn (else a singleton becomes a job)
        # How ``abort`` waits for the launcher to end the job: ``(seconds) -> None``; a
        # singleton's waits for its supervisor (``mpi.singleton``), others sleep.
        self.await_launcher: Any = None
        # The runtime's ``attach_transport(engine, transport, ctl)``: what a singleton
        # calls to join the job its first ``Spawn`` makes (``mpi.singleton``).
        self.attach_transport: Any = None
        self.universe_size: int | None = None

    def why_unusable(self) -> str:
        """Why MPI calls cannot be made now: not initialized yet, or finalized."""
        if self.finalized:
            return "MPI has been finalized; no MPI call is allowed after Finalize"
        return "MPI is not initialized; call MPI.Init() first (or leave ipympi.rc.initialize on)"

    def live_engine(self, call: str) -> Engine:
        """The progress engine, or ``ERR_OTHER`` when MPI is not running (neither
        initialized nor used by a session)."""
        if not (self.initialized or self.sessions) or self.finalized or self.engine is None:
            raise MPIException(ERR_OTHER, f"{call}: {self.why_unusable()}")
        return self.engine

    def host_name(self) -> str:
        """The name of this rank's host as the launcher knows it (else the machine's name).

        Ranks with the same name share a host: its memory, its data sockets, and
        ``Split_type(COMM_TYPE_SHARED)``.
        """
        return self.host or socket.gethostname()

    def job_dir(self) -> str | None:
        """The job's private directory on this host, which goes with the job however it
        ends (None in a process started without the launcher)."""
        transport = self.engine.transport if self.engine is not None else None
        return transport.session_dir if transport is not None else None

    def world_rank(self) -> int | None:
        """This process's rank in ``COMM_WORLD`` (still known after Finalize), else None."""
        impl = self.world._impl if self.world is not None else None
        if impl is not None:
            return int(impl.world_ranks[impl.rank])
        return self.engine.rank if self.engine is not None else None

    # -- ending the job ---------------------------------------------------------------
    def abort(self, code: int, reason: str) -> NoReturn:
        """End every rank: tell the launcher, then exit with ``code``."""
        engine = self.engine
        rank = engine.rank if engine is not None else 0
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        transport = engine.transport if engine is not None else None
        if transport is not None and transport.ctl is not None:
            transport.send_control({"type": "abort", "rank": rank, "code": code, "reason": reason})
            # the launcher ends us; exit on our own if it does not
            (self.await_launcher or time.sleep)(3.0)
        else:
            print(f"ipympi: rank {rank}: {reason}", file=sys.stderr, flush=True)
        os._exit(code & 0xFF)

    def fatal(self, obj: Any, call: str, exc: MPIException) -> NoReturn:
        """ERRORS_ARE_FATAL: name rank, call and error, then end the job."""
        name = ""
        impl = getattr(obj, "_impl", None)
        if impl is not None:
            name = f" on {getattr(impl, 'label', None) or impl.name}"
        self.abort(exc.Get_error_class() or 1, f"fatal error in {call}{name}: {exc}")


PROCESS = Process()
