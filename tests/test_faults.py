"""Fault injection through a real ``ipympi`` kernel: every fault is reported, none hangs.

One kernel of four ranks (``IPYMPI_NP=4``) is started from its installed spec
and shared by the module. Each test runs one faulty cell, as a notebook user
would: an exception on one rank or on all, a deadlock, a rank that skips a
collective, mismatched collectives, a rank killed by SIGKILL or ending with
``os._exit``, ``comm.Abort``, an endless loop stopped by the notebook's
interrupt, an MPI error completing a nonblocking request, and a failing
``--noblock`` cell. It checks the report (one ``error`` message, the real
exception's name, the summary line) and that it arrives within
``REPORT_WITHIN`` seconds, then that the kernel is still usable: a following
``comm.allreduce(1)`` gives 4 on every rank, after ``%mpi restart`` where a
rank died, and a variable defined before the fault survives wherever the
world did.

Between tests a fixture puts the world back in order (restarting it if a
test left it broken), so that one failure does not cascade into the next
tests. When the module ends, no kernel, supervisor or engine may be left.
"""

from __future__ import annotations

import ast
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kernel_helpers import (
    KernelSession,
    error_text,
    execute_headers,
    failing_cell,
    kernel_env,
    kernel_specs_installed,
    outputs,
    session_processes,
    stream_text,
    wait_gone,
)

NP = 4
RANKS = list(range(NP))
KERNEL = "ipympi"
REPORT_WITHIN = 5.0  # seconds for a fault to be reported (about one on an idle machine)
RESTART_WITHIN = 30.0  # seconds for %mpi restart (a world with a dead rank takes longer)
GONE_WITHIN = 10.0  # seconds for the processes of a world that ended to exit
KEPT = [10 * rank for rank in RANKS]  # the variable each test defines before its fault


@pytest.fixture(scope="module")
def kernel_specs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with kernel_specs_installed(tmp_path_factory.mktemp("jupyter")) as data_dir:
        yield data_dir


@pytest.fixture(scope="module")
def seen_processes() -> set[int]:
    """Every kernel, supervisor and engine process the module's kernel had."""
    return set()


@pytest.fixture(scope="module")
def module_kernel(kernel_specs: Path, seen_processes: set[int]) -> Iterator[KernelSession]:
    """The module's kernel; when the module ends, none of its processes may be left."""
    with KernelSession(KERNEL, kernel_env(np=NP)) as k:
        k.ok("None", timeout=60)  # the first cell waits for the ranks to start
        try:
            yield k
        finally:
            note_processes(k, seen_processes)
    assert wait_gone(seen_processes, GONE_WITHIN) == []


@pytest.fixture
def kernel(module_kernel: KernelSession, seen_processes: set[int]) -> Iterator[KernelSession]:
    """The shared kernel with ``kept`` defined on every rank; repaired after the test.

    The default ``on_error=interrupt`` is restored, and a world whose
    collectives no longer work (a test that failed half way) is restarted.
    """
    k = module_kernel
    k.ok("%mpi config on_error=interrupt")
    k.ok("kept = rank * 10")
    note_processes(k, seen_processes)
    yield k
    k.drain_iopub()
    note_processes(k, seen_processes)
    k.ok("%mpi config on_error=interrupt")
    for _ in range(2):
        reply, _ = k.execute("comm.allreduce(1)")
        if reply["content"]["status"] == "ok":
            return
    k.ok("%mpi restart", timeout=RESTART_WITHIN)


def note_processes(k: KernelSession, seen: set[int]) -> None:
    supervisors, engines = session_processes(k.pid)
    seen.update([k.pid, *supervisors, *engines])


# -- helpers ------------------------------------------------------------------------------
def parse_ranks(text: str) -> list[int]:
    """``0,1,3`` or ``0-2,5`` as a list of ranks."""
    ranks: list[int] = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        ranks.extend(range(int(first), int(last or first) + 1))
    return ranks


def waiting_ranks(summary: str, call: str, where: str) -> list[int]:
    """The ranks a summary says were waiting in ``call`` (a regex), then ``where``."""
    pattern = rf"ranks? ([0-9,\-]+) (?:was|were) waiting in {call} {re.escape(where)}"
    return sorted(r for found in re.findall(pattern, summary) for r in parse_ranks(found))


def same_on_every_rank(kernel: KernelSession, code: str) -> object:
    """The value of ``code``, which every rank must give alike (one collapsed result)."""
    results = [m for m in kernel.ok(code) if m["msg_type"] == "execute_result"]
    assert len(results) == 1, f"{code!r}: the ranks gave different results"
    assert results[0]["metadata"]["ipympi"]["ranks"] == RANKS
    return ast.literal_eval(results[0]["content"]["data"]["text/plain"])


