"""A singleton becomes a job: what a program started without the launcher does on its
first ``Comm.Spawn``.

It starts its supervisor, ``python -m ipympi.launch.supervisor`` (a process, not an import:
the launcher sits above MPI), which makes a session directory and a control socket and
reports them on a pipe. The singleton then binds its data socket there as process 0,
connects to the control socket and starts its progress thread, exactly as a rank of
``ipympi.run`` does at start-up; from then on the supervisor serves its ``spawn``
requests (:mod:`ipympi.launch.supervisor` says how it watches and ends the job).

At ``Finalize`` the singleton closes the supervisor's standard input and waits for it to
exit, which it does once every spawned process has ended: the job ends with its first
process, and leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import subprocess
import sys
import time

from ..core import control as _control
from ..core.errors import ERR_SPAWN
from ..core.errors import Exception as MPIException
from ..progress.engine import WaitInfo
from ..progress.transport import Transport
from . import finalize_hooks
from .process import PROCESS

__all__ = ["become_job"]

START_TIMEOUT = 60.0  # seconds the supervisor gets to report its session
FAILED_WAIT = 10.0  # seconds a failed singleton waits for the supervisor to end the job
_supervisor: list[subprocess.Popen[bytes]] = []


def become_job(call: str) -> None:
    """Start the supervisor and join its job as process 0 (once)."""
    engine = PROCESS.live_engine(call)
    if _supervisor or engine.transport is not None:
        return
    read_fd, write_fd = os.pipe()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ipympi.launch.supervisor", str(os.getpid()), str(write_fd)],
            stdin=subprocess.PIPE,
            pass_fds=(write_fd,),
        )
    except OSError as exc:
        os.close(read_fd)
        raise MPIException(ERR_SPAWN, f"{call}: cannot start the supervisor: {exc}") from None
    finally:
        os.close(write_fd)
    _supervisor.append(proc)
    PROCESS.await_launcher = lambda seconds: _await(proc, seconds)
    try:
        report = _read_report(read_fd, proc)
    finally:
        os.close(read_fd)
    if "error" in report:
        raise MPIException(ERR_SPAWN, f"{call}: the supervisor failed: {report['error']}")
    key = _control.session_key(str(report["key"]))
    transport = Transport(0, str(report["session_dir"]), str(report["ctl"]), key)
    PROCESS.launched = PROCESS.can_spawn = True
    assert PROCESS.attach_transport is not None  # the runtime's, set as it loads
    PROCESS.attach_transport(engine, transport, True)


def _await(proc: subprocess.Popen[bytes], seconds: float) -> None:
    """At ``Abort``: wait until the supervisor has ended the job (it exits), at most ``seconds``."""
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(seconds)


def _read_report(fd: int, proc: subprocess.Popen[bytes]) -> dict[str, object]:
    """The supervisor's JSON line, read with a deadline."""
    data = b""
    deadline = time.monotonic() + START_TIMEOUT
    while not data.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            proc.kill()
            return {"error": f"no answer within {START_TIMEOUT:g} s"}
        chunk = os.read(fd, 4096)
        if not chunk:
            return {"error": f"it exited with status {proc.wait()}"}
        data += chunk
    report = json.loads(data)
    return report if isinstance(report, dict) else {"error": "a malformed report"}


def _wait_for_children() -> None:
    """At ``Finalize``: let the supervisor end once the spawned processes have ended.

    Meanwhile the process reports itself blocked in ``Finalize``, so that the supervisor's
    deadlock watcher ends a job whose children wait for it; the process then exits with
    the job's status (125 after a deadlock). After an uncaught exception it
    tells the supervisor, which ends the job, and waits at most ``FAILED_WAIT`` seconds.
    """
    if not _supervisor:
        return
    proc = _supervisor.pop()
    if proc.stdin is not None:
        with contextlib.suppress(OSError):
            if PROCESS.failed:  # the supervisor ends the job (and prints the traceback)
                proc.stdin.write(b"failed\n")
            proc.stdin.close()
    engine = PROCESS.engine
    if PROCESS.failed or engine is None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(FAILED_WAIT)
        return
    engine.waiting_since = time.monotonic()
    engine.waiting = _finalize_wait
    try:
        while proc.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(0.1)
    finally:
        engine.waiting = None
    if proc.returncode:  # the job failed (a deadlock, say): end with its status, as ipympi.run
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(proc.returncode & 0xFF)


def _finalize_wait() -> WaitInfo:
    return WaitInfo("Finalize (waiting for the spawned processes)", "MPI_COMM_WORLD", -1, -1)


finalize_hooks.register(_wait_for_children)
