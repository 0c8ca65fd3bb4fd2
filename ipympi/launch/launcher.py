"""Run N rank processes as one MPI job: start them, forward output, watch, end.

A :class:`Job` owns its ranks from start to finish. It makes a private session
directory (mode 0700), binds the control ROUTER of :mod:`ipympi.core.control` in it
and starts each rank in its own process group, with the ``IPYMPI_*``
environment and, on Linux, ``PR_SET_PDEATHSIG=SIGKILL`` so that no rank
outlives a killed launcher. One ``zmq.Poller`` loop in the calling thread
watches the control socket, every rank's stdout/stderr pipe, a pidfd per rank
and a wake-up pipe for signals: output is forwarded line by line as it comes
(:mod:`ipympi.launch.forwarding`), exits and control messages are seen at once, and
every wait has a deadline.
A rank's uncaught exception comes as an ``error`` control message (its
traceback without ipympi's frames, :mod:`ipympi.core.tracebacks`): the job prints
each distinct traceback once, headed by the ranks that raised it, before it says
why it ends. The session directory is removed at every end
(:mod:`ipympi.launch.sessiondir`).
The first failure (a non-zero exit, a death by signal, an ``abort`` message, a
stop request) ends the job: every rank's process group gets [SIGINT →] SIGTERM
→ SIGKILL, with a bounded wait between the steps. :class:`Rank` is a
Popen-shaped handle, so the notebook controller can drive engines the same way.

With ``deadlock_check`` (on in :func:`run_job`, so in ``ipympi.run``), a job
also ends when no rank can progress, by the stuck-cell rule of notebooks and
through the same watch of a job as a notebook's cell
(:class:`ipympi.launch.watch.JobWatch`): from ``LOOK_AFTER`` seconds after the
start, every ``LOOK_EVERY`` seconds, the loop asks the running ranks what
they are doing and collects the answers for at most ``LOOK_WAIT`` seconds,
forwarding output and seeing exits meanwhile. When two looks in a row find
every running rank blocked in the same MPI wait, for at least ``STUCK_AFTER``
seconds, having handled no incoming message in between and (where ``/proc``
tells) used less than ``BUSY_CPU`` seconds of CPU time in between (a rank
copying a large message straight out of its peer's memory handles no message
meanwhile), the ranks wait on each other or on ranks that have exited. The
launcher then reports the wait-for graph and every rank's state, ends the
ranks with SIGTERM → SIGKILL and exits with :data:`DEADLOCK_STATUS`
(125). A rank that computes, a long transfer, a loop of short waits and a rank
that has not started its MPI runtime yet all keep the job running.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import IO, Any, Callable, Protocol

import zmq

from ..core import control as ctl
from ..core.control import QUERY_TIMEOUT
from ..core.ranksets import ranks_phrase
from ..core.tracebacks import group_identical, headed
from . import pymain, spawning, template
from .basics import DEADLOCK_STATUS as DEADLOCK_STATUS
from .basics import PROG as PROG
from .basics import THREAD_VARS as THREAD_VARS
from .basics import TIMEOUT_STATUS as TIMEOUT_STATUS
from .basics import _die_with_parent as _die_with_parent
from .basics import job_environment
from .basics import rank_environment as rank_environment
from .ctlserver import ControlServer
from .forwarding import OutputStream, Sink
from .sessiondir import make_session_dir, remove_session_dir
from .watch import BuiltinWatch, JobWatch, Look, describe_stuck_job, with_cpu

__all__ = ["DEADLOCK_STATUS", "TIMEOUT_STATUS", "Job", "Rank", "rank_environment", "run_job"]

GRACE = 2.0  # seconds between the steps of the shutdown sequence
ABORT_GRACE = 0.25  # how long a failed rank's abort message may lag behind its exit
DRAIN_GRACE = 1.0  # how long output may lag behind the end of the last process
_TICK = 0.05  # poll period for exits when the platform has no pidfd


# -- one rank ------------------------------------------------------------------------
class Rank:
    """A Popen-shaped handle on one rank; signals go to its whole process group."""

    local = True  # a process of this machine (see ipympi.launch.agents.AgentRank for others)

    def __init__(self, rank: int, popen: subprocess.Popen[bytes]) -> None:
        self.rank = rank
        self.popen = popen
        self.pid = popen.pid
        self.hello: dict[str, Any] | None = None  # the rank's hello message, once seen
        self.pidfd: int | None = None

    @property
    def returncode(self) -> int | None:
        """Popen's return code: None while running, -n after death by signal n."""
        return self.popen.returncode

    @property
    def mpi_pid(self) -> int:
        """The pid of the MPI process (differs from ``pid`` behind a wrapper)."""
        if self.hello is not None:
            return int(self.hello["pid"])
        return self.pid

    def poll(self) -> int | None:
        return self.popen.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self.popen.wait(timeout)

    def send_signal(self, sig: int) -> None:
        """Send ``sig`` to the rank's process group (its children included)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class RankHandle(Protocol):
    """What a job needs of a rank's handle: a :class:`Rank` here, or an
    ``ipympi.launch.agents.AgentRank`` on another host."""

    hello: dict[str, Any] | None
    pidfd: int | None

    @property
    def rank(self) -> int: ...
    @property
    def local(self) -> bool: ...
    @property
    def pid(self) -> int | None: ...
    @property
    def returncode(self) -> int | None: ...
    @property
    def mpi_pid(self) -> int | None: ...
    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int: ...
    def send_signal(self, sig: int) -> None: ...
    def terminate(self) -> None: ...
    def kill(self) -> None: ...


# -- the job ---------------------------------------------------------------------------
class Job:
    """N ranks of one MPI program, from start to a single exit status.

    ``wait()`` returns 0 when every rank exits 0; the first non-zero status
    (128 + n for death by signal n) when a rank fails; ``code % 256`` when a
    rank aborts; 128 + n after ``request_stop(n)``; with ``deadlock_check``,
    :data:`DEADLOCK_STATUS` when no rank can progress (see the module
    docstring). The other ranks are ended first. ``early`` is a template
    started for this job beforehand (:func:`ipympi.launch.template.start`),
    closed with the job. Drive a job from one thread,
    which should live as long as the ranks (Linux delivers the parent-death
    signal when the starting *thread* exits).
    """

    def __init__(
        self,
        argv: Sequence[str],
        n: int = 1,
        *,
        tag_output: bool = False,
        env: Mapping[str, str] | None = None,
        stdout: IO[bytes] | None = None,
        stderr: IO[bytes] | None = None,
        name: str = PROG,
        deadlock_check: bool = False,
        early: template.Started | None = None,
    ) -> None:
        if n < 1:
            raise ValueError(f"a job needs at least one rank, not {n}")
        self.argv = list(argv)
        self.n = n
        self.tag_output = tag_output
        self.env = job_environment(env)  # ``import mpi4py`` gives ipympi on the ranks
        self.name = name
        self.ranks: list[RankHandle] = []
        self.session_dir: str | None = None
        self.ctl_address: str | None = None
        self.key = secrets.token_hex(16)
        self.status: int | None = None
        self._stdout = Sink(stdout if stdout is not None else sys.stdout.buffer)
        self._stderr = Sink(stderr if stderr is not None else sys.stderr.buffer)
        self._ctx: zmq.Context[zmq.Socket[bytes]] | None = None
        self._control: ControlServer | None = None
        self._poller = zmq.Poller()
        self._handlers: dict[Any, Callable[[], None]] = {}
        self._streams: dict[int, OutputStream] = {}
        self._wake_r: int | None = None
        self._wake_w: int | None = None
        self._started = False
        self._closed = False
        self._ending = False
        self._stops: list[int] = []
        self._failure: RankHandle | None = None
        self._abort: dict[str, Any] | None = None
        self._states: dict[int, dict[str, Any]] = {}
        self._reaped: set[int] = set()  # ranks whose exit has been noticed
        self._template: template.TemplateProcess | None = None  # forks the ranks, if any
        self._preexec: Callable[[], None] | None = None  # what each process runs before exec
        self._plan: pymain.Plan = {}
        self._early = early  # a template started for this job before it was made
        # Looking for a deadlock: the job's watch (once started), and the
        # verdict with every rank's state once no rank can progress.
        self.deadlock_check = deadlock_check
        self._looks: JobWatch | None = None
        self._deadlock: str | None = None
        self._deadlock_states: list[dict[str, Any]] = []
        self._on_message: dict[str, Callable[[RankHandle, dict[str, Any]], None]] = {
            ctl.HELLO: self._on_hello,
            ctl.ABORT: self._on_abort,
            ctl.STATE: self._on_state,
            ctl.ERROR: self._on_error,
            ctl.SPAWN: self._on_spawn,
        }
        self._errors: dict[int, str] = {}  # rank -> its uncaught exception, not yet printed

    def __enter__(self) -> Job:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- life cycle -------------------------------------------------------------------
    def start(self) -> None:
        """Make the session, bind the control socket and start every rank."""
        if self._started:
            raise RuntimeError("the job was already started")
        self._started = True
        self.session_dir = make_session_dir()
        self._ctx = zmq.Context()
        self._control = ControlServer(
            self._ctx, ctl.session_key(self.key), self.n, on_bad=self._bad_control
        )
        self.ctl_address = self._bind_control(self._control)
        self._watch(self._control.socket, self._read_control)
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)
        self._watch(self._wake_r, self._read_wakeup)
        try:
            self._start_ranks(_die_with_parent())
        except BaseException:
            self._ending = True
            self.kill()
            self._pump(time.monotonic() + GRACE, self._all_exited)
            raise
        self._looks = JobWatch(self, BuiltinWatch(), time.monotonic())

    def _bind_control(self, control: ControlServer) -> str:
        """Bind the control ROUTER and return its address (ipc in the session directory)."""
        assert self.session_dir is not None
        return control.bind(ctl.control_address(self.session_dir))

    def _start_ranks(self, preexec: Callable[[], None] | None) -> None:
        """Start every rank (here, on this machine): forked from a template process
        when the program is a Python program it can run (:mod:`ipympi.launch.template`),
        the one started early for this job if any."""
        self._preexec = preexec
        started, self._early = self._early, None
        if started is not None and (started.argv != self.argv or started.n != self.n):
            started.process.close()  # started for another job
            started = None
        if started is None:
            started = template.start(self.argv, self.n, self.env, preexec)
        if started is not None:
            self._template, self._plan = started.process, started.plan
            self._watch(self._template.fd, self._read_template)
        for rank in range(self.n):
            self._start_rank(rank)

    def _start_template(self) -> None:
        """Start a template to fork the (Python) processes the ranks spawn, in a job whose
        ranks were not forked (:mod:`ipympi.launch.template`)."""
        self._template = template.launch(self.env, self.n, self._preexec)
        self._watch(self._template.fd, self._read_template)

    def _start_rank(self, rank: int) -> None:
        env = self._rank_environment(rank, self.n)
        plan = self._plan if self._template is not None else None
        self._start_process(rank, self.argv, env, plan, rank == 0, None)

    def _rank_environment(self, rank: int, size: int) -> dict[str, str]:
        """The environment of process ``rank`` in a world of ``size``."""
        assert self.session_dir is not None
        env = rank_environment(self.env, rank, size, self.session_dir, self.key, os.cpu_count())
        env[ctl.ENV_SPAWN] = "1"  # this launcher serves ``Comm.Spawn``
        return env

    def _start_process(
        self,
        rank: int,
        argv: Sequence[str],
        env: dict[str, str],
        plan: pymain.Plan | None,
        stdin: bool,
        cwd: str | None,
    ) -> None:
        """Start process ``rank`` (forked from the template when ``plan`` is given) and
        watch its output and exit."""
        assert self.session_dir is not None and self.ctl_address is not None
        handle: Rank | template.ForkedRank
        if plan is not None and self._template is not None:
            if cwd is not None:
                plan = {**plan, "cwd": cwd}
            handle, pipes = self._template.spawn(rank, env, plan, stdin=stdin)
        else:
            popen = subprocess.Popen(
                list(argv),
                stdin=None if stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                cwd=cwd,
                start_new_session=True,
                preexec_fn=self._preexec,
            )
            handle = Rank(rank, popen)
            assert popen.stdout is not None and popen.stderr is not None
            pipes = [popen.stdout, popen.stderr]
        self.ranks.append(handle)
        prefix = b"[%d] " % rank if self.tag_output else None
        for pipe, sink in zip(pipes, (self._stdout, self._stderr)):
            stream = OutputStream(pipe, sink, prefix)
            self._streams[stream.fd] = stream
            self._watch(stream.fd, functools.partial(self._read_output, stream.fd))
        if isinstance(handle, Rank):
            with contextlib.suppress(AttributeError, OSError):  # no pidfd: _pump ticks
                handle.pidfd = os.pidfd_open(handle.pid)
                self._watch(handle.pidfd, lambda: None)

    def wait(self, timeout: float | None = None) -> int:
        """Run the job until it is over and return its exit status.

        Raises ``subprocess.TimeoutExpired`` when ``timeout`` seconds pass with
        the job still running (it keeps running: call ``terminate()``).
        """
        if self.status is not None:
            return self.status
        self._require_started()
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._run(deadline):
            raise subprocess.TimeoutExpired(self.argv, timeout or 0.0)
        self.status = self._conclude()
        return self.status

    def poll(self) -> int | None:
        """The exit status if the job is over, else None (forwards pending output)."""
        try:
            return self.wait(0)
        except subprocess.TimeoutExpired:
            return None

    def request_stop(self, signum: int = signal.SIGINT) -> None:
        """Ask the job to end because the launcher got ``signum``.

        Safe to call from a signal handler. ``wait()`` then sends SIGINT to
        every rank, then SIGTERM, then SIGKILL, and returns 128 + ``signum``; a
        second request while ranks are being ended kills them at once.
        """
        self._stops.append(signum)
        if self._wake_w is not None:
            with contextlib.suppress(OSError):
                os.write(self._wake_w, b"\0")

    def send_signal(self, sig: int) -> None:
        """Send ``sig`` to every rank's process group."""
        for rank in self.ranks:
            rank.send_signal(sig)

    def kill(self) -> None:
        """SIGKILL every rank's process group, without waiting."""
        self.send_signal(signal.SIGKILL)

    def terminate(self, grace: float = GRACE, first_signal: int = signal.SIGTERM) -> None:
        """End every rank: ``first_signal``, then SIGTERM, then SIGKILL.

        Each step waits up to ``grace`` seconds for every rank to exit and its
        output to end, forwarding output meanwhile; a stop request during the
        wait skips to SIGKILL. Returns once every rank has been reaped (or
        could not be within bounded waits) and its output drained.
        """
        self._end(grace, first_signal, len(self._stops))

    def _end(self, grace: float, first_signal: int, stops: int) -> None:
        """``terminate()``, hurried to SIGKILL by any stop request beyond the first ``stops``."""
        self._require_started()
        self._ending = True

        def settled() -> bool:
            return self._all_exited() and not self._streams

        def settled_or_hurried() -> bool:
            return settled() or len(self._stops) > stops

        steps = [first_signal] if first_signal == signal.SIGTERM else [first_signal, signal.SIGTERM]
        for sig in steps:
            self.send_signal(sig)
            if self._pump(time.monotonic() + grace, settled_or_hurried):
                break
        self.kill()
        self._pump(time.monotonic() + DRAIN_GRACE, settled)
        for rank in self.ranks:
            if rank.returncode is None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    rank.wait(DRAIN_GRACE)
        self._reap()
        for fd in list(self._streams):
            self._close_stream(fd)

    def close(self) -> None:
        """End any running rank and release the sockets and the session directory."""
        if self._closed:
            return
        self._closed = True
        if self._started and not self._ending:
            self.terminate()
        for fd in list(self._streams):
            self._close_stream(fd)
        for rank in self.ranks:
            self._close_pidfd(rank)
        if self._template is not None:
            self._unwatch(self._template.fd)
            self._template.close()
        if self._early is not None:  # never started
            self._early.process.close()
            self._early = None
        if self._control is not None:
            self._control.close()
        if self._ctx is not None:
            self._ctx.term()
        for wake_fd in (self._wake_r, self._wake_w):
            if wake_fd is not None:
                os.close(wake_fd)
        self._wake_r = self._wake_w = None
        remove_session_dir(self.session_dir)

    # -- observation -------------------------------------------------------------------
    def query_states(self, timeout: float = QUERY_TIMEOUT) -> list[dict[str, Any]]:
        """What every rank is doing: one ``state`` dict per rank, in rank order.

        Running ranks are asked and get ``timeout`` seconds to answer; the
        silent ones are reported as ``"no answer"``, exited ones as ``"exited"``.
        """
        self._require_started()
        answered = self.ask_states()
        if self._looks is not None:
            self._looks.drop()  # the answers to a look under way were just dropped
        self._pump(time.monotonic() + timeout, answered)
        return [self._state_of(rank) for rank in self.ranks]

    def ask_states(self) -> Callable[[], bool]:
        """Send a state query to every running rank; the test of whether all those
        asked have answered (or exited).

        Answers collected so far are dropped. A rank whose control socket is
        not connected yet cannot be asked (it stays ``"no answer"``).
        """
        assert self._control is not None
        self._reap()
        self._states = {}
        running = [rank.rank for rank in self.ranks if rank.returncode is None]
        asked = [self.ranks[r] for r in self._control.ask(running)]
        return lambda: all(r.rank in self._states or r.returncode is not None for r in asked)

    def _state_of(self, rank: RankHandle) -> dict[str, Any]:
        if rank.returncode is not None:
            return ctl.launcher_state(rank.rank, rank.mpi_pid, rank.returncode)
        if rank.rank in self._states:
            return self._states[rank.rank]
        return ctl.launcher_state(rank.rank, rank.mpi_pid, None)

    def report(self, text: str, *, prefix: bool = True) -> None:
        """Write one line of the launcher's own to stderr, after ``<name>: ``."""
        line = f"{self.name}: {text}\n" if prefix else f"{text}\n"
        self._stderr.write(line.encode(errors="replace"))

    # -- outcome -----------------------------------------------------------------------
    def _require_started(self) -> None:
        if not self._started:
            raise RuntimeError("the job was not started")

    def _all_exited(self) -> bool:
        return all(rank.returncode is not None for rank in self.ranks)

    def _has_outcome(self) -> bool:
        failed = self._abort is not None or self._failure is not None
        stuck = self._deadlock is not None
        return failed or stuck or bool(self._stops) or self._all_exited()

    # -- looking for a deadlock ---------------------------------------------------------
    def _run(self, deadline: float | None) -> bool:
        """``_pump`` until the job has an outcome (True) or ``deadline`` passes (False).

        With ``deadlock_check`` the loop also wakes for the looks of the job's
        watch (:class:`~ipympi.launch.watch.JobWatch`).
        """
        looks = self._looks
        if not self.deadlock_check or looks is None:
            return self._pump(deadline, self._has_outcome)

        def done() -> bool:
            return self._has_outcome() or looks.answered()

        while True:
            wake = looks.wake
            self._pump(wake if deadline is None else min(wake, deadline), done)
            if self._has_outcome():
                return True
            now = time.monotonic()
            seen = looks.step(now)
            if seen is not None and seen.verdict is not None:
                states = [self._state_of(rank) for rank in self.ranks]
                self._deadlock = describe_stuck_job(states, seen.pending)
                self._deadlock_states = states
                return True
            if deadline is not None and now >= deadline:
                return False

    def seen(self) -> Look:
        """What the last look's answers say: the running ranks' states, with their CPU times."""
        self._reap()
        pending = [rank.rank for rank in self.ranks if rank.returncode is None]
        ranks = [self.ranks[r] for r in pending]
        return Look({r.rank: with_cpu(self._state_of(r), r.mpi_pid) for r in ranks}, pending)

    def _conclude(self) -> int:
        """Report why the job ends, end the ranks and return the exit status."""
        # From here on, a stop request (a further one, for a stop) kills at once.
        try:
            return self._conclude_and_report()
        finally:
            self._print_errors()  # those that came while the ranks were ended

    def _conclude_and_report(self) -> int:
        if self._stops:
            self._print_errors()
            signum = self._stops[0]
            self.report(f"received {ctl.signal_name(signum)}; ending the ranks")
            self._end(GRACE, signal.SIGINT, 1)
            return 128 + signum
        if self._failure is not None and self._abort is None:
            self._pump(time.monotonic() + ABORT_GRACE, lambda: self._abort is not None)
        self._print_errors()
        if self._abort is not None:
            self.report(ctl.format_abort(self._abort))
            self._end(GRACE, signal.SIGTERM, 0)
            return int(self._abort["code"]) % 256
        if self._failure is not None:
            rank = self._failure
            assert rank.returncode is not None
            others = "" if self._all_exited() else "; ending the other ranks"
            self.report(f"{self._describe_failure(rank)}{others}")
            self._end(GRACE, signal.SIGTERM, 0)
            return ctl.exit_status(rank.returncode)
        if self._deadlock is not None:
            self.report(self._deadlock)
            for state in self._deadlock_states:
                self.report(f"  {ctl.format_state(state)}", prefix=False)
            self._end(GRACE, signal.SIGTERM, 0)  # the report says where each rank was
            return DEADLOCK_STATUS
        ended_by_caller = self._ending  # terminate() ended the ranks before wait() ran
        self._end(GRACE, signal.SIGTERM, 0)  # end leftover children, drain output
        codes = [ctl.exit_status(r.returncode) for r in self.ranks if r.returncode]
        return codes[0] if ended_by_caller and codes else 0

    def _describe_failure(self, rank: RankHandle) -> str:
        """``rank 2 exited with status 3``: the failed rank, for the job's last report."""
        assert rank.returncode is not None
        return f"rank {rank.rank} {ctl.describe_exit(rank.returncode)}"

    # -- the event loop ----------------------------------------------------------------
    def _watch(self, obj: Any, handler: Callable[[], None]) -> None:
        self._poller.register(obj, zmq.POLLIN)
        self._handlers[obj] = handler

    def _unwatch(self, obj: Any) -> None:
        if obj in self._handlers:
            self._poller.unregister(obj)
            del self._handlers[obj]

    def _pump(self, deadline: float | None, done: Callable[[], bool]) -> bool:
        """Handle events until ``done()`` (True) or ``deadline`` passes (False).

        ``done`` must depend only on what the loop watches: exits, output,
        control messages and stop requests.
        """
        while True:
            self._reap()
            if done():
                return True
            wait = None if deadline is None else deadline - time.monotonic()
            if wait is not None and wait <= 0:
                return False
            if self._needs_tick():
                wait = _TICK if wait is None else min(wait, _TICK)
            ms = -1 if wait is None else max(1, math.ceil(wait * 1000))
            for obj, _event in self._poller.poll(ms):
                handler = self._handlers.get(obj)
                if handler is not None:
                    handler()

    def _needs_tick(self) -> bool:
        """Whether the event loop must wake up regularly: a rank's exit cannot be
        watched (no pidfd on this platform), so it is polled."""
        return any(r.local and r.pidfd is None and r.returncode is None for r in self.ranks)

    def _reap(self) -> None:
        """Notice ranks that have exited; the first to fail is the job's failure."""
        for rank in self.ranks:
            if rank.rank in self._reaped:
                continue
            returncode = rank.poll()
            if returncode is None:
                continue
            self._reaped.add(rank.rank)
            self._close_pidfd(rank)
            if returncode != 0 and not self._ending and self._failure is None:
                self._failure = rank

    def _close_pidfd(self, rank: RankHandle) -> None:
        if rank.pidfd is not None:
            self._unwatch(rank.pidfd)
            os.close(rank.pidfd)
            rank.pidfd = None

    def _read_wakeup(self) -> None:
        if self._wake_r is not None:
            with contextlib.suppress(BlockingIOError):
                os.read(self._wake_r, 4096)

    def _read_output(self, fd: int) -> None:
        stream = self._streams.get(fd)
        if stream is not None and not stream.read():
            self._close_stream(fd)

    def _read_template(self) -> None:
        if self._template is not None and not self._template.dispatch():
            self._unwatch(self._template.fd)

    def _close_stream(self, fd: int) -> None:
        stream = self._streams.pop(fd, None)
        if stream is not None:
            self._unwatch(fd)
            stream.close()

    def _read_control(self) -> None:
        assert self._control is not None
        for rank, msg in self._control.receive():
            handler = self._on_message.get(msg["type"])
            if handler is None:
                self._bad_control(f"unexpected {msg['type']} from rank {rank}")
            else:
                handler(self.ranks[rank], msg)

    def _bad_control(self, why: str) -> None:
        self.report(f"ignoring a bad control message: {why}")

    def _on_hello(self, rank: RankHandle, msg: dict[str, Any]) -> None:
        rank.hello = msg

    def _on_abort(self, rank: RankHandle, msg: dict[str, Any]) -> None:
        if self._abort is None and not self._ending:
            self._abort = msg

    def _on_error(self, rank: RankHandle, msg: dict[str, Any]) -> None:
        self._errors[rank.rank] = str(msg["text"])

    def _on_spawn(self, rank: RankHandle, msg: dict[str, Any]) -> None:
        """Start the processes a rank's ``Comm.Spawn`` asks for (:mod:`ipympi.launch.spawning`)."""
        assert self._control is not None
        if self._ending:
            answer = spawning.refusal(msg, "the job is ending")
        else:
            try:
                if not all(isinstance(p, int) for p in msg["parents"]) or not msg["parents"]:
                    raise spawning.Refused("the request names no parents")
                answer = spawning.accepted(msg, self._start_children(msg))
            except spawning.Refused as exc:
                answer = spawning.refusal(msg, str(exc))
        self._control.send(rank.rank, answer)

    def _start_children(self, msg: dict[str, Any]) -> list[int]:
        """Start the programs of ``msg`` as the next processes; their indexes."""
        starts = spawning.plan_apps(msg["apps"], self.env)
        first = len(self.ranks)
        forked = template.enabled(self.env)
        plans = {
            id(start): pymain.plan(start.argv, self.env) if forked else None for start in starts
        }
        if any(plan is not None for plan in plans.values()) and self._template is None:
            self._start_template()

        def launch(index: int, start: spawning.Start, env: dict[str, str]) -> None:
            self._start_process(index, start.argv, env, plans[id(start)], False, start.cwd)

        def undo() -> None:
            for handle in self.ranks[first:]:
                self._reaped.add(handle.rank)  # not a failure of the job
                handle.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    handle.wait(GRACE)
                self._close_pidfd(handle)

        try:
            return spawning.start_each(msg, starts, first, self._rank_environment, launch, undo)
        finally:
            assert self._control is not None
            self._control.nranks = len(self.ranks)

    def _print_errors(self) -> None:
        """Print the ranks' tracebacks received so far, each distinct one once,
        headed by the ranks that raised it: ``[ranks 0-3] Traceback ...``."""
        errors, self._errors = self._errors, {}
        for lines, ranks in group_identical({r: t.splitlines() for r, t in errors.items()}):
            text = "\n".join(headed(lines, f"[{ranks_phrase(ranks)}]")) + "\n"
            self._stderr.write(text.encode(errors="replace"))

    def _on_state(self, rank: RankHandle, msg: dict[str, Any]) -> None:
        assert self._control is not None
        if self._control.is_answer(msg):  # not a late answer to an earlier look
            self._states[rank.rank] = msg