def assert_world_survived(kernel: KernelSession) -> None:
    """Collectives match again on every rank, and ``kept`` is still there."""
    assert same_on_every_rank(kernel, "comm.allreduce(1), comm.allgather(kept)") == (4, KEPT)


def assert_fresh_world(kernel: KernelSession, old_engines: list[int]) -> None:
    """A full new world: collectives work, ``kept`` is gone, the old engines have exited."""
    assert same_on_every_rank(kernel, "comm.allreduce(1), 'kept' in dir()") == (4, False)
    assert wait_gone(old_engines, GONE_WITHIN) == []
    _, engines = session_processes(kernel.pid)
    assert len(engines) == NP
    assert not set(engines) & set(old_engines)


def engine_pids(kernel: KernelSession) -> list[int]:
    kernel.ok("import os as _os\n_pid = _os.getpid()")
    return kernel.value("%mpi pull _pid")


def count_of(reply: dict) -> int:
    return reply["content"]["execution_count"]


# -- exceptions ---------------------------------------------------------------------------
@pytest.mark.timeout(60)
def test_exception_on_one_rank_while_the_others_wait_in_a_barrier(kernel: KernelSession) -> None:
    reply, lines, took = failing_cell(kernel, "1 / 0 if rank == 2 else comm.Barrier()")
    assert took < REPORT_WITHIN
    assert reply["content"]["ename"] == "ZeroDivisionError"
    assert reply["content"]["evalue"] == "division by zero"
    summary = lines[0]
    assert summary.startswith("rank 2 of 4 raised ZeroDivisionError: division by zero; ")
    where = f"on MPI_COMM_WORLD at line 1 of cell [{count_of(reply)}]"
    assert waiting_ranks(summary, r"Barrier \(collective #\d+, round \d+\)", where) == [0, 1, 3]
    assert execute_headers(lines) == ["[2:execute]"]
    assert sum("ZeroDivisionError: division by zero" in line for line in lines[1:]) == 1
    assert_world_survived(kernel)


@pytest.mark.timeout(60)
def test_the_same_exception_on_every_rank_is_shown_once(kernel: KernelSession) -> None:
    reply, lines, took = failing_cell(kernel, "1 / 0")
    assert took < REPORT_WITHIN
    assert reply["content"]["ename"] == "ZeroDivisionError"
    assert lines[0] == "all 4 ranks raised ZeroDivisionError: division by zero"
    assert execute_headers(lines) == ["[0-3:execute]"]
    assert sum("ZeroDivisionError: division by zero" in line for line in lines[1:]) == 1
    assert_world_survived(kernel)


# -- cells that cannot progress -----------------------------------------------------------
@pytest.mark.timeout(60)
def test_deadlock_of_two_receives_is_stopped(kernel: KernelSession) -> None:
    reply, lines, took = failing_cell(kernel, "comm.recv(source=rank ^ 1, tag=7)")
    assert took < REPORT_WITHIN
    assert reply["content"]["ename"] == "DeadlockError"
    assert lines[0] == (
        "deadlock: rank 0 waits in recv(source=1, tag=7) on MPI_COMM_WORLD; "
        "rank 1 waits in recv(source=0, tag=7) on MPI_COMM_WORLD; "
        "rank 2 waits in recv(source=3, tag=7) on MPI_COMM_WORLD; "
        "rank 3 waits in recv(source=2, tag=7) on MPI_COMM_WORLD; the ranks were stopped"
    )
    assert execute_headers(lines) == [f"[{rank}:execute]" for rank in RANKS]
    assert_world_survived(kernel)


@pytest.mark.timeout(60)
def test_a_rank_skipping_a_barrier_is_named(kernel: KernelSession) -> None:
    reply, lines, took = failing_cell(kernel, "if rank != 3:\n    comm.Barrier()")
    assert took < REPORT_WITHIN
    assert reply["content"]["ename"] == "DeadlockError"
    summary = lines[0]
    assert summary.startswith("no rank can progress: rank 0 waits in Barrier (collective #")
    for rank in (1, 2):
        assert f"; rank {rank} waits in Barrier (collective #" in summary
    assert summary.endswith("; rank 3 has finished the cell; the ranks were stopped")
    assert execute_headers(lines) == ["[0:execute]", "[1:execute]", "[2:execute]"]
    assert_world_survived(kernel)


