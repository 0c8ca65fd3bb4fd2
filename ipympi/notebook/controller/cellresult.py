"""A parallel cell's options and result: what ran where, and its error as one exception.

:class:`CellOptions` are the options of ``%%px``; :class:`CellResult` is what a
cell did on each rank (its request, and what its run found when it had to stop
ranks: a timeout, a stuck cell, what the unfinished ranks were doing). A failed
cell becomes one exception, :class:`RankError`, whose class name is the real
exception's (``ZeroDivisionError``), so Jupyter's ``error`` message and execute
reply carry the real ``ename``. Kept apart from the cell's run
(:mod:`ipympi.notebook.controller.cellrun`), which fills a result in, so that
code that only reads results (``%pxresult``, views) needs nothing of the run.
"""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...core.ranksets import format_ranks, ranks_phrase
from .records import Submission
from .render import GROUPS, WORLD_ENDED, OutputRenderer, compose_error

if TYPE_CHECKING:
    from ...teach.trace import Trace

__all__ = ["CellOptions", "CellResult", "RankError", "rank_error"]


@dataclass
class CellOptions:
    """How to run a parallel cell (the options of ``%%px``)."""

    targets: Any = None  # parsed by parse_targets: None/"all", "0", "1,3", "::2", ...
    block: bool = True
    stream: bool = True
    group: str = "order"
    collapse: bool = True
    timeout: float | None = None
    silent: bool = False
    store_history: bool = True
    trace: bool = False  # record every message of the cell on every rank

    def __post_init__(self) -> None:
        if self.group not in GROUPS:
            raise ValueError(
                f"--group-outputs must be one of {', '.join(GROUPS)}, not {self.group!r}"
            )
        if self.timeout is not None and self.timeout <= 0:
            raise ValueError(f"--timeout must be a positive number of seconds, not {self.timeout}")


class RankError(Exception):
    """A parallel cell failed on one or more ranks.

    Instances are of a subclass named after the real exception (see
    :func:`rank_error`); ``errors`` maps each failed rank to its error
    (``ename``, ``evalue``, ``traceback``), and the traceback IPython shows
    is the composed one: a summary line, then each distinct traceback once.
    """

    def __init__(self, summary: str, errors: Mapping[int, dict], traceback: list[str]):
        super().__init__(summary)
        self.errors = dict(errors)
        self.traceback_lines = list(traceback)

    def _render_traceback_(self) -> list[str]:
        return self.traceback_lines


_ERROR_CLASSES: dict[str, type[RankError]] = {}
# The errors of ranks that ipympi stopped: not failures of their own.
_STOPPED_ENAMES = ("KeyboardInterrupt", "EngineDied", WORLD_ENDED)


def rank_error(
    errors: Mapping[int, dict],
    targets: list[int],
    waiting: Mapping[int, str] | None = None,
    ename: str | None = None,
) -> RankError:
    """One RankError for a cell's errors, of a class named like the real exception.

    ``ename`` overrides the name (by default the lowest failing rank's).
    """
    composed = compose_error(dict(errors), targets, dict(waiting or {}) or None)
    ename = ename or str(composed["ename"]) or "Error"
    if not all(part.isidentifier() for part in ename.split(".")):
        ename = "Error"  # a class may be named "MPI.Exception", as a program knows it
    cls = _ERROR_CLASSES.get(ename)
    if cls is None:
        cls = type(ename, (RankError,), {"__module__": "ipympi"})
        _ERROR_CLASSES[ename] = cls
    evalue = composed["evalue"]
    if ename != composed["ename"]:
        named = [e for _, e in sorted(errors.items()) if e.get("ename") == ename]
        evalue = named[0].get("evalue", evalue) if named else evalue
    return cls(str(evalue), errors, list(composed["traceback"]))