# -- the launcher's command ------------------------------------------------------------
@contextlib.contextmanager
def _stop_on_signals(job: Job) -> Iterator[None]:
    """Turn SIGINT/SIGTERM/SIGHUP into ``job.request_stop`` while the job runs."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        previous[signum] = signal.signal(signum, lambda sig, _frame: job.request_stop(sig))
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def run_job(
    argv: Sequence[str],
    n: int,
    *,
    tag_output: bool = False,
    timeout: float | None = None,
    name: str = PROG,
    deadlock_check: bool = True,
    make_job: Callable[..., Job] | None = None,
    env: Mapping[str, str] | None = None,
    early: template.Started | None = None,
) -> int:
    """Run ``argv`` on ``n`` ranks like ``mpiexec`` and return the exit status.

    ``make_job(argv, n, **options)`` builds the job (default: :class:`Job`,
    every rank on this machine; :class:`ipympi.launch.agents.HostsJob` places them on hosts).

    After ``timeout`` seconds the ranks' states are reported, the ranks ended,
    and the status is 124. With ``deadlock_check``, a job where no rank can
    progress is reported and ended at once, with status 125. 127 (126) when
    the program cannot be found (run). The ranks' environment is ``env`` (default:
    this process's). ``early`` is the job's template, if it was started already
    (:func:`ipympi.launch.template.start`, for a job of this machine only).
    """
    options: dict[str, Any] = {
        "tag_output": tag_output,
        "name": name,
        "deadlock_check": deadlock_check,
        "env": env,
    }
    if make_job is None:
        job = Job(argv, n, early=early, **options)
    else:
        if early is not None:
            early.process.close()
        job = make_job(argv, n, **options)
    with _stop_on_signals(job), job:
        try:
            job.start()
        except OSError as exc:
            job.report(f"cannot run {argv[0]!r}: {exc.strerror or exc}")
            return 126 if isinstance(exc, PermissionError) else 127
        try:
            return job.wait(timeout)
        except subprocess.TimeoutExpired:
            job.report(f"timeout after {timeout:g} s; rank states:")
            for state in job.query_states(QUERY_TIMEOUT):
                job.report(f"  {ctl.format_state(state)}", prefix=False)
            job.terminate()
            return TIMEOUT_STATUS
