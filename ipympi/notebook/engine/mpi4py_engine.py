"""An engine on a real MPI, started by mpiexec or srun.

``python -m ipympi.notebook.engine.mpi4py_engine``.

The same shell as an engine of the built-in MPI (:mod:`ipympi.notebook.engine.shell`:
output capture, rich displays, results, errors, push/pull/apply, completion),
where ``MPI`` is ``mpi4py.MPI``, ``comm`` is ``MPI.COMM_WORLD``, and ``rank``
and ``size`` are its rank and size. The built-in MPI is never imported here.

The MPI launcher starts this module once per rank; it runs as a keeper with
the engine as its child (:mod:`ipympi.notebook.engine.keeper`). Everything the engine
needs comes from the environment (secrets never travel on a command line):

=======================  ======================================================
``IPYMPI_ENGINES``       the controller's engine ROUTER (``ipc://`` or ``tcp://``)
``IPYMPI_ENGINE_KEY``    hex key signing the engine protocol
``IPYMPI_GEN``           the world's number (part of the engine's identities)
``IPYMPI_CTL``           the world's control ROUTER (:mod:`ipympi.core.control`)
``IPYMPI_KEY``           hex key signing control messages and exit reports
``IPYMPI_SIZE``          the number of ranks the controller asked for
``IPYMPI_WORLD_DIR``     the world's directory, where the rank notes the shared-memory
                         files its MPI maps (:mod:`ipympi.launch.sessiondir`)
=======================  ======================================================

A control thread answers the controller's ``query`` with a ``state`` (idle,
running, or blocked in a call of mpi4py, which :mod:`ipympi.notebook.engine.mpicall`
names; where the main thread is, CPU time, memory) and carries out
``signal``: that is how an interrupt reaches a rank, on any host. A rank
inside an MPI call cannot be interrupted: mpi4py releases the GIL there (the
control thread still answers) but Python runs the signal handler only once
the call has returned. The control thread also ends the engine (its whole
process group) when its connection to the controller drops: no engine
outlives its controller, wherever it runs.

``Comm.Abort`` ends every process of the job at once, so a rank cannot say
it aborted after the fact. The MPI library prints a line on the rank's
standard error first, which the controller must hear of as an ``abort``
control message. The rank's witness (:mod:`ipympi.notebook.engine.keeper`), a process
that outlives the job's end, sends it: mpi4py holds the GIL in ``Abort``, so
while the call lasts no thread of the engine reads that line, and the
witness finds it unread in the engine's stderr pipe. MPICH's ``Abort`` may
also return before the launcher's kill arrives: then the engine reads the
line itself, copies it to the witness's notes, and sends no reply (the cell
did not succeed) until the kill comes, or :data:`ABORT_WAIT` seconds have
passed without it.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import sys
import threading
import time
from typing import Any, Callable

from ...core import control as ctl
from ...launch.sessiondir import note_shared_memory
from ...progress.introspect import (
    describe_location,
    injected_fault,
    resident_bytes,
    signal_self,
    source_line,
)
from .keeper import keep, launcher_rank
from .mpicall import BLOCKING, StayProbe, current_call

__all__ = [
    "ENV_ENGINES",
    "ENV_ENGINE_KEY",
    "ENV_GEN",
    "ENV_WORLD_DIR",
    "abort_in",
    "main",
    "report_abort",
    "send_abort",
]

ENV_ENGINES = "IPYMPI_ENGINES"
ENV_ENGINE_KEY = "IPYMPI_ENGINE_KEY"
ENV_GEN = "IPYMPI_GEN"
ENV_WORLD_DIR = "IPYMPI_WORLD_DIR"  # where a rank notes the shared memory its MPI maps
SWITCH_INTERVAL = 0.0005  # seconds: the control thread answers within ~1 ms while code runs
ABORT_LINGER = 2.0  # seconds the witness may take to deliver an abort message
ABORT_WAIT = 10.0  # seconds an engine whose Abort returned waits to be ended, before it replies
ERR_INTERN = 16  # the code of an internal error (MPI.ERR_INTERN of ipympi and of MPICH)

# What MPI libraries print when a rank calls Abort (MPICH, then Open MPI).
_ABORTS = (
    re.compile(
        rb"Abort\((?P<code>-?\d+)\) on node \d+ \(rank \d+ in comm \d+\): "
        rb"application called (?P<reason>MPI_Abort\([^)\n]*\))"
    ),
    re.compile(
        rb"MPI_ABORT was invoked on rank \d+ in communicator (?P<comm>\S+)\s+"
        rb"with errorcode (?P<code>-?\d+)"
    ),
)


def abort_in(data: bytes) -> tuple[int, str] | None:
    """``(code, reason)`` if ``data`` holds an MPI library's report of an ``Abort`` call."""
    if b"MPI_Abort" not in data and b"MPI_ABORT" not in data:
        return None
    for pattern in _ABORTS:
        match = pattern.search(data)
        if match is None:
            continue
        code = int(match["code"])
        groups = match.groupdict()
        if groups.get("reason"):
            return code, groups["reason"].decode(errors="replace")
        return code, f"MPI_Abort({groups['comm'].decode(errors='replace')}, {code})"
    return None


