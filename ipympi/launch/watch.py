"""Telling a cell that cannot progress from one that is slow: the stuck-cell rule.

While a cell runs, the controller asks its ranks every :data:`LOOK_EVERY`
seconds what they are doing (:mod:`ipympi.core.control` ``state`` answers). The
cell is *stuck* when every rank still running it has been blocked in one MPI
wait for at least :data:`STUCK_AFTER` seconds and handled no incoming message
since the previous look, nor used :data:`BUSY_CPU` seconds of CPU time (where
the state dicts carry ``cpu``, see :func:`cpu_seconds`: a rank copying a large
message straight out of its peer's memory handles no frame meanwhile), nor was
found running at either look (``busy``: on a loaded machine such a copy may
get little CPU time, but the rank is not asleep). No rank
is computing then, and no message is moving:
the ranks wait on each other (a deadlock), on a rank that failed, or on one
that finished the cell without doing its part. A long transfer is not stuck
(its receiver keeps handling frames), nor is a loop of short waits (each wait
is new). A rank that waits in ``Accept`` or ``Connect``, or is connected to a process of another job
(``other_jobs`` in its state), is never stuck: another job may yet answer it.

Pure functions over state dicts, and :class:`BuiltinWatch`, which applies
them to a job's successive looks. A real MPI shows less:
:mod:`ipympi.notebook.controller.realwatch` has its rule.

:class:`JobWatch` is the one watch of a job, shared by the launcher
(:class:`ipympi.launch.launcher.Job`, whose job is the ranks of ``ipympi.run``)
and the notebook's controller (:class:`ipympi.notebook.controller.cellrun.CellRun`,
whose job is one cell on the session's ranks): it says when the job's loop
must wake, asks the job's processes what they do (:data:`LOOK_AFTER` seconds
after the start, then :data:`LOOK_EVERY` seconds after each look), keeps
pumping while the answers come (at most :data:`LOOK_WAIT` seconds), and
judges them by the job's rule. The job says what it has (:class:`Watched`):
how to ask, and what the answers and its replies say (:class:`Look`); what
a verdict does is the job's (the launcher ends the job and reports, a cell
follows the session's ``on_error``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol

from ..core import control as ctl
from ..core.ranksets import format_ranks, ranks_phrase

__all__ = [
    "BUSY_CPU",
    "LOOK_AFTER",
    "LOOK_EVERY",
    "LOOK_WAIT",
    "ON_ERROR",
    "STUCK_AFTER",
    "BuiltinWatch",
    "JobWatch",
    "Look",
    "Rule",
    "Verdict",
    "Watched",
    "cpu_seconds",
    "describe_stuck",
    "describe_stuck_job",
    "is_stuck",
    "with_cpu",
]

LOOK_AFTER = 0.5  # seconds into a cell before the first look
LOOK_EVERY = 0.25  # seconds between looks
LOOK_WAIT = 0.2  # seconds the processes get to answer one look
STUCK_AFTER = 0.5  # seconds a wait must have lasted
BUSY_CPU = 0.05  # CPU seconds between looks that mean a rank is working (a big copy)
ON_ERROR = ("interrupt", "wait", "abort")  # what to do with a stuck cell

State = Mapping[str, Any]

try:
    _CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
except (AttributeError, ValueError, OSError):
    _CLOCK_TICKS = 100


def _key(state: State) -> tuple[Any, ...]:
    return (state.get("call"), state.get("comm"), state.get("peer"), state.get("tag"))


def is_stuck(
    previous: Mapping[int, State], current: Mapping[int, State], pending: Iterable[int]
) -> bool:
    """Whether no rank in ``pending`` can progress (see the module docstring).

    ``previous`` and ``current`` are two successive looks: rank -> state.
    """
    ranks = list(pending)
    if not ranks:
        return False
    for rank in ranks:
        now, before = current.get(rank), previous.get(rank)
        if now is None or before is None:
            return False
        if now.get("state") != "blocked" or before.get("state") != "blocked":
            return False
        if float(now.get("since") or 0.0) < STUCK_AFTER:
            return False
        if _key(now) != _key(before) or now.get("progressed") != before.get("progressed"):
            return False
        if now.get("busy") or before.get("busy"):
            return False
        if now.get("other_jobs"):  # another job may yet answer (or connect)
            return False
        cpu_now, cpu_before = now.get("cpu"), before.get("cpu")
        if cpu_now is not None and cpu_before is not None and cpu_now - cpu_before >= BUSY_CPU:
            return False
    return True


@dataclass(frozen=True)
class Verdict:
    """Why a cell should end: ``kind`` (``"stuck"``; on a real MPI ``"failed"`` or
    ``"deadlock"``) and ``text``, the reason in one line."""

    kind: str
    text: str


class BuiltinWatch:
    """The built-in MPI's rule (:func:`is_stuck`) over one cell's successive looks."""

    def __init__(self) -> None:
        self._previous: dict[int, State] = {}

    def look(
        self,
        now: float,
        states: Mapping[int, State],
        pending: Iterable[int],
        finished: Iterable[int],
        failed: Iterable[int],
        said: Mapping[int, int],
    ) -> Verdict | None:
        """Take one look (the arguments of :meth:`.realwatch.RealMPIWatch.look`); the
        wait-for graph when the cell is stuck, else None."""
        pending = list(pending)
        stuck = is_stuck(self._previous, states, pending)
        self._previous = dict(states)
        if not stuck:
            return None
        return Verdict("stuck", describe_stuck(states, pending, finished, failed))


@dataclass
class Look:
    """What one look saw of a job: the answers of the processes still running
    (``pending``), with their CPU times; those that ended (``finished`` and
    ``failed``, for a cell: the ranks that replied) and how many output
    messages each rank sent so far (``said``)."""

    states: dict[int, dict[str, Any]]
    pending: list[int]
    finished: list[int] = field(default_factory=list)
    failed: list[int] = field(default_factory=list)
    said: Mapping[int, int] = field(default_factory=dict)
    verdict: Verdict | None = None  # the rule's, once judged


class Rule(Protocol):
    """A stuck-job rule over successive looks (:class:`BuiltinWatch`, or
    :class:`~ipympi.notebook.controller.realwatch.RealMPIWatch` for a real MPI)."""

    def look(
        self,
        now: float,
        states: Mapping[int, State],
        pending: Iterable[int],
        finished: Iterable[int],
        failed: Iterable[int],
        said: Mapping[int, int],
    ) -> Verdict | None: ...


class Watched(Protocol):
    """What a :class:`JobWatch` needs of the job it watches."""

    def ask_states(self) -> Callable[[], bool]:
        """Ask the running processes what they do (earlier answers are dropped);
        the test of whether every process asked has answered (or exited)."""
        ...

    def seen(self) -> Look:
        """What the answers so far say, with the job's replies."""
        ...


