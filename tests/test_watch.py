"""The stuck-cell rule, the wait-for graph and the one watch of a job, on state dicts
(no processes)."""

from __future__ import annotations

from typing import Callable

from ipympi.launch.watch import (
    LOOK_AFTER,
    LOOK_WAIT,
    STUCK_AFTER,
    BuiltinWatch,
    JobWatch,
    Look,
    describe_stuck,
    is_stuck,
)


def blocked(call="recv", peer=1, tag=7, since=STUCK_AFTER + 0.1, progressed=5):
    return {
        "state": "blocked",
        "call": call,
        "comm": "MPI_COMM_WORLD",
        "peer": peer,
        "tag": tag,
        "since": since,
        "progressed": progressed,
    }


def test_two_long_waits_without_progress_are_stuck() -> None:
    look = {0: blocked(peer=1), 1: blocked(peer=0)}
    assert is_stuck(look, look, [0, 1])


def test_a_rank_that_computes_is_not_stuck() -> None:
    previous = {0: blocked(), 1: {"state": "running"}}
    assert not is_stuck(previous, previous, [0, 1])


def test_a_rank_waiting_on_another_job_is_not_stuck() -> None:
    """In Accept, or connected to processes of another job: that job may yet answer."""
    waiting = {**blocked(call="recv", peer=0), "other_jobs": True}
    look = {0: waiting, 1: blocked(peer=0)}
    assert not is_stuck(look, look, [0, 1])


def test_a_rank_handling_frames_is_not_stuck() -> None:
    before = {0: blocked(progressed=5)}
    after = {0: blocked(progressed=6)}
    assert not is_stuck(before, after, [0])


def test_a_short_or_new_wait_is_not_stuck() -> None:
    assert not is_stuck({0: blocked()}, {0: blocked(since=0.1)}, [0])
    assert not is_stuck({0: blocked(tag=1)}, {0: blocked(tag=2)}, [0])


def test_no_previous_look_or_no_pending_rank_is_not_stuck() -> None:
    assert not is_stuck({}, {0: blocked()}, [0])
    assert not is_stuck({0: blocked()}, {0: blocked()}, [])


def test_a_deadlock_is_described_as_its_wait_for_graph() -> None:
    states = {0: blocked(peer=1), 1: blocked(peer=0)}
    text = describe_stuck(states, [0, 1])
    assert text == (
        "deadlock: rank 0 waits in recv(source=1, tag=7) on MPI_COMM_WORLD; "
        "rank 1 waits in recv(source=0, tag=7) on MPI_COMM_WORLD"
    )


def test_waits_on_failed_and_finished_ranks_say_so() -> None:
    states = {0: blocked(call="Barrier (collective #0, round 1)", peer=-1, tag=0)}
    text = describe_stuck(states, [0], finished=[1, 3], failed=[2])
    assert text == (
        "no rank can progress: rank 0 waits in Barrier (collective #0, round 1) on "
        "MPI_COMM_WORLD; rank 2 failed; ranks 1,3 have finished the cell"
    )


def test_a_rank_found_running_is_not_stuck() -> None:
    """Copying a large message on a loaded machine: little CPU, but not asleep."""
    asleep, running = blocked(), dict(blocked(), busy=True)
    assert is_stuck({0: asleep}, {0: dict(asleep, busy=False)}, [0])
    assert not is_stuck({0: asleep}, {0: running}, [0])
    assert not is_stuck({0: running}, {0: asleep}, [0])


class FakeJob:
    """A job whose ranks answer when the test says so, blocked in a recv each."""

    def __init__(self, pending: list[int]) -> None:
        self.pending = pending
        self.asked = 0
        self.answers: dict[int, dict] = {}

    def ask_states(self) -> Callable[[], bool]:
        self.asked += 1
        self.answers = {}
        return lambda: all(rank in self.answers for rank in self.pending)

    def answer(self) -> None:
        self.answers = {rank: blocked(peer=1 - rank) for rank in self.pending}

    def seen(self) -> Look:
        return Look(dict(self.answers), list(self.pending))


def test_a_job_watch_asks_when_due_and_judges_once_answered() -> None:
    job = FakeJob([0, 1])
    watch = JobWatch(job, BuiltinWatch(), start=100.0)
    assert watch.wake == 100.0 + LOOK_AFTER
    assert watch.step(100.1) is None and job.asked == 0  # not due yet
    assert watch.step(100.0 + LOOK_AFTER) is None and job.asked == 1
    assert watch.wake == 100.0 + LOOK_AFTER + LOOK_WAIT  # waits for the answers
    assert not watch.answered()
    assert watch.step(100.0 + LOOK_AFTER + 0.01) is None  # no answer yet, not due
    job.answer()
    assert watch.answered()
    first = watch.step(100.0 + LOOK_AFTER + 0.02)
    assert first is not None and first.verdict is None  # one look is not a trend
    assert not watch.answered() and job.asked == 1
    watch.step(watch.wake)  # the next look
    job.answer()
    second = watch.step(watch.wake - LOOK_WAIT / 2)
    assert second is not None and second.verdict is not None
    assert second.verdict.kind == "stuck"
    assert second.verdict.text == describe_stuck(second.states, [0, 1])


def test_a_look_whose_answers_do_not_come_is_judged_when_its_wait_ends() -> None:
    job = FakeJob([0])
    watch = JobWatch(job, BuiltinWatch(), start=0.0)
    watch.step(LOOK_AFTER)
    assert watch.step(LOOK_AFTER + LOOK_WAIT - 0.01) is None
    seen = watch.step(LOOK_AFTER + LOOK_WAIT)
    assert seen is not None and seen.states == {} and seen.verdict is None


def test_a_dropped_look_is_not_judged() -> None:
    job = FakeJob([0])
    watch = JobWatch(job, BuiltinWatch(), start=0.0)
    watch.step(LOOK_AFTER)
    job.answer()
    watch.drop()  # another query took the answers
    assert not watch.answered()
    assert watch.step(LOOK_AFTER + 0.01) is None  # no look under way; the next is due: asks
    assert job.asked == 2
