"""Environment management: Init, Finalize, the world, timers, Abort.

A process started by the launcher (``python -m ipympi.run``) finds its rank,
the world size and the private session directory in ``IPYMPI_*`` environment
variables; any other process is a world of one rank. ``Init`` builds the
engine, binds the rank's socket and starts the progress thread; ``Finalize``
waits for outgoing messages, synchronises with the other ranks and closes
everything. Both run automatically (on import and at exit) unless
``ipympi.rc`` says otherwise, as with mpi4py.

The environment variables are consumed (removed from ``os.environ``) at
``Init``, so a subprocess a rank starts is not mistaken for that rank.
"""

from __future__ import annotations

import atexit
import os
import socket
import sys
import threading
import time
import traceback
from typing import Any

from .._version import __version__
from ..core import control as _control
from ..core.constants import (
    SUBVERSION,
    THREAD_FUNNELED,
    THREAD_MULTIPLE,
    THREAD_SERIALIZED,
    THREAD_SINGLE,
    VERSION,
)
from ..core.errors import ERR_OTHER
from ..core.errors import Exception as MPIException
from ..core.handle import register
from ..core.tracebacks import hide_internal, wants_full
from ..progress.engine import Engine, WaitInfo
from ..progress.largebuf import allow_peer_reads
from ..progress.operation import RECV, SEND, Operation
from ..progress.thread import ProgressThread, signal_self
from ..progress.transport import Transport
from . import bsend as _bsend
from . import finalize_hooks as _finalize_hooks
from .comm import CommImpl, Intracomm
from .errhandling import ERRORS_ABORT, ERRORS_ARE_FATAL, ERRORS_RETURN, Errhandler
from .process import PROCESS
from .rc import setting
from .request import Request
from .spawn import make_parent

__all__ = [
    "COMM_SELF",
    "COMM_WORLD",
    "Finalize",
    "Get_library_version",
    "Get_processor_name",
    "Get_version",
    "Init",
    "Init_thread",
    "Is_finalized",
    "Is_initialized",
    "Is_thread_main",
    "Query_thread",
    "Wtick",
    "Wtime",
    "get_vendor",
]

PEERS_TIMEOUT = 120.0  # seconds a rank of a multi-host world waits for the peer table

# Context ids: COMM_WORLD uses 0/1, COMM_SELF 2/3 (point-to-point/collective);
# Finalize synchronises on its own context so it cannot meet user messages.
WORLD_CONTEXT, SELF_CONTEXT, FINALIZE_CONTEXT = 0, 2, 0xFFFFFFF0

COMM_WORLD = Intracomm._from_impl(None, "COMM_WORLD")
COMM_SELF = Intracomm._from_impl(None, "COMM_SELF")
register(globals(), ("COMM_WORLD", "COMM_SELF"))  # constants (see core/handle.py)
PROCESS.world, PROCESS.self_comm = COMM_WORLD, COMM_SELF


# -- queries allowed at any time ------------------------------------------------
def Get_version() -> tuple[int, int]:
    """The version of the MPI standard implemented: (3, 1)."""
    return (VERSION, SUBVERSION)


def Get_library_version() -> str:
    return f"ipympi {__version__} (MPI {VERSION}.{SUBVERSION}, Python {sys.version.split()[0]})"


def get_vendor() -> tuple[str, tuple[int, ...]]:
    """``("ipympi", version tuple)``, like ``mpi4py.MPI.get_vendor()``."""
    return ("ipympi", tuple(int(p) for p in __version__.split(".")[:3] if p.isdigit()))


def Is_initialized() -> bool:
    return PROCESS.initialized


def Is_finalized() -> bool:
    return PROCESS.finalized


# -- initialization -----------------------------------------------------------
def Init() -> None:
    """Start MPI (done automatically on import unless ``ipympi.rc.initialize`` is off),
    at the thread level ``rc.thread_level`` (``THREAD_SINGLE`` if ``rc.threads`` is off)."""

    Init_thread(_THREAD_LEVELS[setting("thread_level")] if setting("threads") else THREAD_SINGLE)