@pytest.mark.timeout(60)
def test_mismatched_collectives_fail_that_cell_only(kernel: KernelSession) -> None:
    """Rank 0 broadcasts while the others reduce: the cell fails, the next one works.

    The messages of the two calls cross; whichever rank notices first reports
    both calls. The mismatch belongs to this cell: it must neither pass
    unnoticed nor be raised again by the next cell's (correct) collective.
    """
    code = "if rank == 0:\n    comm.bcast(1, root=0)\nelse:\n    comm.reduce(1, root=0)"
    reply, lines, took = failing_cell(kernel, code)
    assert took < REPORT_WITHIN
    assert reply["content"]["ename"] == "MPI.Exception"  # as a program knows it
    evalue = reply["content"]["evalue"]
    assert evalue.startswith(
        "Collective argument differs between processes, "
        "or collectives were called in a different order: "
    )
    assert "rank 0 called bcast(root=0)" in evalue
    assert re.search(r"rank [1-3] called reduce\(root=0\)", evalue)
    assert " raised MPI.Exception" in lines[0]
    assert_world_survived(kernel)


# -- ranks that die or end the world ------------------------------------------------------
def _check_engine_death(
    kernel: KernelSession, code: str, rank: int, how: str, old_engines: list[int]
) -> None:
    """A rank's death is reported; the next cell asks for a restart; the restart works."""
    reply, lines, took = failing_cell(kernel, code)
    assert took < REPORT_WITHIN
    text = "\n".join(lines)
    assert f"[{rank}:execute]" in execute_headers(lines)
    assert f"EngineDied: rank {rank} has died ({how})" in text
    ename, evalue = reply["content"]["ename"], reply["content"]["evalue"]
    others = ",".join(str(r) for r in RANKS if r != rank)
    # The death is the news; the others' MPI calls failed when they heard of it.
    assert ename == "EngineDied", ename
    assert evalue == f"rank {rank} has died ({how})"
    assert re.fullmatch(
        rf"rank {rank} has died \({how}\) while ranks {others} waited in Barrier: "
        r"collective #\d+ on MPI_COMM_WORLD \(each raised MPI.Exception of class ERR_OTHER\)",
        lines[0],
    ), lines[0]
    assert "MPI.Exception: Other error; see the accompanying message: Barrier: " in text
    status = kernel.ok("%mpi status")[0]["content"]["data"]["text/plain"].splitlines()
    assert status[2 + rank].split()[:2] == [str(rank), str(old_engines[rank])]  # under a caption
    assert "idle" not in status[2 + rank].split()
    # a world with a dead rank runs nothing until it is restarted
    after, _ = kernel.execute("comm.allreduce(1)")
    assert after["content"]["status"] == "error"
    assert after["content"]["ename"] == "UsageError"
    assert f"rank {rank} {how}" in after["content"]["evalue"]
    assert "%mpi restart" in after["content"]["evalue"]
    restarted = kernel.ok("%mpi restart", timeout=RESTART_WITHIN)
    assert re.fullmatch(
        r"MPI session restarted: 4 ranks ready in [0-9.]+ s\n", stream_text(restarted)
    )
    assert_fresh_world(kernel, old_engines)


@pytest.mark.timeout(90)
def test_sigkill_of_one_rank_during_a_collective(kernel: KernelSession) -> None:
    old = engine_pids(kernel)
    # the first Barrier sets up the shared board the second one waits on
    code = (
        "import os, signal, time\ncomm.Barrier()\nif rank == 2:\n"
        "    time.sleep(0.3)\n    os.kill(os.getpid(), signal.SIGKILL)\ncomm.Barrier()"
    )
    _check_engine_death(kernel, code, 2, "was killed by signal SIGKILL", old)


@pytest.mark.timeout(90)
def test_os_exit_of_one_rank_during_a_collective(kernel: KernelSession) -> None:
    old = engine_pids(kernel)
    code = "import os\nif rank == 1:\n    os._exit(3)\ncomm.Barrier()"
    _check_engine_death(kernel, code, 1, "exited with status 3", old)
    old = engine_pids(kernel)
    # after a first Barrier, the second one waits on the shared board
    code = "import os\ncomm.Barrier()\nif rank == 1:\n    os._exit(3)\ncomm.Barrier()"
    _check_engine_death(kernel, code, 1, "exited with status 3", old)


