"""The supervisor of a singleton that spawns: ``python -m ipympi.launch.supervisor PID FD``.

A program started without the launcher (``python prog.py``) is a world of one process.
On its first ``Comm.Spawn`` it becomes a job (:mod:`ipympi.mpi.singleton`): it starts
this supervisor, which makes the job's session directory and control socket, writes
them as one JSON line to descriptor ``FD`` (``session_dir``, ``ctl``, ``key``), and then
serves the singleton as the launcher serves the ranks of ``ipympi.run``: it starts the
processes ``Spawn`` asks for (:class:`~ipympi.launch.launcher.Job`), forwards their
output, watches for deadlocks, and ends the job when one of them fails.

Its standard input is the singleton's: a line ``failed`` says the singleton ended in an
uncaught exception (the job then ends at once), the end of file that it finalizes.

The singleton, process 0 of the job, is not the supervisor's child: a pidfd tells when
it ends. Its spawned processes never outlive it: when it ends, they are ended (SIGTERM,
then SIGKILL) and the session directory is removed. When it finalizes MPI it closes the
supervisor's standard input and waits for the supervisor, which exits once every spawned
process has ended. A spawned process that fails ends the job: the singleton too.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sys
from typing import Any, Callable

from . import launcher, template
from .launcher import Job

__all__ = ["ParentProcess", "SingletonJob", "main"]


class ParentProcess:
    """A handle on the singleton (process 0), which the supervisor did not start."""

    local = True

    def __init__(self, pid: int) -> None:
        self.rank = 0
        self.pid = pid
        self.hello: dict[str, Any] | None = None
        self.returncode: int | None = None
        self.failed = False  # it reported an uncaught exception
        # it finalizes (closed our stdin) or aborts, and waits for this job to end
        self.finalizing = False
        self.pidfd: int | None = None
        with contextlib.suppress(AttributeError, OSError):
            self.pidfd = os.pidfd_open(pid)

    @property
    def mpi_pid(self) -> int:
        return self.pid

    def poll(self) -> int | None:
        if self.returncode is None and not self._alive():
            self.returncode = 1 if self.failed else 0  # its real status is its parent's
        return self.returncode

    def _alive(self) -> bool:
        if self.pidfd is not None:
            return not select.select([self.pidfd], [], [], 0)[0]
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        return True

    def wait(self, timeout: float | None = None) -> int:
        if self.finalizing:  # it waits for the supervisor: never wait for it
            timeout = 0
        if self.pidfd is not None and self.poll() is None:
            select.select([self.pidfd], [], [], timeout)
        code = self.poll()
        if code is None:
            import subprocess

            raise subprocess.TimeoutExpired(str(self.pid), timeout or 0.0)
        return code

    def send_signal(self, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class SingletonJob(Job):
    """The job of a singleton and the processes it spawns (see the module docstring)."""

    def __init__(self, parent_pid: int, **options: Any) -> None:
        super().__init__([sys.executable], 1, deadlock_check=True, **options)
        self.parent = ParentProcess(parent_pid)
        self._finalizing = False  # the singleton closed our stdin (Finalize), or ended

    def _start_ranks(self, preexec: Callable[[], None] | None) -> None:
        self._preexec = preexec
        if template.enabled(self.env):  # spawned programs are mostly Python: warm it now
            self._start_template()
        self.ranks.append(self.parent)
        if self.parent.pidfd is not None:
            self._watch(self.parent.pidfd, lambda: None)
        with contextlib.suppress(OSError):
            os.set_blocking(0, False)
            self._watch(0, self._read_stdin)

    def _read_stdin(self) -> None:
        try:
            data = os.read(0, 4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if b"failed" in data:  # an uncaught exception: the job fails with it
            self.parent.failed = True
        if not data:
            self._finalizing = self.parent.finalizing = True
            self._unwatch(0)
            if self.parent.failed and self.parent.returncode is None:
                self.parent.returncode = 1  # as good as ended: the job ends with it

    def _on_abort(self, rank: Any, msg: dict[str, Any]) -> None:
        if rank is self.parent:  # it waits for this job's end, then exits with its code
            self._finalizing = self.parent.finalizing = True
        super()._on_abort(rank, msg)

    def _on_error(self, rank: Any, msg: dict[str, Any]) -> None:
        if rank is self.parent:
            self.parent.failed = True
        super()._on_error(rank, msg)

    def _failed(self) -> bool:
        return self._failure is not None or self._abort is not None or self._deadlock is not None

    def _all_exited(self) -> bool:
        children = all(rank.returncode is not None for rank in self.ranks[1:])
        return children and (self._finalizing or self.parent.returncode is not None)

    def _has_outcome(self) -> bool:
        return super()._has_outcome() or self.parent.returncode is not None

    def send_signal(self, sig: int) -> None:
        """Signal the spawned processes; the singleton only when the job failed through
        another process (it gets a Ctrl-C of its own, ends itself after its own ``Abort``
        or uncaught exception, and finishes on its own otherwise)."""
        for rank in self.ranks[1:]:
            rank.send_signal(sig)
        if self._failed() and sig != signal.SIGINT and not self.parent.finalizing:
            self.parent.send_signal(sig)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    parent_pid, report = int(args[0]), int(args[1])
    job = SingletonJob(parent_pid, name="ipympi")
    with launcher._stop_on_signals(job), job:
        try:
            job.start()
            line = {"session_dir": job.session_dir, "ctl": job.ctl_address, "key": job.key}
        except OSError as exc:
            line = {"error": str(exc)}
        with os.fdopen(report, "w") as out:
            out.write(json.dumps(line) + "\n")
        if "error" in line:
            return 1
        return job.wait()


if __name__ == "__main__":
    sys.exit(main())
