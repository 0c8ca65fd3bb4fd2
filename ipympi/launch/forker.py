"""Fork processes from a warmed-up template: the part rank templates and engine supervisors share.

Starting a Python process that imports MPI, zmq and the rest costs a few tenths of a
second of CPU; forking one from a process that has already imported them costs a few
milliseconds. So a launcher starts, once per host, a single-threaded *template*
process that imports what its children need and creates no zmq context (a context
does not survive a fork), and asks it to fork each child. Two helpers do this: the
rank template of ``ipympi.run`` (:mod:`ipympi.launch.template`) and the engine
supervisor of notebook sessions (:mod:`ipympi.notebook.engine.supervisor`). Both are
:class:`Forker` command loops (:class:`~ipympi.launch.jsonlines.CommandLoop`): commands
on stdin, events on stdout, one JSON object per line.

:meth:`Forker.fork_child` makes a child that looks freshly started: its own process
group, the signal dispositions of a new interpreter (SIGINT raises
``KeyboardInterrupt``; SIGTERM, SIGHUP, SIGCHLD default), standard streams of its own
and its environment, none of the template's pipes, and, on Linux, death with the
template (``PR_SET_PDEATHSIG``), which itself dies with its launcher. The loop reaps
children and reports each exit (``exited``: ``rank``, ``pid``, ``returncode``, -n after
signal n); ``signal`` commands signal children's process groups; at the end every
child left is killed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
import traceback
from collections.abc import Iterable, Mapping
from typing import Any, Callable

from .jsonlines import CommandLoop

__all__ = ["Forker", "die_with_parent"]

_PR_SET_PDEATHSIG = 1
_KILL_WAIT = 2.0  # seconds to reap children after SIGKILL at the end
_HELD = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}  # blocked while a child is made


def die_with_parent() -> bool:
    """Ask Linux to SIGKILL this process when its parent dies; False where it cannot.

    Exits at once if the parent is already gone (init adopted this process).
    """
    if not sys.platform.startswith("linux"):
        return False
    parent = os.getppid()
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):
        return False
    if os.getppid() != parent or parent == 1:
        os._exit(1)
    return True


class Forker(CommandLoop):
    """A template process's command loop: forks children, reaps them, reports exits."""

    def __init__(self, commands: int = 0, events: int = 1) -> None:
        super().__init__(commands, events)
        self.children: dict[int, int] = {}  # pid -> rank
        self.private_fds: list[int] = []  # other fds a child must not keep

    # -- making a child -------------------------------------------------------------
    def fork_child(
        self,
        rank: int,
        env: Mapping[str, str] | None,
        body: Callable[[], int],
        stdio: tuple[int, int, int] | None = None,
    ) -> int:
        """Fork a child that runs ``body()`` and exits with its status; its pid here.

        ``env`` replaces the child's environment (None: keep the template's); ``stdio``
        are the descriptors to become its stdin, stdout and stderr (None: /dev/null, and
        stdout joins stderr, so that nothing reaches the event pipe). ``body`` must flush
        what it writes: the child ends with ``os._exit``.
        """
        # A signal for the child may come before it has its own handlers (it is signalled
        # as soon as its pid is known): held back until then, not taken by the template's.
        held = signal.pthread_sigmask(signal.SIG_BLOCK, _HELD)
        pid = os.fork()
        if pid:
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
            self.children[pid] = rank
            with contextlib.suppress(OSError):  # the child does it too: whichever runs first
                os.setpgid(pid, pid)
            return pid
        status = 1
        try:
            self._become_child(env, stdio)
            signal.pthread_sigmask(signal.SIG_SETMASK, held)
            status = body()
        except BaseException:
            with contextlib.suppress(Exception):
                os.write(2, f"ipympi: process {rank}: {traceback.format_exc()}".encode())
        finally:
            os._exit(status)

    def _become_child(
        self, env: Mapping[str, str] | None, stdio: tuple[int, int, int] | None
    ) -> None:
        with contextlib.suppress(OSError):
            os.setpgid(0, 0)  # Ctrl-C of the child reaches its own children too
        signal.set_wakeup_fd(-1)
        for signum in (signal.SIGCHLD, signal.SIGTERM, signal.SIGHUP):
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        die_with_parent()
        if stdio is None:
            devnull = os.open(os.devnull, os.O_RDWR)
            stdio = (devnull, 2, 2)
        for target, fd in enumerate(stdio):
            if fd != target:
                os.dup2(fd, target)
        for fd in {*stdio, *self.private_fds}:
            if fd > 2:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.close_wakeup()
        if env is not None:
            os.environ.clear()
            os.environ.update(env)

    # -- the children's lives ---------------------------------------------------------
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

    def signal_children(self, signum: int, ranks: Iterable[int] | None = None) -> None:
        """Signal the process groups of the children of ``ranks`` (default: all)."""
        wanted = None if ranks is None else {int(rank) for rank in ranks}
        for pid, rank in list(self.children.items()):
            if wanted is None or rank in wanted:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pid, signum)

    def handle_signal(self, command: dict[str, Any]) -> None:
        """The ``signal`` command: ``signal`` (int), ``ranks`` (optional list)."""
        self.signal_children(int(command["signal"]), command.get("ranks"))

    def kill_all(self) -> None:
        self.signal_children(signal.SIGKILL)
        deadline = time.monotonic() + _KILL_WAIT
        while self.children and time.monotonic() < deadline:
            self.reap()
            time.sleep(0.01)

    def end(self) -> None:
        self.kill_all()