_THREAD_LEVELS = {
    "single": THREAD_SINGLE,
    "funneled": THREAD_FUNNELED,
    "serialized": THREAD_SERIALIZED,
    "multiple": THREAD_MULTIPLE,
}


def Init_thread(required: int = THREAD_MULTIPLE) -> int:
    """Start MPI; returns the thread level provided: the one required, up to
    ``THREAD_MULTIPLE``.

    Any thread may call MPI at any time, and several may wait in MPI calls at
    once (on messages, requests, probes, or collectives on different
    communicators): they take turns at the rank's socket (``progress.sharing``).
    """
    if PROCESS.finalized:
        raise MPIException(ERR_OTHER, "Init: MPI has been finalized and cannot be restarted")
    if PROCESS.initialized:
        raise MPIException(ERR_OTHER, "Init: MPI is already initialized (Init may be called once)")
    if not PROCESS.started:  # a session may have started the engine already
        start_engine()
    COMM_WORLD._impl, COMM_SELF._impl = _PREDEFINED
    make_parent()
    PROCESS.thread_level = min(required, THREAD_MULTIPLE)
    PROCESS.main_thread = threading.current_thread()
    PROCESS.initialized = True

    if setting("finalize") in (None, True):
        atexit.register(_finalize_at_exit)
    return PROCESS.thread_level


# The states of COMM_WORLD and COMM_SELF, made with the engine, given to them by Init.
_PREDEFINED: list[Any] = [None, None]


def start_engine() -> None:
    """Join the other ranks: the engine, the rank's socket and the progress thread.

    ``Init`` does it, or the first ``Session.Init`` of a program that uses sessions
    only; the world model's communicators become usable at ``Init``.
    """
    env = os.environ
    rank = int(env.pop(_control.ENV_RANK, "0"))
    size = int(env.pop(_control.ENV_SIZE, "1"))
    base = int(env.pop(_control.ENV_WORLD_BASE, "0"))  # > 0 in spawned processes
    PROCESS.parent = env.pop(_control.ENV_PARENT, "")
    PROCESS.appnum = int(env.pop(_control.ENV_APPNUM, "0"))
    PROCESS.can_spawn = env.pop(_control.ENV_SPAWN, "") == "1"
    universe = env.pop(_control.ENV_UNIVERSE, "")
    if universe:
        PROCESS.universe_size = int(universe)
    session_dir = env.pop(_control.ENV_SESSION_DIR, "")
    ctl = env.pop(_control.ENV_CTL, "")
    key = _control.session_key(env.pop(_control.ENV_KEY, ""))
    nodes = _control.decode_nodes(env.pop(_control.ENV_NODES, ""), size)
    bind_address = env.pop(_control.ENV_BIND, "") or None
    host = env.pop(_control.ENV_HOST, "")
    PROCESS.launched = bool(session_dir)
    transport = None
    if session_dir:
        transport = Transport(rank, session_dir, ctl or None, key, nodes, bind_address, size)
        PROCESS.host = host
    engine = Engine(rank, base + size, transport)
    PROCESS.engine = engine
    PROCESS.world_ranks = list(range(base, base + size))
    handler = default_errhandler()
    _PREDEFINED[:] = [
        CommImpl(
            engine, WORLD_CONTEXT, PROCESS.world_ranks, rank - base, "MPI_COMM_WORLD", handler, True
        ),
        CommImpl(engine, SELF_CONTEXT, [rank], 0, "MPI_COMM_SELF", handler, True),
    ]
    PROCESS.started = True
    if transport is not None:
        attach_transport(engine, transport, bool(ctl))