@pytest.mark.timeout(60)
def test_abort_ends_the_world_and_the_next_cell_gets_a_fresh_one(kernel: KernelSession) -> None:
    old = engine_pids(kernel)
    reply, lines, took = failing_cell(kernel, "if rank == 1:\n    comm.Abort(5)\ncomm.Barrier()")
    assert took < REPORT_WITHIN
    assert reply["content"]["ename"] == "MPIAbort"
    assert reply["content"]["evalue"].startswith("rank 1 called Abort with error code 5")
    assert "rank 1 called Abort with error code 5" in lines[0]
    # no %mpi restart needed: the next cell says so and starts a fresh world
    reply, messages = kernel.execute("comm.allreduce(1), 'kept' in dir()")
    assert reply["content"]["status"] == "ok", error_text(reply)
    notice = stream_text(outputs(messages), "stderr")
    assert "rank 1 called Abort with error code 5" in notice
    assert "starting a fresh world of 4 ranks" in notice
    assert_fresh_world(kernel, old)


# -- the notebook's interrupt -------------------------------------------------------------
@pytest.mark.timeout(60)
def test_interrupt_stops_an_endless_loop_on_every_rank(kernel: KernelSession) -> None:
    code = "spins = 0\nwhile True:\n    spins += 1"
    reply, lines, took = failing_cell(kernel, code, interrupt_after=1.0)
    assert took < REPORT_WITHIN
    assert reply["content"]["ename"] == "KeyboardInterrupt"
    summary = lines[0]
    # each rank was somewhere in the loop: line 2 or 3
    assert summary.startswith("interrupted: ")
    n = count_of(reply)
    clauses = summary[len("interrupted: ") :].split("; ")
    stopped = []
    for clause in clauses:
        match = re.fullmatch(rf"ranks? ([0-9,\-]+) at line ([23]) of cell \[{n}\]", clause)
        assert match, summary
        stopped += parse_ranks(match[1])
    assert sorted(stopped) == RANKS
    assert "KeyboardInterrupt" in "\n".join(lines[1:])
    assert same_on_every_rank(kernel, "comm.allreduce(spins > 0), comm.allgather(kept)") == (
        4,
        KEPT,
    )


# -- MPI errors ---------------------------------------------------------------------------
@pytest.mark.timeout(60)
def test_error_completing_a_nonblocking_receive(kernel: KernelSession) -> None:
    """Rank 1 sends 10 doubles to an ``Irecv`` of 2: ``Wait`` raises ERR_TRUNCATE."""
    code = (
        "import numpy as np\n"
        "if rank == 0:\n"
        "    buf = np.zeros(2)\n"
        "    req = comm.Irecv(buf, source=1, tag=1)\n"
        "    req.Wait()\n"
        "elif rank == 1:\n"
        "    comm.Send(np.ones(10), dest=0, tag=1)"
    )
    reply, lines, took = failing_cell(kernel, code)
    assert took < REPORT_WITHIN
    assert reply["content"]["ename"] == "MPI.Exception"  # as a program knows it
    evalue = reply["content"]["evalue"]
    assert evalue == (
        "Message truncated: the receive buffer is too small for the message: Irecv: message "
        "of 80 bytes from rank 1 (tag 1) does not fit in a receive buffer of 16 bytes"
    )
    assert lines[0] == f"rank 0 of 4 raised MPI.Exception: {evalue}"
    assert execute_headers(lines) == ["[0:execute]"]
    assert any(line.startswith("----> 5") for line in lines), "the line of req.Wait()"
    # the exception the rank saw carries the error class
    error_class = kernel.value(
        "%%px -t 0\nimport sys\nsys.last_value.Get_error_class() == MPI.ERR_TRUNCATE"
    )
    assert error_class is True
    assert_world_survived(kernel)


# -- cells that do not block --------------------------------------------------------------
@pytest.mark.timeout(60)
def test_error_of_a_noblock_cell_is_shown_by_pxresult(kernel: KernelSession) -> None:
    code = (
        "%%px --noblock\n"
        "import time\n"
        "time.sleep(1.0)\n"
        "if rank == 1:\n"
        "    raise ValueError('late failure')"
    )
    started = time.monotonic()
    reply, messages = kernel.execute(code)
    assert time.monotonic() - started < 1.0, "--noblock waited for the ranks"
    assert reply["content"]["status"] == "ok"
    assert [m["msg_type"] for m in outputs(messages)] == ["execute_result"]
    reply, lines, took = failing_cell(kernel, "%pxresult")
    assert took < REPORT_WITHIN
    assert reply["content"]["ename"] == "ValueError"
    assert reply["content"]["evalue"] == "late failure"
    assert lines[0] == "rank 1 of 4 raised ValueError: late failure"
    assert execute_headers(lines) == ["[1:execute]"]
    assert "----> 4     raise ValueError('late failure')" in lines
    assert_world_survived(kernel)
