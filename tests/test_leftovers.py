"""The end-of-cell check of what a cell left in a rank, without processes.

The check takes the engine from the progress thread, so it is skipped when
nothing can have changed since the last one: no MPI call was entered and no
frame came in. These tests drive it on a stand-in engine that counts how often
it is taken. Messages still on their way when a cell ends are found by
comparing the ranks' counts (:func:`in_flight`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ipympi.core.ledger import Ledger
from ipympi.notebook.engine.leftovers import Leftovers, in_flight


@dataclass
class Envelope:
    source: int
    tag: int
    context: int = 0
    nbytes: int = 16


@dataclass
class FakeMatcher:
    unexpected: list[Envelope] = field(default_factory=list)

    def pending_unexpected(self) -> list[Envelope]:
        return list(self.unexpected)

    def pending_posted(self) -> list[Any]:
        return []


class FakeEngine:
    """What :meth:`Leftovers.check` reads of an engine."""

    def __init__(self) -> None:
        self.finalized = False
        self.transport = object()
        self.matcher = FakeMatcher()
        self._sends: dict[int, Any] = {}
        self.colls: list[Any] = []
        self.ledger = Ledger()
        self.entered = 0
        self.progressed = 0
        self.taken = 0  # how often the check took the engine
        self.sent = [0, 0]
        self.arrived = [0, 0]

    def enter(self) -> None:
        self.entered += 1
        self.taken += 1

    def unanswered_sends(self) -> list[Any]:
        return list(self._sends.values())

    def leave(self) -> None:
        pass

    def poll_once(self, block: bool) -> None:
        pass

    def arrive(self, envelope: Envelope) -> None:
        """A frame handled by the progress thread, which leaves a message unreceived."""
        self.matcher.unexpected.append(envelope)
        self.arrived[envelope.source] += 1
        self.progressed += 1


def test_a_quiet_rank_is_checked_once() -> None:
    engine, leftovers = FakeEngine(), Leftovers()
    assert leftovers.check(engine, take_mismatch=True) == ([], None)
    assert leftovers.check(engine, take_mismatch=True) == ([], None)
    assert leftovers.check(engine, take_mismatch=True) == ([], None)
    assert engine.taken == 1


def test_a_frame_that_came_in_is_checked_and_reported_once() -> None:
    engine, leftovers = FakeEngine(), Leftovers()
    leftovers.check(engine, take_mismatch=True)
    engine.arrive(Envelope(source=1, tag=7))
    lines, _ = leftovers.check(engine, take_mismatch=True)
    assert lines == [
        "ipympi warning: a message from rank 1 (tag 7, 16 bytes) on MPI_COMM_WORLD "
        "has not been received"
    ]
    assert leftovers.check(engine, take_mismatch=True) == ([], None)
    assert engine.taken == 2


def test_an_mpi_call_since_the_last_check_is_checked() -> None:
    engine, leftovers = FakeEngine(), Leftovers()
    leftovers.check(engine, take_mismatch=True)
    engine.enter()  # the cell called MPI (and, say, posted nothing)
    engine.leave()
    leftovers.check(engine, take_mismatch=True)
    assert engine.taken == 3


def test_mismatch_news_left_by_an_earlier_cell_is_taken() -> None:
    engine, leftovers = FakeEngine(), Leftovers()
    engine.ledger.errors[1] = (4, "rank 2 called Bcast")
    # a failed cell does not take the news ...
    assert leftovers.check(engine, take_mismatch=False) == ([], None)
    # ... the next one does, although nothing happened in between
    assert leftovers.check(engine, take_mismatch=True) == ([], "rank 2 called Bcast")
    assert engine.taken == 2


def test_an_interrupted_cell_is_always_checked() -> None:
    engine, leftovers = FakeEngine(), Leftovers()
    leftovers.check(engine, take_mismatch=True)
    leftovers.check(engine, take_mismatch=False, interrupted=True)
    assert engine.taken == 2


def test_the_check_keeps_the_counts_it_covered() -> None:
    engine, leftovers = FakeEngine(), Leftovers()
    engine.sent[1] = 3
    engine.arrive(Envelope(source=1, tag=7))
    leftovers.check(engine, take_mismatch=True)
    assert leftovers.traffic == ((0, 3), (0, 1))
    engine.arrive(Envelope(source=1, tag=8))  # after the check: not covered by it
    assert leftovers.traffic == ((0, 3), (0, 1))


def test_messages_on_their_way_are_found_by_comparing_counts() -> None:
    sent = {0: (0, 2, 1), 1: (0, 0, 0), 2: (0, 0, 0)}
    arrived = {0: (0, 0, 0), 1: (1, 0, 0), 2: (1, 0, 0)}
    assert in_flight(sent, arrived, [0, 1, 2]) == {1: {0: 2}}
    assert in_flight(sent, arrived, [0, 2]) == {}  # only the receivers asked about
    assert in_flight(sent, {0: (0, 0, 0), 2: (1, 0, 0)}, [1]) == {}  # 1 did not report
