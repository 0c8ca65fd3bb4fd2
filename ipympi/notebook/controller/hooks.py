"""``ipympi.on_error(callback)``: the error-handler hook of a notebook session.

When a parallel cell fails, every registered callback receives one
:class:`FailureReport`: the cell, its one-line summary, and a
:class:`RankReport` per rank involved — each rank that failed (its exception
and traceback) and each rank that was stopped or waiting (the MPI call,
communicator, peer and tag it was blocked in, and its line). Use it to log
failures, to notify someone, or to collect statistics of a teaching session.
A callback that raises is reported as a warning; it never breaks the session.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .render import strip_ansi

__all__ = ["FailureReport", "RankReport", "notify", "on_error", "remove_error_hook"]

Hook = Callable[["FailureReport"], Any]
_hooks: list[Hook] = []


@dataclass(frozen=True)
class RankReport:
    """What one rank did in a failed cell."""

    rank: int
    state: str  # "failed", "died", "interrupted", "stopped" (the cell was stuck) or "waiting"
    exception: str = ""  # the exception's name, e.g. "ZeroDivisionError" or "MPI.Exception"
    message: str = ""
    error_class: str = ""  # an MPI.Exception's error class, e.g. "ERR_OTHER"
    traceback: tuple[str, ...] = ()  # plain text lines
    call: str = ""  # the MPI call a waiting rank was blocked in, e.g. "recv"
    comm: str = ""
    peer: int | None = None
    tag: int | None = None
    where: str = ""  # e.g. "line 3 of cell [7]"


@dataclass(frozen=True)
class FailureReport:
    """A failed cell: its number, summary, and one report per rank involved."""

    cell: int
    summary: str
    exception: str
    ranks: tuple[RankReport, ...] = field(default_factory=tuple)

    def rank(self, rank: int) -> RankReport | None:
        return next((r for r in self.ranks if r.rank == rank), None)


def on_error(callback: Hook) -> Hook:
    """Call ``callback(report)`` whenever a parallel cell fails; returns ``callback``.

    Usable as a decorator: ``@ipympi.on_error`` above a function of one argument.
    """
    if not callable(callback):
        raise TypeError(f"on_error needs a callable, not {type(callback).__name__}")
    _hooks.append(callback)
    return callback


def remove_error_hook(callback: Hook) -> None:
    """Stop calling ``callback`` (ValueError if it was not registered)."""
    _hooks.remove(callback)


def _state_of(error: Mapping[str, Any], stopped: bool) -> str:
    ename = error.get("ename")
    if ename in ("EngineDied", "MPIAbort"):
        return "died"
    if ename == "KeyboardInterrupt":
        return "stopped" if stopped else "interrupted"
    return "failed"


def build_report(
    cell: int,
    summary: str,
    exception: str,
    errors: Mapping[int, Mapping[str, Any]],
    states: Mapping[int, Mapping[str, Any]],
    stopped: set[int],
) -> FailureReport:
    """The report of a failed cell from its errors and the states of the other ranks."""
    ranks = []
    for rank in sorted(set(errors) | set(states)):
        state = dict(states.get(rank, {}))
        error = errors.get(rank)
        peer, tag = state.get("peer"), state.get("tag")
        common: dict[str, Any] = {
            "call": str(state.get("call") or ""),
            "comm": str(state.get("comm") or ""),
            "peer": peer if isinstance(peer, int) else None,
            "tag": tag if isinstance(tag, int) else None,
            "where": str(state.get("where") or (error or {}).get("where") or ""),
        }
        if error is not None:
            ranks.append(
                RankReport(
                    rank,
                    _state_of(error, rank in stopped),
                    exception=str(error.get("ename", "")),
                    message=str(error.get("evalue", "")),
                    error_class=str(error.get("error_class", "")),
                    traceback=tuple(strip_ansi(line) for line in error.get("traceback", [])),
                    **common,
                )
            )
        else:
            ranks.append(RankReport(rank, "stopped" if rank in stopped else "waiting", **common))
    return FailureReport(cell, strip_ansi(summary), exception, tuple(ranks))


def notify(report: FailureReport) -> None:
    """Call every registered hook with ``report``."""
    for hook in list(_hooks):
        try:
            hook(report)
        except Exception as exc:
            print(f"ipympi: the on_error hook {hook!r} raised {exc!r}", file=sys.stderr)
