"""Generalized requests (``MPI.Grequest``) and the ``Get_status*`` calls of requests.

Generalized requests are local to a process: most tests run here (a world of one
rank); one runs them among messages between ranks.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from conftest import MPI_PRELUDE, RunMPI, assert_ok, mpi_program

from ipympi import MPI


class Log:
    """Callbacks that record their calls; ``query`` fills the status."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def query(self, status: MPI.Status, *args: Any, **kwargs: Any) -> None:
        self.calls.append(("query", args, kwargs))
        status.Set_source(3)
        status.Set_tag(7)

    def free(self, *args: Any, **kwargs: Any) -> None:
        self.calls.append(("free", args, kwargs))

    def cancel(self, completed: bool, *args: Any, **kwargs: Any) -> None:
        self.calls.append(("cancel", completed))

    def names(self) -> list[str]:
        return [call[0] for call in self.calls]


def start(log: Log, **kwargs: Any) -> MPI.Grequest:
    return MPI.Grequest.Start(log.query, log.free, log.cancel, **kwargs)


def test_callbacks_in_order() -> None:
    log = Log()
    greq = start(log, args=(1,), kwargs={"k": 2})
    status = MPI.Status()
    assert not greq.Test() and not greq.Get_status()
    greq.Cancel()
    greq.Complete()
    greq.Cancel()
    assert greq.Get_status(status) and (status.source, status.tag) == (3, 7)
    assert greq  # Get_status completes nothing
    assert greq.Test(status) and not greq
    assert log.calls == [
        ("cancel", False), ("cancel", True), ("query", (1,), {"k": 2}),
        ("query", (1,), {"k": 2}), ("free", (1,), {"k": 2}),
    ]  # fmt: skip
    assert greq.Wait()  # now a null request
    with pytest.raises(MPI.Exception) as info:
        greq.Complete()
    assert info.value.Get_error_class() == MPI.ERR_REQUEST


def test_without_callbacks_and_lower_case() -> None:
    greq = MPI.Grequest.Start()
    greq.complete({"result": 42})
    status = MPI.Status()
    assert greq.wait(status) == {"result": 42}
    assert (status.source, status.tag, status.cancelled) == (MPI.ANY_SOURCE, MPI.ANY_TAG, False)
    assert greq.test() == (True, None)
    with pytest.raises(TypeError):
        MPI.Grequest.Start(query_fn=1)  # type: ignore[arg-type]


def test_freed_before_complete_frees_at_complete() -> None:
    log = Log()
    greq = start(log)
    other = MPI.Grequest(greq)
    greq.Free()
    assert not greq and other and log.names() == []
    other.Complete()
    assert log.names() == ["free"]  # freed without being queried


def test_completed_by_another_thread_wakes_the_waiter() -> None:
    greq = MPI.Grequest.Start()
    timer = threading.Timer(0.2, greq.complete, args=("late",))
    began = time.monotonic()
    timer.start()
    assert greq.wait() == "late"
    assert 0.15 < time.monotonic() - began < 2


def test_callback_errors(capfd: pytest.CaptureFixture[str]) -> None:
    def mpi_error(*_: Any) -> None:
        raise MPI.Exception(MPI.ERR_BUFFER)

    def other_error(*_: Any) -> None:
        raise ValueError("boom")

    for failing, error in ((mpi_error, MPI.ERR_BUFFER), (other_error, MPI.ERR_OTHER)):
        for callbacks in ((failing, None, None), (None, failing, None)):
            greq = MPI.Grequest.Start(*callbacks)
            greq.Complete()
            with pytest.raises(MPI.Exception) as info:
                greq.Wait()
            assert info.value.Get_error_class() == error and not greq
        greq = MPI.Grequest.Start(None, None, failing)
        with pytest.raises(MPI.Exception) as info:
            greq.Cancel()
        assert info.value.Get_error_class() == error
        greq.Complete()
        greq.Wait()
    assert capfd.readouterr().err.count("Traceback (most recent call last):") == 6


def test_in_multiple_completion_calls() -> None:
    log = Log()
    greqs = [start(log), MPI.Grequest.Start(), MPI.REQUEST_NULL]
    sends = [MPI.COMM_SELF.Isend(b"x", MPI.PROC_NULL)]
    requests: list[Any] = [*greqs, *sends]
    statuses: list[MPI.Status] = []
    assert MPI.Request.Testall(requests) is False
    assert MPI.Request.Testsome(requests, statuses) == [3] and len(statuses) == 1
    greqs[0].Complete()
    index, flag = MPI.Request.Testany(requests, statuses[0])
    assert (index, flag) == (0, True) and statuses[0].tag == 7 and not requests[0]
    threading.Timer(0.1, greqs[1].complete, args=("second",)).start()
    assert MPI.Request.waitall(requests, statuses) == [None, "second", None, None]
    assert len(statuses) == 4 and log.names() == ["query", "free"]


def test_get_status_calls() -> None:
    recv = MPI.COMM_SELF.Irecv(bytearray(4), 0, 5)
    done = MPI.COMM_SELF.Isend(b"", MPI.PROC_NULL)
    requests = [recv, MPI.REQUEST_NULL, done]
    status = MPI.Status()
    statuses = [MPI.Status()]
    assert MPI.Request.Get_status_all(requests) is False
    assert MPI.Request.Get_status_any(requests, status) == (2, True)
    assert MPI.Request.Get_status_some(requests, statuses) == [2]
    assert done and recv  # nothing was completed
    MPI.COMM_SELF.Send(b"abcd", 0, 5)
    assert MPI.Request.Get_status_all(requests, statuses) is True
    assert len(statuses) == 3 and (statuses[0].source, statuses[0].tag) == (0, 5)
    assert statuses[0].Get_count(MPI.BYTE) == 4 and statuses[1].source == MPI.ANY_SOURCE
    assert MPI.Request.get_status_all(requests) and recv and done
    MPI.Request.Waitall(requests)
    assert MPI.Request.Get_status_any(requests) == (MPI.UNDEFINED, True)
    assert MPI.Request.Get_status_some(requests) is None


def test_statuses_sequences() -> None:
    """A list of statuses grows to what is reported; a tuple gets what it holds."""
    requests = [MPI.COMM_SELF.Isend(b"", MPI.PROC_NULL) for _ in range(3)]
    pair = (MPI.Status(), MPI.Status())
    for status in pair:
        status.error = MPI.ERR_OTHER
    assert MPI.Request.Waitall(requests, pair)
    assert all(status.error == MPI.SUCCESS for status in pair)
    grown: list[MPI.Status] = []
    MPI.Request.Waitall(requests, grown)
    assert len(grown) == 3


def test_among_messages(run_mpi: RunMPI) -> None:
    body = """
    import threading
    greq = MPI.Grequest.Start()
    buf = bytearray(1)
    recv = comm.Irecv(buf, prv, 0)
    comm.Send(bytes([rank]), nxt, 0)
    index = MPI.Request.Waitany([greq, recv])  # the message, while greq is pending
    assert index == 1 and buf[0] == prv and greq, (index, buf)
    recv = comm.Irecv(buf, prv, 1)
    threading.Timer(0.2, greq.complete, args=(rank,)).start()
    comm.Send(bytes([rank]), nxt, 1)
    assert MPI.Request.waitall([greq, recv]) == [rank, None]
    """
    assert_ok(run_mpi(2, mpi_program(MPI_PRELUDE, body)), 2)
