"""Telling a stuck cell on a real MPI from one that is still working: what can be seen.

A real MPI (the mpi4py backend) does not say what its ranks wait for, nor
whether a message moved. At each look (every :data:`~.watch.LOOK_EVERY`
seconds) the controller sees, for each rank still running the cell, what its
engine's control thread can tell (:mod:`ipympi.notebook.engine.mpicall`): whether the
main thread is inside a blocking call of mpi4py (state ``blocked``), which
call, as written (``comm.recv(source=1, tag=7)``), with its peer and tag where
they are written as values, a token for the place it is at, and how long it
has surely stayed inside that very call (``stayed``); and whether the rank
sent any output.

A rank *sits* in its call when every look for some time found it blocked at
the same place, it stayed inside the call (a loop of short waits leaves and
re-enters it) and it printed nothing meanwhile. Two verdicts end a cell:

- **failed**: a rank failed (raised, died or aborted) and every other rank
  still running has sat in an MPI call for :data:`FAILED_AFTER` seconds. A
  rank inside a real MPI's call cannot be interrupted, and its world cannot go
  on after a peer failed.
- **probable deadlock**: no rank failed, every rank still running has sat in
  its call for ``deadlock_after`` seconds (``%mpi config deadlock_after=S``),
  and their calls cannot be working with each other. They can when all are in
  one collective on one communicator while no rank has left the cell, or the
  communicator is not ``COMM_WORLD`` (whose members nobody can see), or each
  rank that left was seen in that very call (a rank finishes a long
  collective's last steps after the others): a long ``Allreduce``; when one
  sends and another receives with peers and tags that may match (values not
  written match anything): a long transfer; and when one completes requests
  (``Waitall``), which cannot be seen.

No verdict while a rank computes (it is not in an MPI call), moves from call
to call (a loop of short waits), prints, or does not answer. Pure logic over
state dicts; :class:`ipympi.notebook.controller.cellrun.CellRun` applies the session's
``on_error`` policy to a verdict.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ...core import control as ctl
from ...core.ranksets import ranks_phrase
from ...launch.watch import Verdict

__all__ = ["DEADLOCK_AFTER", "FAILED_AFTER", "RealMPIWatch", "could_be_working", "waits"]

DEADLOCK_AFTER = 3.0  # seconds every rank must sit in its call for a probable deadlock
FAILED_AFTER = 1.0  # seconds the others must sit in MPI calls once a rank has failed

State = Mapping[str, Any]


@dataclass
class _Seat:
    """Where a rank was first seen sitting, when, and how much it had said by then."""

    position: str
    since: float
    said: int

    def sat(self, now: float, state: State) -> float:
        """Seconds the rank has sat, up to ``now``: since the look that found it here,
        and since it entered its call, where its engine can tell (``stayed``)."""
        since = self.since
        if state.get("stayed") is not None:
            since = max(since, now - float(state["stayed"]))
        return now - since


class RealMPIWatch:
    """The looks at one cell's ranks on a real MPI (see the module docstring)."""

    def __init__(self, deadlock_after: float = DEADLOCK_AFTER) -> None:
        self.deadlock_after = deadlock_after
        self._seats: dict[int, _Seat] = {}
        self._seen: dict[int, set[tuple[str, str, str]]] = {}  # rank -> calls it was seen in

    def look(
        self,
        now: float,
        states: Mapping[int, State],
        pending: Iterable[int],
        finished: Iterable[int],
        failed: Iterable[int],
        said: Mapping[int, int],
    ) -> Verdict | None:
        """Take one look; the verdict if the cell should end now, else None.

        ``states`` holds the answers of the ``pending`` ranks (still running the
        cell); ``finished`` and ``failed`` ranks have replied; ``said`` counts
        each rank's output messages so far.
        """
        ranks = list(pending)
        if not ranks:
            return None
        sitting = True
        for rank in ranks:
            state = states.get(rank) or {}
            if state.get("state", ctl.NO_ANSWER) == ctl.NO_ANSWER:
                sitting = False  # no answer this time: neither moving nor sitting
                continue
            seat = self._seats.get(rank)
            position = str(state.get("position") or "")
            if state.get("state") != "blocked" or not position:
                self._seats.pop(rank, None)
                sitting = False
                continue
            self._seen.setdefault(rank, set()).add(_place(state))
            if seat is None or seat.position != position or seat.said != said.get(rank, 0):
                self._seats[rank] = _Seat(position, now, said.get(rank, 0))
        if not sitting:
            return None
        sat = min(self._seats[rank].sat(now, states[rank]) for rank in ranks)
        failed = sorted(set(failed))
        finished = sorted(set(finished) - set(failed))
        calls = {rank: states[rank] for rank in ranks}
        if failed:
            if sat < FAILED_AFTER:
                return None
            return Verdict("failed", f"{ranks_phrase(failed)} failed; " + waits(calls))
        places = {_place(state) for state in calls.values()}
        absent = any(not places <= self._seen.get(rank, set()) for rank in finished)
        if sat < self.deadlock_after or could_be_working(calls, absent):
            return None
        parts = [waits(calls)]
        if finished:
            verb = "has" if len(finished) == 1 else "have"
            parts.append(f"{ranks_phrase(finished)} {verb} finished the cell")
        seconds = f"{self.deadlock_after:g} s"
        return Verdict(
            "deadlock",
            f"probable deadlock: {'; '.join(parts)} (no rank moved or printed for {seconds})",
        )