class ControlThread(threading.Thread):
    """The engine's end of the control protocol: states and signals; it ends with its controller."""

    def __init__(self, ctx: Any, address: str, key: bytes, rank: int) -> None:
        import zmq

        super().__init__(name="ipympi-control", daemon=True)
        self.zmq = zmq
        self.key = key
        self.rank = rank
        self.activity: Callable[[], str] = lambda: "running"
        self.main_thread_id = threading.main_thread().ident
        self.probe = StayProbe()  # made here, in the main thread
        self.host = socket.gethostname()
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.IDENTITY, ctl.identity(rank))
        self.sock.setsockopt(zmq.LINGER, 0)
        self.monitor = self.sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        self.sock.connect(address)
        self.address = address
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_w, False)
        self._stopped = False

    def stop(self) -> None:
        self._stopped = True
        with contextlib.suppress(OSError):
            os.write(self._wake_w, b"\0")
        self.join(timeout=5)

    # -- the thread -------------------------------------------------------------------
    def run(self) -> None:
        zmq = self.zmq
        poller = zmq.Poller()
        poller.register(self.sock, zmq.POLLIN)
        poller.register(self.monitor, zmq.POLLIN)
        poller.register(self._wake_r, zmq.POLLIN)
        try:
            while not self._stopped:
                events = dict(poller.poll(1000))
                if self._wake_r in events:
                    os.read(self._wake_r, 4096)
                if self.monitor in events:
                    self._check_connection()
                if self.sock in events:
                    self._serve()
        except BaseException as exc:
            if not self._stopped:
                self._failed(exc)
        finally:
            self.monitor.close(0)
            self.sock.close()
            os.close(self._wake_r)
            os.close(self._wake_w)

    def _failed(self, exc: BaseException) -> None:
        """Without this thread the rank can be neither seen nor interrupted: tell the
        controller what broke (an ``abort`` message, which ends the world) and end
        the rank's processes."""
        reason = f"the engine's control thread failed: {type(exc).__name__}: {exc}"
        msg = {"type": ctl.ABORT, "rank": self.rank, "code": ERR_INTERN, "reason": reason}
        with contextlib.suppress(OSError):
            os.write(2, f"ipympi: rank {self.rank}: {reason}\n".encode(errors="replace"))
        with contextlib.suppress(Exception):
            self.sock.close(0)  # its identity is the abort message's
            send_abort(self.address, self.key, msg)
        with contextlib.suppress(OSError):
            os.killpg(os.getpgrp(), signal.SIGKILL)
        os._exit(ERR_INTERN)

    def _check_connection(self) -> None:
        from zmq.utils.monitor import recv_monitor_message

        while self.monitor.poll(0):
            event = recv_monitor_message(self.monitor)
            if event["event"] == self.zmq.EVENT_DISCONNECTED and not self._stopped:
                # The controller is gone (or has ended this world): so is this engine.
                with contextlib.suppress(OSError):
                    os.killpg(os.getpgrp(), signal.SIGKILL)
                os._exit(1)

    def _serve(self) -> None:
        while True:
            try:
                frame = self.sock.recv(self.zmq.NOBLOCK)
            except self.zmq.Again:
                return
            try:
                msg = ctl.decode(frame, self.key)
            except ctl.ControlProtocolError:
                continue
            injected_fault("control")
            if msg["type"] == ctl.QUERY:
                self.sock.send(ctl.encode(ctl.answer(msg, self.describe()), self.key))
            elif msg["type"] == ctl.SIGNAL:
                signal_self(int(msg["signal"]))

    def describe(self) -> dict[str, Any]:
        """What this rank is doing, as a control-protocol ``state`` message."""
        state: dict[str, Any] = {
            "type": ctl.STATE,
            "rank": self.rank,
            "pid": os.getpid(),
            "host": self.host,
            "state": self.activity(),
        }
        if state["state"] != "idle" and self.main_thread_id is not None:
            frame = sys._current_frames().get(self.main_thread_id)
            state["where"] = describe_location(frame)
            state["line"] = source_line(frame)
            call = current_call(frame)
            if call is not None and call["kind"] in BLOCKING:
                state["state"] = "blocked"
                state.update(call)
                stayed = self.probe.look(call["position"], time.monotonic())
                if stayed is not None:
                    state["stayed"] = round(stayed, 3)  # seconds inside this very call
        state["cpu"] = round(time.process_time(), 4)
        rss = resident_bytes()
        if rss is not None:
            state["rss"] = rss
        return state