class JobWatch:
    """When a job's loop looks at its processes, and what the looks conclude.

    The loop wakes at :attr:`wake`, ends its waits early once :meth:`answered`,
    and calls :meth:`step` after each wait: a look that is due is started, one
    whose answers are in (or whose :data:`LOOK_WAIT` has passed) is judged and
    returned, with the rule's verdict.
    """

    def __init__(self, job: Watched, rule: Rule, start: float) -> None:
        self.job = job
        self.rule = rule
        self._next = start + LOOK_AFTER  # when the next look starts
        self._asked: Callable[[], bool] | None = None  # a look under way: its answers are in
        self._due = 0.0  # when a look under way stops waiting for answers

    @property
    def wake(self) -> float:
        """When the loop must wake next for the watch."""
        return self._next if self._asked is None else self._due

    def answered(self) -> bool:
        """Whether a look is under way and every process asked has answered."""
        return self._asked is not None and self._asked()

    def drop(self) -> None:
        """Forget the look under way (another query dropped its answers); the next
        look starts when it was due."""
        self._asked = None

    def step(self, now: float) -> Look | None:
        """Start a look that is due, or judge the one under way: the judged look."""
        if self._asked is not None:
            if now < self._due and not self._asked():
                return None
            self._asked = None
            seen = self.job.seen()
            seen.verdict = self.rule.look(
                now, seen.states, seen.pending, seen.finished, seen.failed, seen.said
            )
            self._next = time.monotonic() + LOOK_EVERY
            return seen
        if now >= self._next:
            self._asked = self.job.ask_states()
            self._due = now + LOOK_WAIT
        return None


def with_cpu(state: State, pid: int | None) -> dict[str, Any]:
    """``state`` with ``cpu`` set: as the rank reported it, else read from /proc by ``pid``.

    Ranks report their own CPU time, which also works on another host; /proc
    is the fallback for processes that do not.
    """
    if state.get("cpu") is not None:
        return dict(state)
    return dict(state, cpu=cpu_seconds(pid))


def cpu_seconds(pid: int | None) -> float | None:
    """The CPU time (user + system) process ``pid`` has used; None where /proc cannot tell."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS
    except (OSError, IndexError, ValueError):
        return None


def describe_stuck(
    states: Mapping[int, State],
    pending: Iterable[int],
    finished: Iterable[int] = (),
    failed: Iterable[int] = (),
) -> str:
    """The wait-for graph in one line.

    ``deadlock: rank 0 waits in recv(source=1, tag=7); rank 1 waits in
    recv(source=0, tag=7)``; waits on a rank that failed or finished the cell
    say so (``rank 0 waits in Barrier on MPI_COMM_WORLD; rank 1 has finished
    the cell``).
    """
    failed = sorted(set(failed))
    finished = sorted(set(finished) - set(failed))
    parts = []
    for rank in pending:
        state = states.get(rank, {})
        parts.append(f"rank {rank} waits in {ctl.format_call(state) or 'an MPI call'}")
    if failed:
        parts.append(f"{ranks_phrase(failed)} failed")
    if finished:
        verb = "has" if len(finished) == 1 else "have"
        parts.append(f"{ranks_phrase(finished)} {verb} finished the cell")
    head = "deadlock" if not failed and not finished else "no rank can progress"
    return f"{head}: " + "; ".join(parts)


def describe_stuck_job(states: Sequence[Mapping[str, Any]], pending: Sequence[int]) -> str:
    """:func:`describe_stuck` for a launched job: ranks not pending have exited, with a status.

    ``deadlock: rank 0 waits in recv(source=1, tag=7) on MPI_COMM_WORLD; rank 1
    waits in ...``, or, when some ranks have exited, ``no rank can progress:
    rank 0 waits in Barrier ... on MPI_COMM_WORLD; rank 1 has exited (status 0)``.
    """
    text = describe_stuck(dict(enumerate(states)), pending)
    exited: dict[object, list[int]] = {}  # status -> ranks
    for rank, state in enumerate(states):
        if rank not in pending:
            exited.setdefault(state.get("status"), []).append(rank)
    if not exited:
        return text
    parts = [text.partition(": ")[2]]
    for status, ranks in exited.items():
        if len(ranks) == 1:
            parts.append(f"rank {ranks[0]} has exited (status {status})")
        else:
            parts.append(f"ranks {format_ranks(ranks)} have exited (status {status})")
    return "no rank can progress: " + "; ".join(parts)