def waits(calls: Mapping[int, State]) -> str:
    """``rank 0 waits in comm.recv(source=1, tag=7) at line 2 of cell [3]; rank 1 ...``."""
    parts = []
    for rank, state in sorted(calls.items()):
        text = f"rank {rank} waits in {state.get('call') or 'an MPI call'}"
        if state.get("where"):
            text += f" at {state['where']}"
        parts.append(text)
    return "; ".join(parts)


def could_be_working(calls: Mapping[int, State], absent: bool) -> bool:
    """Whether the ranks' calls may be doing their work together (see the module docstring).

    ``absent``: a rank of the cell has finished it without being seen in these calls.
    """
    states = list(calls.values())
    kinds = [str(s.get("kind")) for s in states]
    if "wait" in kinds or "other" in kinds:
        return True
    if all(k == "collective" for k in kinds):
        same = len({(s.get("method"), _receiver(s)) for s in states}) == 1
        return same and (not absent or not all(s.get("world") for s in states))
    senders = [(r, s) for r, s in calls.items() if s.get("kind") in ("send", "sendrecv")]
    receivers = [(r, s) for r, s in calls.items() if s.get("kind") in ("recv", "sendrecv")]
    return any(
        _may_match(sender, send, receiver, recv)
        for sender, send in senders
        for receiver, recv in receivers
        if sender != receiver
    )


def _place(state: State) -> tuple[str, str, str]:
    """A call and where it is made: its method, its object, its line."""
    return (str(state.get("method")), _receiver(state), str(state.get("where")))


def _receiver(state: State) -> str:
    """``comm`` of ``comm.Allreduce(a, b)``: the call's object, as written."""
    return str(state.get("call") or "").split("(", 1)[0].rpartition(".")[0]


def _may_match(sender: int, send: State, receiver: int, recv: State) -> bool:
    """Whether a message of ``send`` (on rank ``sender``) may be what ``recv`` waits for.

    Peers are compared only on ``COMM_WORLD``, where they are the ranks seen
    here; a sendrecv's or an unwritten value matches anything.
    """
    if send.get("kind") == "sendrecv" or recv.get("kind") == "sendrecv":
        return True
    if send.get("world") and recv.get("world"):
        dest, source = send.get("peer"), recv.get("peer")
        if isinstance(dest, int) and dest != receiver:
            return False
        if isinstance(source, int) and source != sender:
            return False
    sent, wanted = send.get("tag"), recv.get("tag")
    return not (isinstance(sent, int) and isinstance(wanted, int) and sent != wanted)
