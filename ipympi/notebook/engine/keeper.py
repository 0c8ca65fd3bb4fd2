"""A rank's keeper: the process an MPI launcher starts, which runs the engine as its child.

``mpiexec`` and ``srun`` start one process per rank and tell only how the
whole job ended: when one rank dies they end every other one, and say at best
an exit code per host, often the code of a rank they ended themselves. So a
rank started by them is three processes:

- the *keeper* (the one the launcher started) forks the engine and waits for
  it; when the engine exits, it writes one signed line with its exit status on
  its standard output, which the launcher forwards to the controller, and
  exits with the same status, so the launcher sees the rank end as it did. A
  rank the launcher ended itself (its keeper killed with it) writes nothing:
  the reports name the rank that failed first.
- the *engine* runs in its own process group (an interrupt it sends itself
  reaches its children too) and dies with its keeper. It captures its
  standard error through a pipe the keeper made.
- the *witness* holds the read end of that pipe too, in a process group of
  its own, which the launcher does not end. Once the engine has gone it reads
  what the engine wrote last and never read back (the MPI library's message
  of an ``Abort`` call, which ends every process of the job, keepers
  included, at once; mpi4py holds the GIL meanwhile, so no thread of the
  engine could pass it on), and whatever the engine left it on a second pipe,
  its *notes* (the same message, when the engine did read it back). It hands
  those bytes to a callback and exits.

The keeper passes SIGTERM and SIGHUP on to the engine, and ends it when its
own parent (the launcher's agent on that host) has gone.

Report line, on the keeper's standard output::

    ipympi-exit <hmac> <json>

``json`` is ``{"rank": int | null, "pid": int, "host": str, "returncode": int}``
(the rank as the launcher numbered it, the engine's pid, Popen-style return
code) and ``hmac`` the hex HMAC-SHA256 of its bytes under the world's control
key. Pure functions :func:`report_line` and :func:`parse_report` write and
read it.

This module is imported before the forks: it must stay light (no zmq, no
IPython, no MPI).
"""

from __future__ import annotations

import contextlib
import hmac
import json
import os
import signal
import socket
import threading
import time
from collections.abc import Mapping
from typing import Any, Callable

__all__ = ["REPORT_PREFIX", "keep", "launcher_rank", "parse_report", "report_line"]

REPORT_PREFIX = b"ipympi-exit "
PARENT_POLL = 0.5  # seconds between looks at whether the keeper's own parent is still there
# Where launchers put a process's rank (MPICH/Slurm PMI, PMIx, Open MPI, Slurm).
RANK_VARIABLES = ("PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID")

# Gets its stderr pipe (read end, write end) and its notes (a write end), returns its status.
RunEngine = Callable[[tuple[int, int], int], int]
Witness = Callable[[bytes], None]  # gets the engine's notes and its unread stderr


def _mac(key: bytes, data: bytes) -> str:
    return hmac.new(key, data, "sha256").hexdigest()


def report_line(key: bytes, report: Mapping[str, Any]) -> bytes:
    """The signed line that reports an engine's exit."""
    data = json.dumps(dict(report), separators=(",", ":")).encode()
    return REPORT_PREFIX + _mac(key, data).encode() + b" " + data + b"\n"


def parse_report(line: bytes, key: bytes) -> dict[str, Any] | None:
    """The report in ``line``, or None if it is not a well-signed report line."""
    if not line.startswith(REPORT_PREFIX):
        return None
    mac, _, data = line[len(REPORT_PREFIX) :].strip().partition(b" ")
    if not hmac.compare_digest(mac, _mac(key, data).encode()):
        return None
    try:
        report = json.loads(data)
    except ValueError:
        return None
    if not isinstance(report, dict) or not isinstance(report.get("returncode"), int):
        return None
    return report


def launcher_rank(env: Mapping[str, str]) -> int | None:
    """This process's rank as its launcher numbered it, if the environment says."""
    for name in RANK_VARIABLES:
        with contextlib.suppress(KeyError, ValueError):
            return int(env[name])
    return None


def keep(engine: RunEngine, key: bytes, witness: Witness) -> int:
    """Run ``engine`` in a child process; report its exit; return the status to exit with."""
    parent = os.getppid()
    err_r, err_w = os.pipe()  # the engine's standard error, as it captures it
    notes_r, notes_w = os.pipe()  # end of file on notes_r: the engine has gone
    pid = os.fork()
    if pid == 0:
        status = 1
        try:
            os.close(notes_r)
            os.setpgid(0, 0)
            from .shell import _die_with_parent

            _die_with_parent()
            status = engine((err_r, err_w), notes_w)
        finally:
            os._exit(status)
    with contextlib.suppress(OSError):
        os.setpgid(pid, pid)  # as the child does: no signal may miss the engine's group
    os.close(err_w)
    os.close(notes_w)
    watcher = _start_witness(err_r, notes_r, witness)
    os.close(err_r)
    os.close(notes_r)

    def forward(signum: int, _frame: Any) -> None:
        with contextlib.suppress(OSError):
            os.killpg(pid, signum)

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # interrupts reach the engine by message
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, forward)
    threading.Thread(target=_watch_parent, args=(parent, pid), daemon=True).start()
    _, status = os.waitpid(pid, 0)
    returncode = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    report = {
        "rank": launcher_rank(os.environ),
        "pid": pid,
        "host": socket.gethostname(),
        "returncode": returncode,
    }
    with contextlib.suppress(OSError):
        os.write(1, report_line(key, report))
    with contextlib.suppress(OSError):
        os.waitpid(watcher, os.WNOHANG)
    return 128 - returncode if returncode < 0 else returncode


def _start_witness(err_r: int, notes_r: int, witness: Witness) -> int:
    """Fork the witness (see the module docstring); its pid."""
    pid = os.fork()
    if pid:
        return pid
    try:
        os.setpgid(0, 0)  # not ended with the keeper's group
        left = b""
        while chunk := os.read(notes_r, 65536):  # until the engine has gone
            left += chunk
        os.set_blocking(err_r, False)
        with contextlib.suppress(OSError):  # BlockingIOError: its children still write
            while chunk := os.read(err_r, 65536):
                left += chunk
        if left:
            witness(left)
    finally:
        os._exit(0)


def _watch_parent(parent: int, engine: int) -> None:
    """End the engine and the keeper once the keeper's parent has gone."""
    while os.getppid() == parent:
        time.sleep(PARENT_POLL)
    with contextlib.suppress(OSError):
        os.killpg(engine, signal.SIGKILL)
    os._exit(1)