@dataclass
class CellResult:
    """What a parallel cell did on each rank (also kept by ``--save-name``)."""

    request: Submission
    targets: list[int]
    execution_count: int
    renderer: OutputRenderer | None = None
    timed_out: float | None = None  # the --timeout that ended the cell
    waiting: dict[int, str] = field(default_factory=dict)  # what unfinished ranks were doing
    stuck: str | None = None  # the wait-for graph, when no rank could progress
    stopped: set[int] = field(default_factory=set)  # ranks ended because the cell was stuck
    states: dict[int, dict] = field(default_factory=dict)  # unfinished ranks' MPI states
    traced: bool = False  # the ranks recorded the cell's messages (``--trace``)
    discarded: str | None = None  # what the ranks dropped that the failed cell left

    @property
    def done(self) -> bool:
        return self.request.done

    @property
    def errors(self) -> dict[int, dict]:
        """Each failed rank's error; ranks stopped by ``--timeout`` show a TimeoutError.

        Ranks that were stopped because the cell was stuck are not failures
        of their own: they appear in ``waiting``, unless no rank failed at all
        (a deadlock), when each shows a DeadlockError.
        """
        errors = self.request.errors()
        for rank in self.stopped:
            if errors.get(rank, {}).get("ename") in _STOPPED_ENAMES:
                del errors[rank]
        if self.stuck and not errors:
            for rank in sorted(self.stopped):
                where = self.waiting.get(rank, "waiting")
                errors[rank] = {
                    "ename": "DeadlockError",
                    "evalue": self.stuck,
                    "traceback": [f"DeadlockError: rank {rank} was stopped while {where}"],
                }
        if self.timed_out is not None:
            for rank, error in errors.items():
                if error.get("ename") == "KeyboardInterrupt":
                    evalue = f"{self.timeout_text}; {_stopped(rank, error)}"
                    traceback = [
                        *map(_as_timeout_header, list(error.get("traceback") or [])[:-1]),
                        f"TimeoutError: {evalue}",
                    ]
                    errors[rank] = dict(
                        error, ename="TimeoutError", evalue=evalue, traceback=traceback
                    )
        return errors

    def trace(self) -> Trace | None:
        """The messages of a traced cell on every rank that replied (None if not traced)."""
        if not self.traced:
            return None
        from ...teach.trace import Trace

        records = {
            rank: pickle.loads(reply.buffers[0])
            for rank, reply in sorted(self.request.replies.items())
            if reply.buffers
        }
        return Trace.from_ranks(records)

    @property
    def ok(self) -> bool:
        return self.done and not self.errors

    @property
    def results(self) -> dict[int, dict]:
        """Each rank's ``execute_result`` data (its mime bundle)."""
        return {
            rank: content["data"]
            for rank, kind, content in self.request.messages
            if kind == "execute_result"
        }

    @property
    def payload(self) -> list[dict]:
        """What the ranks asked of the front end (the pager's text of ``obj?``): their
        common payload, else that of the lowest rank that has one."""
        payloads = [
            reply.content["payload"]
            for _, reply in sorted(self.request.replies.items())
            if reply.content.get("payload")
        ]
        return list(payloads[0]) if payloads else []

    def stdout(self, rank: int) -> str:
        return self._text(rank, "stdout")

    def stderr(self, rank: int) -> str:
        return self._text(rank, "stderr")

    def _text(self, rank: int, name: str) -> str:
        return "".join(
            content["text"]
            for r, kind, content in self.request.messages
            if r == rank and kind == "stream" and content.get("name") == name
        )

    def error(self) -> RankError | None:
        """The cell's error as one exception, or None when every rank succeeded."""
        errors = self.errors
        if not errors:
            return None
        waiting = {r: w for r, w in self.waiting.items() if r not in errors}
        died = [r for r, e in sorted(errors.items()) if e.get("ename") == "EngineDied"]
        # A rank's death is the news; the MPI errors it caused in others follow it.
        exc = rank_error(errors, self.targets, waiting, "EngineDied" if died else None)
        if died and len(errors) > len(died):
            exc.traceback_lines[0] = _after_deaths(errors, died, self.targets, waiting)
        ended = self.request.ended
        if self.stuck and type(exc).__name__ == "DeadlockError":
            exc.traceback_lines[0] = f"{self.stuck}; {ended or 'the ranks were stopped'}"
            ended = None
        if self.timed_out is not None and type(exc).__name__ == "TimeoutError":
            stops = [_stopped(r, self.request.errors().get(r, {})) for r in sorted(errors)]
            exc.traceback_lines[0] = "; ".join([self.timeout_text, *stops])
        if ended:
            exc.traceback_lines[0] += f"; {ended}"
        if self.discarded:
            exc.traceback_lines.append(self.discarded)
        return exc

    @property
    def timeout_text(self) -> str:
        return f"the cell ran longer than --timeout {self.timed_out:g} s"

    def raise_for_error(self) -> None:
        exc = self.error()
        if exc is not None:
            raise exc

    def __repr__(self) -> str:
        state = "done" if self.done else f"running on {format_ranks(self.request.pending)}"
        failed = f", failed on {format_ranks(sorted(self.errors))}" if self.errors else ""
        ranks = format_ranks(self.targets)
        return f"<CellResult [{self.execution_count}] ranks {ranks}: {state}{failed}>"


def _after_deaths(
    errors: Mapping[int, dict], died: list[int], targets: list[int], waiting: Mapping[int, str]
) -> str:
    """The summary of a cell in which ranks died: the deaths first, then what the others
    were doing when their MPI calls failed because of them, then any other failure.

    ``rank 1 has died (exited with status 3) while ranks 0,2,3 waited in Barrier:
    collective #0 on MPI_COMM_WORLD (each raised MPI.Exception of class ERR_OTHER)``
    """
    deaths = "; ".join(str(errors[rank].get("evalue", "")) for rank in died)
    caused: dict[tuple[str, str, str], list[int]] = {}  # (call, ename, error class) -> ranks
    rest = {}
    for rank, error in sorted(errors.items()):
        if rank in died:
            continue
        if error.get("died"):
            call = str(error.get("call") or "an MPI call")
            key = (call, str(error.get("ename", "")), str(error.get("error_class", "")))
            caused.setdefault(key, []).append(rank)
        else:
            rest[rank] = error
    parts = []
    for (call, ename, errorclass), ranks in caused.items():
        raised = f"{'each raised' if len(ranks) > 1 else 'raised'} {ename}"
        raised += f" of class {errorclass}" if errorclass else ""
        parts.append(f"{ranks_phrase(ranks)} waited in {call} ({raised})")
    text = f"{deaths} while {'; '.join(parts)}" if parts else deaths
    if rest:
        text += "; " + str(compose_error(rest, targets, waiting or None)["traceback"][0])
    elif waiting:
        text += "".join(f"; rank {rank} was {what}" for rank, what in sorted(waiting.items()))
    return text


def _as_timeout_header(line: str) -> str:
    """IPython's traceback header of the interrupt, named as the timeout it was."""
    if "Traceback (most recent call last)" not in line:
        return line
    return line.replace("KeyboardInterrupt", "TimeoutError     ", 1)  # same width


def _stopped(rank: int, error: Mapping[str, Any]) -> str:
    where = str(error.get("where") or "")
    return f"rank {rank} was stopped {where}".rstrip()
