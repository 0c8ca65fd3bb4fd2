"""Shared fixtures: run real MPI programs on N ranks through the launcher."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Callable

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    for key in [k for k in env if k.startswith("IPYMPI_")]:
        del env[key]
    return env


RunMPI = Callable[..., subprocess.CompletedProcess]


@pytest.fixture
def run_mpi(tmp_path: Path) -> RunMPI:
    """``run_mpi(n, source, *args, timeout=30, launcher_args=())`` runs ``source`` on n ranks.

    ``input`` (text) or ``stdin`` (a descriptor, or ``subprocess.DEVNULL``) is the
    launcher's standard input; by default it inherits the test's.

    The program text is dedented and written to a file; the launcher's own
    ``--timeout`` ends a hung job with a report well before the test's timeout.
    Returns the completed process (stdout/stderr as text).
    """
    counter = iter(range(1000))

    def run(
        n: int,
        source: str,
        *args: str,
        timeout: float = 30,
        launcher_args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
        input: str | None = None,
        stdin: int | None = None,
    ) -> subprocess.CompletedProcess:
        path = tmp_path / f"prog{next(counter)}.py"
        path.write_text(textwrap.dedent(source))
        cmd = [
            sys.executable,
            "-m",
            "ipympi.run",
            "-n",
            str(n),
            "--timeout",
            str(timeout),
            *launcher_args,
            str(path),
            *args,
        ]
        full_env = _env()
        if env:
            full_env.update(env)
        return subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=timeout + 15,
            env=full_env,
            cwd=str(tmp_path),
            input=input,
            stdin=stdin,
        )

    return run


# The common start of multi-process test programs: the world, ring neighbours,
# and checks shared by the point-to-point and environment tests. Test modules
# append their own helpers (a later definition replaces one of these).
MPI_PRELUDE = '''
import time
import numpy as np
from ipympi import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
nxt, prv = (rank + 1) % size, (rank - 1) % size


def raises(cls, fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except MPI.Exception as exc:
        assert exc.Get_error_class() == cls, (exc, cls)
        return exc
    raise AssertionError(f"{fn} did not raise MPI.Exception of class {cls}")


def is_empty(st):
    return (st.source, st.tag, st.error, st.Get_count(), st.Get_elements(MPI.INT),
            st.Is_cancelled()) == (MPI.ANY_SOURCE, MPI.ANY_TAG, MPI.SUCCESS, 0, 0, False)


def is_proc_null(st):
    return (st.Get_source(), st.Get_tag(), st.Get_count(), st.Get_count(MPI.INT),
            st.Get_count(MPI.DOUBLE)) == (MPI.PROC_NULL, MPI.ANY_TAG, 0, 0, 0)


def dirty():
    """A status with every field set, to see which fields a call writes."""
    st = MPI.Status()
    st.source, st.tag, st.error = 1234, 5678, MPI.ERR_OTHER
    return st


def handshake():
    """Tell prv it may now send to me; return once nxt says I may send to it."""
    comm.sendrecv(None, prv, 998, None, nxt, 998)


def release():
    """Tell nxt it may now receive from me; return once prv says I may receive from it."""
    comm.sendrecv(None, nxt, 997, None, prv, 997)
'''


def mpi_program(prelude: str, body: str, ok: bool = True) -> str:
    """A test program: ``prelude``, the dedented ``body``, then ``OK <rank>`` if ``ok``."""
    end = '\nprint(f"OK {rank}", flush=True)\n' if ok else "\n"
    return prelude + textwrap.dedent(body) + end


def assert_ok(proc: subprocess.CompletedProcess, n: int | None = None) -> None:
    """The job exited 0 and, if ``n`` is given, every rank printed ``OK <rank>``."""
    detail = f"exit {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    assert proc.returncode == 0, detail
    if n is not None:
        oks = sorted(
            int(line.split()[1]) for line in proc.stdout.splitlines() if line.startswith("OK ")
        )
        assert oks == list(range(n)), detail


# -- processes -------------------------------------------------------------------------
def alive(pid: int) -> bool:
    """Whether ``pid`` is a running process (a zombie has ended: not alive). Linux /proc."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def wait_gone(pids: list[int] | set[int], timeout: float = 10.0) -> list[int]:
    """Poll until none of ``pids`` is alive, at most ``timeout`` s; those still alive."""
    deadline = time.monotonic() + timeout
    left = [p for p in pids if alive(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [p for p in left if alive(p)]
    return left
