"""The stuck-cell rule on a real MPI, on state dicts (no processes).

Each test feeds :class:`RealMPIWatch` the looks a controller would take every
quarter of a second, with the states an engine on mpi4py reports
(:mod:`ipympi.notebook.engine.mpicall`), and checks when it gives a verdict: after a
failure once the others sit in MPI calls, for a probable deadlock once every
rank has sat silent in calls that cannot work together; never for a long
collective, a long transfer, a loop of short waits, a rank that computes or
prints, or one that does not answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ipympi.notebook.controller.realwatch import FAILED_AFTER, RealMPIWatch, could_be_working, waits

EVERY = 0.25  # seconds between looks
AFTER = 3.0  # the watch's deadlock_after


def call(text: str, kind: str, place: str = "a", **more: Any) -> dict[str, Any]:
    """A rank's state inside ``text`` (``comm.recv(source=1, tag=7)``)."""
    method = text.split("(")[0].rpartition(".")[2]
    state = {"state": "blocked", "call": text, "method": method, "kind": kind}
    return {**state, "position": place, "world": True, "where": "line 2 of cell [4]", **more}


def recv(source: Any, tag: Any = 7, place: str = "a") -> dict[str, Any]:
    return call(f"comm.recv(source={source}, tag={tag})", "recv", place, peer=source, tag=tag)


def send(dest: Any, tag: Any = 7, place: str = "a") -> dict[str, Any]:
    return call(f"comm.Ssend(x, dest={dest}, tag={tag})", "send", place, peer=dest, tag=tag)


RUNNING = {"state": "running", "where": "line 3 of cell [4]"}


def verdicts_over(
    seconds: float,
    looks: Any,
    pending: list[int],
    finished: tuple[int, ...] = (),
    failed: tuple[int, ...] = (),
    said: Any = None,
) -> list[Any]:
    """Look every :data:`EVERY` seconds for ``seconds``; the verdicts, one per look.

    ``looks`` is a states dict, or a function of the look's number giving one;
    ``said`` likewise gives the output counts (default: nothing said).
    """
    watch = RealMPIWatch(AFTER)
    verdicts = []
    for i in range(int(seconds / EVERY) + 1):
        states = looks(i) if callable(looks) else looks
        counts: Mapping[int, int] = said(i) if callable(said) else (said or {})
        verdicts.append(watch.look(i * EVERY, states, pending, finished, failed, counts))
    return verdicts


def first_verdict(verdicts: list[Any]) -> tuple[float, Any] | None:
    for i, verdict in enumerate(verdicts):
        if verdict is not None:
            return i * EVERY, verdict
    return None


# -- verdicts -------------------------------------------------------------------------------
def test_two_receives_from_each_other_are_a_probable_deadlock_after_the_time() -> None:
    looks = {0: recv(1), 1: recv(0)}
    found = first_verdict(verdicts_over(AFTER + 1, looks, [0, 1]))
    assert found is not None
    at, verdict = found
    assert at == AFTER
    assert verdict.kind == "deadlock"
    assert verdict.text == (
        "probable deadlock: rank 0 waits in comm.recv(source=1, tag=7) at line 2 of cell [4]; "
        "rank 1 waits in comm.recv(source=0, tag=7) at line 2 of cell [4] "
        "(no rank moved or printed for 3 s)"
    )


def test_ranks_in_a_collective_a_rank_skipped_are_a_probable_deadlock() -> None:
    barrier = call("comm.Barrier()", "collective")
    verdicts = verdicts_over(AFTER + 1, {0: barrier, 1: barrier}, [0, 1], finished=(2,))
    found = first_verdict(verdicts)
    assert found is not None
    tail = "; rank 2 has finished the cell (no rank moved or printed for 3 s)"
    assert found[1].text.endswith(tail)


def test_after_a_failure_the_others_in_mpi_calls_end_the_cell_within_a_second() -> None:
    barrier = call("comm.Barrier()", "collective")
    found = first_verdict(verdicts_over(3, {0: barrier, 2: barrier}, [0, 2], failed=(1,)))
    assert found is not None
    at, verdict = found
    assert at == FAILED_AFTER
    assert verdict.kind == "failed"
    assert verdict.text.startswith("rank 1 failed; rank 0 waits in comm.Barrier() at line 2")


def test_after_a_failure_a_rank_that_computes_is_waited_for() -> None:
    looks = {0: call("comm.Barrier()", "collective"), 2: RUNNING}
    assert first_verdict(verdicts_over(10, looks, [0, 2], failed=(1,))) is None


# -- no verdict: the cell is still working ----------------------------------------------------
def test_a_long_allreduce_is_never_a_deadlock() -> None:
    allreduce = call("comm.Allreduce(a, b)", "collective")
    looks = {0: allreduce, 1: allreduce, 2: allreduce}
    assert first_verdict(verdicts_over(30, looks, [0, 1, 2])) is None