def attach_transport(engine: Engine, transport: Transport, ctl: bool) -> None:
    """Start what a rank with a transport runs: say hello to the launcher (``ctl``), start
    the progress thread. At start-up, or when a singleton starts processes (``Spawn``)."""
    engine.attach(transport)
    sys.setswitchinterval(0.0005)  # background progress answers within ~0.6 ms
    allow_peer_reads()
    rank = engine.rank
    if ctl:
        hello = {"type": "hello", "rank": rank, "pid": os.getpid(), "host": PROCESS.host_name()}
        if transport.tcp is not None:
            hello["data"] = transport.tcp.endpoint
        transport.send_control(hello)
        if transport.tcp is not None:
            transport.tcp.set_peers(_wait_for_peers(transport, engine.size))
    progress = ProgressThread(engine, abort=PROCESS.abort)
    PROCESS.progress = engine.progress = progress
    progress.start()
    _install_excepthook()


PROCESS.attach_transport = attach_transport


def _wait_for_peers(transport: Any, size: int) -> list[str]:
    """Every rank's tcp endpoint: the launcher sends them once all ranks have said hello.

    Signals the launcher forwards meanwhile (Ctrl-C) are delivered; a launcher
    that never answers ends the wait after ``PEERS_TIMEOUT`` seconds.
    """

    deadline = time.monotonic() + PEERS_TIMEOUT
    while (left := deadline - time.monotonic()) > 0:
        if not transport.ctl.poll(int(left * 1000) + 1):
            continue
        msg = transport.recv_control()
        if msg is None:
            continue
        if msg["type"] == _control.PEERS:
            endpoints = [str(e) for e in msg["endpoints"]]
            if len(endpoints) == size:
                return endpoints
        elif msg["type"] == _control.SIGNAL:
            signal_self(int(msg["signal"]))
    raise MPIException(
        ERR_OTHER,
        f"Init: the other ranks' addresses did not arrive within {PEERS_TIMEOUT:g} s "
        "(did every host start its ranks?)",
    )


def default_errhandler() -> Errhandler:
    """The error handler that ``mpi4py.rc.errors`` (``ipympi.rc.errors``) gives the
    predefined communicators, new windows, sessions opened without one and (but with
    "default") files, as mpi4py does: ``ERRORS_RETURN`` for "exception" (the default),
    ``ERRORS_ARE_FATAL`` for "default" (MPI's own default) and "fatal", ``ERRORS_ABORT``
    for "abort"."""
    errors = setting("errors")
    if errors in ("fatal", "default"):
        return ERRORS_ARE_FATAL
    if errors == "abort":
        return ERRORS_ABORT
    return ERRORS_RETURN


def Query_thread() -> int:
    return PROCESS.thread_level


def Is_thread_main() -> bool:
    return threading.current_thread() is PROCESS.main_thread


# -- finalization -------------------------------------------------------------
def Finalize() -> None:
    """Shut MPI down: wait for outgoing messages, synchronise with every rank, close."""
    engine = PROCESS.live_engine("Finalize")

    _finalize_hooks.run()  # e.g. COMM_SELF attribute delete callbacks
    _bsend.detach(engine, PROCESS)
    if engine.transport is not None:
        if not PROCESS.failed:
            engine.enter()
            try:
                engine.wait_until(
                    lambda: engine.pending_sends() == 0,
                    lambda: WaitInfo("Finalize (waiting for sends)", "MPI_COMM_WORLD", -1, -1),
                )
                _finalize_barrier(engine)
            finally:
                engine.leave()
        engine.finalized = True
        if PROCESS.progress is not None:
            PROCESS.progress.stop()
        # Correct programs have received every message before Finalize; the
        # linger only matters for frames to ranks that already ended in error.
        engine.transport.close(linger_ms=0 if PROCESS.failed else 1000)
    engine.finalized = True
    PROCESS.finalized = True
    COMM_WORLD._impl = None
    COMM_SELF._impl = None


def close_engine() -> None:
    """End a program's MPI without the world model's synchronisation: wait for the
    outgoing messages, then close (a sessions-only program, at exit)."""
    engine = PROCESS.engine
    if engine is None or engine.finalized:
        return
    if engine.transport is not None:
        if not PROCESS.failed:
            engine.enter()
            try:
                engine.wait_until(
                    lambda: engine.pending_sends() == 0,
                    lambda: WaitInfo("Session.Finalize (waiting for sends)", "", -1, -1),
                )
            finally:
                engine.leave()
        engine.finalized = True
        if PROCESS.progress is not None:
            PROCESS.progress.stop()
        engine.transport.close(linger_ms=0 if PROCESS.failed else 1000)
    engine.finalized = True
    PROCESS.finalized = True


