"""What the cluster records for a request, and how a cell's run takes it (no processes)."""

from __future__ import annotations

import time

from ipympi.notebook.controller.cellrun import COALESCE, Coalescer
from ipympi.notebook.controller.inbox import engine_of, rank_of, record
from ipympi.notebook.controller.records import EngineRecord, Submission
from ipympi.notebook.engine.protocol import EngineMessage


def stream(rank: int, text: str) -> tuple[int, str, dict]:
    return (rank, "stream", {"name": "stdout", "text": text})


def test_output_is_taken_once_in_order_and_kept() -> None:
    req = Submission("r1", "execute", [0, 1])
    assert req.take_output() == []
    before = time.monotonic()
    req.add_output(stream(1, "a"), stream(0, "b"))
    since = req.fresh_since
    assert since >= before
    req.add_output(stream(0, "c"))
    assert req.fresh_since == since  # the oldest output not taken yet
    assert req.take_output() == [stream(1, "a"), stream(0, "b"), stream(0, "c")]
    assert req.take_output() == []
    req.add_output(stream(1, "d"))
    assert req.fresh_since >= since
    assert req.take_output() == [stream(1, "d")]
    assert len(req.messages) == 4  # everything stays in the request
    req.taken = 0  # a new follower (``%pxresult``) takes everything
    assert len(req.take_output()) == 4


def test_the_coalescer_holds_output_from_when_it_came() -> None:
    shown: list[list] = []
    coalescer = Coalescer(shown.append)
    coalescer.add([])
    assert coalescer.due is None
    coalescer.add([stream(1, "x"), stream(0, "y")], since=10.0)
    coalescer.add([stream(0, "z")], since=11.0)  # held with the first: same window
    assert coalescer.due == 10.0 + COALESCE
    coalescer.flush()
    assert shown == [[stream(0, "y"), stream(0, "z"), stream(1, "x")]]  # by rank, stable


def test_an_engine_message_goes_to_its_request_and_its_engine() -> None:
    engines = [EngineRecord(0), EngineRecord(1)]
    req = Submission("r1", "execute", [0, 1])
    requests = {req.id: req}
    record(engines, requests, 1, EngineMessage("hello", {"pid": 42, "host": "h"}))
    assert engines[1].ready and engines[1].pid == 42 and engines[1].host == "h"
    record(engines, requests, 0, EngineMessage("stream", stream(0, "hi")[2], parent="r1"))
    assert req.said == {0: 1} and req.take_output() == [stream(0, "hi")]
    content = {"status": "ok", "names": ["a"], "p2p": {"sent": [0, 2]}}
    reply = EngineMessage("reply", content, parent="r1")
    record(engines, requests, 0, reply)
    assert req.replies[0] is reply and req.pending == [1]
    assert engines[0].names == ("a",) and engines[0].sent == (0, 2)
    record(engines, requests, 5, EngineMessage("hello", {}))  # no such rank: ignored
    record(engines, requests, 1, EngineMessage("stream", {"text": "x"}, parent="old"))
    assert req.pending == [1] and len(req.messages) == 1


def test_identities_and_launcher_events_name_their_engine() -> None:
    assert rank_of(b"out3.2", 3) == 2 and rank_of(b"in3.0", 3) == 0
    assert rank_of(b"out2.2", 3) is None and rank_of(b"outx.y", 3) is None
    assert rank_of(b"other", 3) is None
    engines = [EngineRecord(0, pid=7, host="a"), EngineRecord(1, pid=8, host="b")]
    assert engine_of(engines, {"rank": 1}) is engines[1]
    assert engine_of(engines, {"rank": 9}) is None
    assert engine_of(engines, {"pid": 8, "host": "b"}) is engines[1]
    assert engine_of(engines, {"pid": 8, "host": "a"}) is None


class FakeCluster:
    """What stuck_end reads of a cluster: its policy and whether interrupts reach MPI calls."""

    def __init__(self, on_error: str, interrupts: bool) -> None:
        self.on_error = on_error
        self.launcher = type("L", (), {"interrupts_mpi_calls": interrupts})()


def test_a_stuck_cell_ends_as_the_policy_and_the_mpi_say() -> None:
    from typing import Any, cast

    from ipympi.launch.watch import Verdict
    from ipympi.notebook.controller.records import UNINTERRUPTIBLE
    from ipympi.notebook.controller.stuck import stuck_end

    req = Submission("r1", "execute", [0, 1, 2])
    failed = {"status": "error", "ename": "ValueError", "evalue": "x", "traceback": []}
    req.replies[2] = EngineMessage("reply", failed, parent="r1")
    stuck = Verdict("stuck", "deadlock: ...")

    def end(on_error: str, interrupts: bool, verdict: Verdict = stuck) -> Any:
        return stuck_end(cast(Any, FakeCluster(on_error, interrupts)), req, verdict, "cell [4]")

    waits = end("wait", True)
    assert waits.how == "wait" and waits.note is not None
    assert "deadlock: ..." in waits.note and "interrupt the kernel" in waits.note
    assert "%mpi stop" in str(end("wait", False).note)
    assert end("interrupt", True).how == "interrupt"
    aborts = end("abort", True)
    assert aborts.how == "end" and aborts.reason == "the world was ended because deadlock: ..."
    assert aborts.ended is None
    real = end("interrupt", False, Verdict("failed", "rank 2 failed; ..."))
    assert real.how == "end" and str(real.ended).startswith(UNINTERRUPTIBLE)
    assert real.reason == (
        "ipympi ended it when ranks 0,1 waited in MPI calls after rank 2 failed in cell [4]"
    )
    deadlock = end("interrupt", False, Verdict("deadlock", "probable deadlock: ..."))
    assert deadlock.reason == "ipympi ended it after a probable deadlock in cell [4]"
