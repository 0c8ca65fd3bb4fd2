"""Cells that fail, hang or end the world: each ends promptly with a clear report.

Driven through :func:`ipympi.notebook.controller.execute.run_cell` on real engines,
with a publish callback that records what the notebook would show.
"""

from __future__ import annotations

import time

import pytest

from ipympi.notebook.controller.cluster import Cluster, ClusterError
from ipympi.notebook.controller.execute import CellOptions, CellResult, run_cell
from ipympi.notebook.controller.render import strip_ansi

pytestmark = pytest.mark.timeout(60)

REPORT_WITHIN = 5.0  # seconds; the target is about one (generous for a loaded CI machine)


@pytest.fixture(scope="module")
def cluster():
    with Cluster(4) as c:
        c.start()
        yield c


class Notebook:
    def __init__(self) -> None:
        self.messages: list[tuple[str, dict]] = []

    def publish(self, msg_type: str, content: dict, metadata: dict) -> None:
        self.messages.append((msg_type, content))

    def text(self, name: str = "stdout") -> str:
        return "".join(
            c["text"] for t, c in self.messages if t == "stream" and c.get("name") == name
        )


def cell(cluster: Cluster, code: str, **options) -> tuple[CellResult, Notebook, float]:
    notebook = Notebook()
    started = time.monotonic()
    result = run_cell(cluster, code, CellOptions(**options), notebook.publish, 1)
    return result, notebook, time.monotonic() - started


def summary(result: CellResult) -> tuple[str, list[str]]:
    exc = result.error()
    assert exc is not None
    lines = [strip_ansi(line) for line in exc._render_traceback_()]
    return type(exc).__name__, lines


def assert_usable(cluster: Cluster) -> None:
    result, notebook, _ = cell(cluster, "print(comm.allreduce(1))")
    assert result.ok, result.errors
    assert notebook.text() == "[stdout:0-3] 4\n"


def test_an_exception_on_one_rank_ends_the_cell_and_names_the_waiting_ranks(cluster) -> None:
    result, _, took = cell(cluster, "1 / 0 if rank == 2 else comm.Barrier()")
    assert took < REPORT_WITHIN
    name, lines = summary(result)
    assert name == "ZeroDivisionError"
    assert lines[0].startswith("rank 2 of 4 raised ZeroDivisionError: division by zero; ")
    assert "were waiting in Barrier" in lines[0] or "was waiting in Barrier" in lines[0]
    assert "[2:execute]" in lines
    assert sorted(result.errors) == [2]
    assert_usable(cluster)


def test_a_deadlock_is_reported_as_its_wait_for_graph(cluster) -> None:
    result, _, took = cell(cluster, "if rank < 2:\n    comm.recv(source=1 - rank, tag=7)\n")
    assert took < REPORT_WITHIN
    name, lines = summary(result)
    assert name == "DeadlockError"
    assert lines[0] == (
        "no rank can progress: rank 0 waits in recv(source=1, tag=7) on MPI_COMM_WORLD; "
        "rank 1 waits in recv(source=0, tag=7) on MPI_COMM_WORLD; ranks 2,3 have finished "
        "the cell; the ranks were stopped"
    )
    assert sorted(result.errors) == [0, 1]
    assert_usable(cluster)


def test_a_rank_skipping_a_barrier_is_named(cluster) -> None:
    result, _, took = cell(cluster, "if rank != 3:\n    comm.Barrier()\n")
    assert took < REPORT_WITHIN
    name, lines = summary(result)
    assert name == "DeadlockError"
    assert "rank 3 has finished the cell" in lines[0]
    assert_usable(cluster)


def test_slow_ranks_and_long_transfers_are_not_stuck(cluster) -> None:
    code = (
        "import time, numpy as np\n"
        "a = np.zeros(1 << 22)\n"
        "if rank == 1:\n"
        "    time.sleep(1.5)\n"
        "    comm.Recv(a, source=0)\n"
        "elif rank == 0:\n"
        "    comm.Send(a + 1, dest=1)\n"
        "comm.Barrier()\n"
        "print(a[0])\n"
    )
    result, notebook, _ = cell(cluster, code)
    assert result.ok, result.errors
    assert "[stdout:1] 1.0" in notebook.text()


def test_on_error_wait_keeps_waiting_until_the_timeout(cluster) -> None:
    cluster.on_error = "wait"
    try:
        result, notebook, took = cell(cluster, "if rank == 0: comm.recv(source=1)", timeout=2.5)
    finally:
        cluster.on_error = "interrupt"
    assert took >= 2.4
    assert "deadlock" in notebook.text("stderr") or "no rank can progress" in notebook.text(
        "stderr"
    )
    name, lines = summary(result)
    assert name == "TimeoutError"
    assert "--timeout 2.5 s" in "\n".join(lines)
    assert_usable(cluster)