def _engine_class() -> type:
    from .shell import RankEngine

    class Mpi4pyEngine(RankEngine):
        """The shared engine, minus what only the built-in MPI can do."""

        aborted: threading.Event | None = None  # set once MPI has said this rank aborts

        def reply(self, content: dict[str, Any], buffers: tuple[bytes, ...] = ()) -> None:
            self.io.flush_output()  # what MPI printed, an Abort included, is seen first
            aborted = self.aborted
            if aborted is not None and aborted.is_set():
                time.sleep(ABORT_WAIT)  # the launcher ends this process meanwhile
                text = f"rank {self.io.rank} called Abort, but the MPI world was not ended"
                content = {"status": "error", "ename": "MPIAbort", "evalue": text}
            super().reply(content, buffers)

        @staticmethod
        def describe_interruption(frame: Any) -> str:
            location = describe_location(frame)
            return f"at {location}" if location else "running"

        def check_after_cell(self, take_mismatch: bool, interrupted: bool = False) -> None:
            return None  # a real MPI keeps its unreceived messages to itself

        def note_traffic(self, content: dict[str, Any]) -> None:
            return None  # and does not count them

        def on_recover(self, msg: Any) -> None:
            self.reply({"positions": {}})  # no collectives of ours to realign

    return Mpi4pyEngine


def _fail(text: str) -> int:
    os.write(2, f"ipympi engine: {text}\n".encode())
    return 1


def serve(stderr_pipe: tuple[int, int], notes: int) -> int:
    """The engine process: join MPI, connect, announce, serve; returns the exit status.

    Its standard error is captured through ``stderr_pipe``, which the witness
    also holds; MPI's ``Abort`` message, if the engine reads it, goes to ``notes``.
    """
    env = os.environ
    engine_key = bytes.fromhex(env.pop(ENV_ENGINE_KEY, ""))
    control_key = ctl.session_key(env.pop(ctl.ENV_KEY, ""))
    try:
        from mpi4py import MPI
    except ImportError as exc:
        return _fail(f"cannot import mpi4py ({exc}): pip install mpi4py, with an MPI")
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    if env.get(ENV_WORLD_DIR):  # removed with the world's directory, however the rank ends
        note_shared_memory(env[ENV_WORLD_DIR], rank)
    expected = int(env.get(ctl.ENV_SIZE, size))
    if size != expected:
        return _fail(
            f"MPI_COMM_WORLD has {size} process(es), not {expected}: the launcher does not "
            f"start processes of the MPI that mpi4py uses ({_library(MPI)})"
        )
    import zmq

    from .shell import close_io, make_shell, open_io, say_hello, serve_until_shutdown

    sys.setswitchinterval(SWITCH_INTERVAL)
    ctx: zmq.Context[Any] = zmq.Context()
    control = ControlThread(ctx, env[ctl.ENV_CTL], control_key, rank)
    address, gen = env[ENV_ENGINES], int(env[ENV_GEN])

    aborted = threading.Event()

    def watch(fd: int, data: bytes) -> None:
        if fd == 2 and abort_in(data) is not None:
            aborted.set()
            with contextlib.suppress(OSError):
                os.write(notes, data)  # for the witness: this process will be gone soon

    io = open_io(ctx, address, rank, gen, engine_key, {2: stderr_pipe}, watch)
    shell = make_shell(io, {"MPI": MPI, "comm": comm, "rank": rank, "size": size})
    engine = _engine_class()(io, shell)
    engine.aborted = aborted
    control.activity = lambda: engine.state
    control.start()
    signal.signal(signal.SIGINT, engine.on_sigint)
    say_hello(io, rank, {"mpi": _library(MPI)})
    status = serve_until_shutdown(engine, MPI.Finalize)
    control.stop()
    close_io(io, ctx)
    return status


def _library(MPI: Any) -> str:
    """``"MPICH 5.0.2"``: the MPI library mpi4py runs on."""
    name, version = MPI.get_vendor()
    return f"{name} {'.'.join(map(str, version))}"


def report_abort(left: bytes) -> None:
    """Tell the controller that this rank called ``Abort``, if ``left`` (its last stderr) says so.

    Runs in the rank's witness, after the engine has gone.
    """
    found = abort_in(left)
    rank = launcher_rank(os.environ)
    if found is None or rank is None:
        return
    code, reason = found
    key = ctl.session_key(os.environ.get(ctl.ENV_KEY, ""))
    msg = {"type": ctl.ABORT, "rank": rank, "code": code, "reason": reason}
    send_abort(os.environ[ctl.ENV_CTL], key, msg)


def send_abort(address: str, key: bytes, msg: dict[str, Any]) -> None:
    """Send the ``abort`` message ``msg`` to the controller at ``address``, on a socket of
    its own; return once it has left, or :data:`ABORT_LINGER` seconds have passed."""
    import zmq

    ctx: zmq.Context[Any] = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.IDENTITY, ctl.identity(int(msg["rank"])))
    sock.setsockopt(zmq.LINGER, int(ABORT_LINGER * 1000))
    sock.connect(address)
    sock.send(ctl.encode(msg, key))
    sock.close()
    ctx.term()


def main() -> int:
    key = ctl.session_key(os.environ.get(ctl.ENV_KEY, ""))
    return keep(serve, key, report_abort)


if __name__ == "__main__":
    sys.exit(main())