def test_the_last_rank_in_a_long_collective_is_not_a_deadlock() -> None:
    """Ranks 0 and 2 were seen in the Allreduce, then finished it before rank 1."""
    allreduce = call("comm.Allreduce(a, b)", "collective")

    def looks(i: int) -> dict[int, dict]:
        return {0: allreduce, 1: allreduce, 2: allreduce} if i < 2 else {1: allreduce}

    def pending(i: int) -> list[int]:
        return [0, 1, 2] if i < 2 else [1]

    watch = RealMPIWatch(AFTER)
    for i in range(int(30 / EVERY)):
        left = (0, 2) if i >= 2 else ()
        assert watch.look(i * EVERY, looks(i), pending(i), left, (), {}) is None


def test_a_long_collective_of_a_subcommunicator_is_not_a_deadlock() -> None:
    allreduce = call("sub.Allreduce(a, b)", "collective", world=False)
    looks = {0: allreduce, 1: allreduce}
    assert first_verdict(verdicts_over(30, looks, [0, 1], finished=(2,))) is None


def test_a_long_transfer_is_not_a_deadlock() -> None:
    assert first_verdict(verdicts_over(30, {0: send(1), 1: recv(0)}, [0, 1])) is None
    assert first_verdict(verdicts_over(30, {0: send(1), 1: recv("ANY_SOURCE")}, [0, 1])) is None
    unknown = call("comm.Send(a, dest=right)", "send")  # the destination is not a value
    assert first_verdict(verdicts_over(30, {0: unknown, 1: recv(0)}, [0, 1])) is None


def test_requests_being_completed_are_not_a_deadlock() -> None:
    waitall = call("MPI.Request.Waitall(requests)", "wait")
    assert first_verdict(verdicts_over(30, {0: waitall, 1: recv(0)}, [0, 1])) is None


def test_a_loop_of_short_waits_is_not_a_deadlock() -> None:
    # Every look finds the rank in a receive, but at another place ...
    def moving(i: int) -> dict[int, dict]:
        return {0: recv(1, place="a" if i % 2 else "b"), 1: recv(0)}

    assert first_verdict(verdicts_over(30, moving, [0, 1])) is None

    # ... or at the same place, having left the call in between (its engine says so)
    def again(i: int) -> dict[int, dict]:
        return {0: dict(recv(1), stayed=0.0), 1: dict(recv(0), stayed=i * EVERY)}

    assert first_verdict(verdicts_over(30, again, [0, 1])) is None


def test_a_rank_known_to_stay_in_its_call_sits() -> None:
    def looks(i: int) -> dict[int, dict]:
        return {0: dict(recv(1), stayed=i * EVERY), 1: dict(recv(0), stayed=i * EVERY + 5)}

    found = first_verdict(verdicts_over(AFTER + 1, looks, [0, 1]))
    assert found is not None and found[0] == AFTER


def test_a_rank_that_prints_is_not_sitting() -> None:
    looks = {0: recv(1), 1: recv(0)}
    assert first_verdict(verdicts_over(30, looks, [0, 1], said=lambda i: {0: i // 4})) is None


def test_a_computing_rank_is_not_a_deadlock() -> None:
    assert first_verdict(verdicts_over(30, {0: recv(1), 1: RUNNING}, [0, 1])) is None


def test_a_rank_that_does_not_answer_delays_the_verdict_without_resetting_it() -> None:
    def looks(i: int) -> dict[int, dict]:
        return {0: recv(1), 1: recv(0) if i != 8 else {"state": "no answer"}}

    found = first_verdict(verdicts_over(AFTER + 1, looks, [0, 1]))
    assert found is not None and found[0] == AFTER


def test_mismatched_sends_and_receives_cannot_work_together() -> None:
    assert not could_be_working({0: send(1, tag=1), 1: recv(0, tag=2)}, False)
    assert not could_be_working({0: send(2), 1: recv(0)}, False)
    assert not could_be_working({0: send(1), 1: send(0)}, False)
    assert could_be_working({0: send(1, tag=1), 1: recv(0, tag="ANY_TAG")}, False)
    bcast = call("comm.Bcast(a, root=0)", "collective")
    barrier = call("comm.Barrier()", "collective")
    assert not could_be_working({0: bcast, 1: barrier}, False)


def test_waits_names_each_rank_its_call_and_line() -> None:
    assert waits({1: recv(0), 0: recv(1)}) == (
        "rank 0 waits in comm.recv(source=1, tag=7) at line 2 of cell [4]; "
        "rank 1 waits in comm.recv(source=0, tag=7) at line 2 of cell [4]"
    )