def test_a_timeout_stops_a_computing_cell(cluster) -> None:
    result, _, took = cell(cluster, "while True: pass", timeout=1, targets="1")
    assert took < 1 + REPORT_WITHIN
    name, lines = summary(result)
    assert name == "TimeoutError"
    assert lines[0].startswith("the cell ran longer than --timeout 1 s; rank 1 was stopped at")
    assert "stopped at line 1 of cell [" in lines[0]
    assert "raise KeyboardInterrupt" not in "\n".join(lines)
    assert "KeyboardInterrupt" not in strip_ansi("\n".join(result.errors[1]["traceback"]))
    assert_usable(cluster)


def test_abort_ends_the_world_and_the_next_cell_gets_a_fresh_one() -> None:
    with Cluster(3) as c:
        c.start()
        old = [e.pid for e in c.engines]
        result, _, took = cell(c, "if rank == 1: comm.Abort(5)\nelse: comm.Barrier()")
        assert took < REPORT_WITHIN
        name, lines = summary(result)
        assert name == "MPIAbort"
        assert "rank 1 called Abort with error code 5" in lines[0]
        result, notebook, _ = cell(c, "print(size)")
        assert "starting a fresh world of 3 ranks" in notebook.text("stderr")
        assert notebook.text() == "[stdout:0-2] 3\n"
        assert set(old).isdisjoint(e.pid for e in c.engines)


def test_on_error_abort_ends_a_stuck_world() -> None:
    with Cluster(2) as c:
        c.start()
        c.on_error = "abort"
        result, _, took = cell(c, "comm.recv(source=1 - rank)")
        assert took < REPORT_WITHIN
        name, _lines = summary(result)
        assert name == "DeadlockError"
        assert not c.running
        result, notebook, _ = cell(c, "print(rank)")
        assert "the world was ended because deadlock" in notebook.text("stderr")
        assert result.ok


def test_on_error_hooks_get_a_report_per_rank(cluster) -> None:
    import ipympi
    from ipympi.notebook.controller.hooks import remove_error_hook

    reports = []
    hook = ipympi.on_error(reports.append)
    try:
        cell(cluster, "1 / 0 if rank == 3 else comm.recv(source=3, tag=4)")
        cell(cluster, "print('fine')")
    finally:
        remove_error_hook(hook)
    [report] = reports
    assert report.exception == "ZeroDivisionError"
    assert report.summary.startswith("rank 3 of 4 raised ZeroDivisionError")
    failed = report.rank(3)
    assert failed.state == "failed" and failed.message == "division by zero"
    assert failed.traceback[-1] == "ZeroDivisionError: division by zero"
    for rank in range(3):
        waiting = report.rank(rank)
        assert waiting.state == "stopped"
        assert (waiting.call, waiting.comm, waiting.peer, waiting.tag) == (
            "recv",
            "MPI_COMM_WORLD",
            3,
            4,
        )
        assert waiting.where.startswith("line 1 of cell [")
    assert_usable(cluster)


def test_a_failing_hook_does_not_break_the_session(cluster, capsys) -> None:
    import ipympi
    from ipympi.notebook.controller.hooks import remove_error_hook

    def broken(report):
        raise RuntimeError("hook bug")

    ipympi.on_error(broken)
    try:
        result, _, _ = cell(cluster, "raise KeyError(rank)")
    finally:
        remove_error_hook(broken)
    assert type(result.error()).__name__ == "KeyError"
    assert "hook bug" in capsys.readouterr().err
    assert_usable(cluster)


def test_messages_and_receives_left_behind_are_warned_about_once(cluster) -> None:
    code = (
        "import time\n"
        "if rank == 0:\n"
        "    comm.send('x', dest=1, tag=7)\n"
        "elif rank == 1:\n"
        "    time.sleep(0.3)\n"
        "    pending = comm.irecv(source=2, tag=8)\n"
    )
    _, notebook, _ = cell(cluster, code)
    assert notebook.text("stderr") == (
        "[stderr:1] ipympi warning: a message from rank 0 (tag 7, 16 bytes) on MPI_COMM_WORLD "
        "has not been received\n"
        "[stderr:1] ipympi warning: a receive (source=2, tag=8) on MPI_COMM_WORLD is still "
        "pending: Wait for its request, or Cancel it\n"
    )
    _, notebook, _ = cell(cluster, "pass")
    assert notebook.text("stderr") == ""
    _, notebook, _ = cell(
        cluster,
        "if rank == 1:\n    comm.recv(source=0, tag=7)\n    pending.Cancel()\n    pending.wait()",
    )
    assert notebook.text("stderr") == ""