def _finalize_barrier(engine: Engine) -> None:
    """Everyone reports to rank 0, which then releases everyone."""
    ranks = PROCESS.world_ranks
    if len(ranks) == 1:
        return
    rank = engine.rank

    def send(dest: int) -> None:
        engine.start_send(
            Operation(SEND, None, "Finalize", dest, 0), b"", dest, FINALIZE_CONTEXT, rank, 0, False
        )

    def recv(source: int) -> None:
        op = Operation(RECV, None, "Finalize", source, 0)
        engine.start_recv(op, FINALIZE_CONTEXT, source, 0)
        engine.wait(op, lambda: WaitInfo("Finalize", "MPI_COMM_WORLD", source, 0))

    if rank == ranks[0]:
        for source in ranks[1:]:
            recv(source)
        for dest in ranks[1:]:
            send(dest)
    else:
        send(ranks[0])
        recv(ranks[0])


def _finalize_at_exit() -> None:
    if PROCESS.initialized and not PROCESS.finalized:
        try:
            Finalize()
        except BaseException as exc:  # at exit there is nobody left to raise to
            reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            print(f"ipympi: Finalize at exit failed: {reason}", file=sys.stderr)


_MAX_TEXT = 1 << 16  # the end of a longer traceback goes to the launcher


def _install_excepthook() -> None:
    """An uncaught exception skips the synchronising part of Finalize.

    The launcher sees the non-zero exit and ends the other ranks, instead of
    them waiting in Finalize for a rank that has died. Its traceback, without
    ipympi's own frames (unless ``IPYMPI_TRACEBACK=full``), goes to the launcher,
    which prints equal ones of several ranks once (:mod:`ipympi.core.tracebacks`);
    without a launcher to tell, the rank prints it as Python would.
    """
    previous = sys.excepthook

    def hook(exc_type: Any, exc: Any, tb: Any) -> None:
        PROCESS.failed = True
        if not wants_full(os.environ):
            tb = hide_internal(tb)
            if exc is not None and exc.__traceback__ is not None:
                exc.__traceback__ = tb
        engine = PROCESS.engine
        transport = engine.transport if engine is not None else None
        if transport is None or transport.ctl is None or exc is None:
            previous(exc_type, exc, tb)
            return
        text = "".join(traceback.format_exception(exc_type, exc, tb))
        rank = engine.rank if engine is not None else 0
        try:
            transport.send_control({"type": "error", "rank": rank, "text": text[-_MAX_TEXT:]})
        except Exception:
            previous(exc_type, exc, tb)

    sys.excepthook = hook


# -- timers, names, buffers ----------------------------------------------------------
_T0 = time.perf_counter()


def Wtime() -> float:
    """Wall-clock seconds since an arbitrary origin fixed for the process's life."""
    return time.perf_counter() - _T0 + 1.0


def Wtick() -> float:
    return time.get_clock_info("perf_counter").resolution


def Get_processor_name() -> str:
    return socket.gethostname()


def Attach_buffer(buf: Any) -> None:
    """Attach the process's buffer for buffered sends (a buffer or ``BUFFER_AUTOMATIC``)."""
    _bsend.attach(PROCESS, buf)


def Detach_buffer() -> Any:
    """Wait until the buffered messages have left, then return the process's buffer."""
    return _bsend.detach(PROCESS.engine, PROCESS)


def Flush_buffer() -> None:
    """Wait until every message in the process's buffer has left (MPI 4.1)."""
    _bsend.flush(PROCESS.engine, PROCESS)


def Iflush_buffer() -> Any:
    """Nonblocking ``Flush_buffer``: a request completing once the buffer is empty."""

    return Request._of(_bsend.iflush(PROCESS, COMM_WORLD, "Iflush_buffer"))


def Pcontrol(level: int) -> None:
    """Profiling control: accepted and ignored, as the standard allows."""
    return None
