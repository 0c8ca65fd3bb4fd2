"""``%mpi status``: a table of the ranks, as HTML in a notebook and text in a terminal."""

from __future__ import annotations

import html
import os
import socket
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ...core import control as ctl

if TYPE_CHECKING:
    from .contracts import CellCluster

__all__ = ["COLUMNS", "StatusTable", "format_memory", "status_rows"]

COLUMNS = ("rank", "pid", "host", "state", "call", "where", "memory")
_HEADINGS = {"call": "MPI call / wait", "where": "at"}


def format_memory(nbytes: float | None) -> str:
    if nbytes is None:
        return ""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if nbytes < 1024 or unit == "GiB":
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.1f} {unit}"
        nbytes /= 1024
    return ""


class StatusTable:
    """The rows of ``Cluster.status()``; displays as a table under its ``caption``.

    The caption says how the ranks run (``3 ranks: mpi4py backend (MPICH
    5.0.2), started by mpiexec``); it is the first line of the text form.
    """

    def __init__(self, rows: Sequence[dict[str, Any]], caption: str = "") -> None:
        self.rows = list(rows)
        self.caption = caption

    def _cells(self) -> list[list[str]]:
        out = []
        for row in self.rows:
            cells = []
            for column in COLUMNS:
                value = row.get(column)
                if column == "memory":
                    cells.append(format_memory(value))
                else:
                    cells.append("" if value is None else str(value))
            out.append(cells)
        return out

    def __repr__(self) -> str:
        if not self.rows:
            return "no ranks running (%mpi start)"
        heads = [_HEADINGS.get(c, c) for c in COLUMNS]
        cells = self._cells()
        widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(heads)]
        lines = [self.caption] if self.caption else []
        lines += ["  ".join(h.ljust(w) for h, w in zip(heads, widths)).rstrip()]
        lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        if not self.rows:
            return "<p>no ranks running (<code>%mpi start</code>)</p>"
        head = "".join(f"<th>{html.escape(_HEADINGS.get(c, c))}</th>" for c in COLUMNS)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
            for row in self._cells()
        )
        caption = f"<caption>{html.escape(self.caption)}</caption>" if self.caption else ""
        return f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


# -- the rows -------------------------------------------------------------------------------
def status_rows(cluster: CellCluster) -> list[dict[str, Any]]:
    """One row per rank, then one per running process the ranks spawned (its process
    index in the ``rank`` column): rank, pid, host, state, call (what it waits for),
    where, memory.

    The ranks are asked what they do (``Cluster.query_states``); the memory of
    a rank that does not say is read from ``/proc`` where the rank is local.
    """
    rows = []
    for engine, state in zip(cluster.engines, cluster.query_states()):
        memory = state.get("rss") or _rss_bytes(cluster.local_pid(engine)) if engine.alive else None
        host = engine.host or socket.gethostname()
        ended_by = engine.ended_by and cluster.launcher.name
        rows.append(_row(engine.rank, engine.pid, host, state, memory, ended_by))
    for index, child in sorted(cluster.children.procs.items()):
        pid = child.popen.pid
        state = cluster.children.states.get(index) or ctl.launcher_state(index, pid, None)
        memory = state.get("rss") or _rss_bytes(pid)
        rows.append(_row(index, pid, socket.gethostname(), state, memory))
    return rows


def _row(
    rank: int,
    pid: int | None,
    host: str,
    state: Mapping[str, Any],
    memory: int | None,
    ended_by: str = "",
) -> dict[str, Any]:
    call = ctl.format_call(state) if state.get("state") == "blocked" else ""
    return {
        "rank": rank,
        "pid": pid,
        "host": host,
        "state": _state_word(state, ended_by),
        "call": call,
        "where": state.get("where", ""),
        "memory": memory,
    }


def _state_word(state: Mapping[str, Any], ended_by: str = "") -> str:
    """One word or two for a rank's state (``ended_by``: the launcher that ended it)."""
    word = str(state.get("state", ctl.NO_ANSWER))
    if word == ctl.EXITED and ended_by:
        return f"ended by {ended_by}"
    if word == ctl.EXITED:
        if state.get("signal"):
            return f"killed ({state['signal']})"
        return f"exited ({state.get('status', '?')})"
    return word


def _rss_bytes(pid: int | None) -> int | None:
    """Resident memory of ``pid`` (Linux /proc), else None."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return None