def test_leftovers_of_a_stopped_cell_are_warned_about_under_that_cell(cluster) -> None:
    # Both ranks send synchronously first: a deadlock, stopped by the controller. The
    # messages they sent are left unreceived, and that cell (not the next) says so.
    code = (
        "if rank < 2:\n"
        "    comm.ssend(rank, dest=1 - rank, tag=7)\n"
        "    comm.recv(source=1 - rank, tag=7)\n"
    )
    result, notebook, _ = cell(cluster, code)
    assert type(result.error()).__name__ == "DeadlockError"
    stderr = notebook.text("stderr")
    for rank in (0, 1):
        assert (
            f"[stderr:{rank}] ipympi warning: a message from rank {1 - rank} (tag 7, "
        ) in stderr, stderr
        assert (
            f"[stderr:{rank}] ipympi warning: a message to rank {1 - rank} (tag 7, ssend) on "
            "MPI_COMM_WORLD has not been received yet"
        ) in stderr, stderr
    assert "nonblocking" not in stderr
    _, notebook, _ = cell(cluster, "if rank < 2:\n    comm.recv(source=1 - rank, tag=7)\n")
    assert notebook.text("stderr") == ""
    assert_usable(cluster)


def test_an_unnamed_communicator_is_described_in_warnings(cluster) -> None:
    code = "dup = comm.Dup()\nif rank == 0:\n    unanswered = dup.issend('x', dest=1, tag=3)\n"
    _, notebook, _ = cell(cluster, code)
    assert (
        "[stderr:0] ipympi warning: a message to rank 1 (tag 3, issend) on an unnamed "
        "communicator (4 ranks) has not been received yet\n"
    ) in notebook.text("stderr")
    cell(
        cluster,
        "if rank == 1:\n    dup.recv(source=0, tag=3)\nif rank == 0:\n    unanswered.wait()",
    )
    cell(cluster, "dup.Free()")


def test_operations_on_a_rank_that_dies_fail_with_an_mpi_error() -> None:
    code = (
        "import os, signal, time\n"
        "if rank == 2:\n"
        "    time.sleep(0.3)\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "elif rank == 0:\n"
        "    comm.recv(source=2)\n"
        "else:\n"
        "    comm.Barrier()\n"
    )
    with Cluster(3) as c:
        c.start()
        result, _, took = cell(c, code)
        assert took < REPORT_WITHIN
        errors = result.errors
        assert errors[2]["ename"] == "EngineDied"
        assert errors[0]["ename"] == "MPI.Exception"  # raised in the rank
        assert errors[0]["error_class"] == "ERR_OTHER"
        assert errors[0]["died"] == "rank 2 has died (was killed by signal SIGKILL)"
        assert errors[0]["evalue"].endswith("recv: rank 2 has died (was killed by signal SIGKILL)")
        assert "Barrier: collective #0 on MPI_COMM_WORLD: rank 2 has died" in errors[1]["evalue"]
        assert not result.stopped  # they failed by themselves, nobody had to stop them
        with pytest.raises(ClusterError, match="rank 2 was killed by signal SIGKILL"):
            cell(c, "pass")
        result, _, _ = cell(c, "print(comm.allreduce(1))", targets="0,1")
        assert type(result.error()).__name__ == "MPI.Exception"  # the world has a dead member
        c.restart()
        result, notebook, _ = cell(c, "print(comm.allreduce(1))")
        assert notebook.text() == "[stdout:0-2] 3\n"


def test_unreceived_sends_and_unfinished_collectives_are_warned_about(cluster) -> None:
    code = (
        "if rank == 0:\n"
        "    unanswered = comm.issend('x', dest=1, tag=9)\n"
        "if rank == 2:\n"
        "    early = comm.Ibarrier()\n"
    )
    _, notebook, _ = cell(cluster, code)
    stderr = notebook.text("stderr")
    assert (
        "[stderr:0] ipympi warning: a message to rank 1 (tag 9, issend) on MPI_COMM_WORLD "
        "has not been received yet\n"
    ) in stderr
    assert (
        "[stderr:2] ipympi warning: a nonblocking Ibarrier on MPI_COMM_WORLD is still in "
        "progress: Wait for its request\n"
    ) in stderr
    cell(
        cluster,
        "if rank == 1:\n    comm.recv(source=0, tag=9)\nif rank != 2:\n    comm.Ibarrier().Wait()",
    )
    result, notebook, _ = cell(
        cluster, "if rank == 0: unanswered.wait()\nif rank == 2: early.wait()"
    )
    assert result.ok and notebook.text("stderr") == ""
    assert_usable(cluster)
