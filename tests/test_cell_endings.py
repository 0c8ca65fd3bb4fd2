"""How a cell that cannot go on ends, on both backends, through a real ``ipympi`` kernel.

One kernel of three ranks per backend (ipympi's own MPI, and mpi4py on MPICH
started by ``mpiexec`` where they are installed), driven by a
``jupyter_client`` client as a notebook would. Each test runs the scenario a
new user hits and checks that the cell ends within a few seconds with a
readable error, and that the next cell works:

- a rank raises while the others wait in a collective: its error comes first,
  then what each other rank was doing; on a real MPI the world is ended and the
  next cell's fresh world says which variables were lost;
- two ranks receive from each other: a deadlock (a probable one on a real MPI);
- cells that are still working are never ended: a long ``Allreduce``, a loop of
  short waits (a token passed round a ring), a rank that computes;
- ``%mpi config on_error=wait`` keeps waiting, and ``%mpi status``, ``%mpi
  restart``, ``%mpi stop`` and the notebook's interrupt get through meanwhile;
- a rank's progress (or control) thread that fails ends the cell, naming the
  rank and what broke (a fault injected through ``IPYMPI_TEST_FAULT``);
- on ipympi's own MPI, a message left unreceived is reported under the cell
  that left it, every time, also when the next cell is a magic or an Abort.

No process of a kernel may be left when the module ends.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kernel_helpers import (
    KernelSession,
    descendants,
    error_text,
    execute_headers,
    failing_cell,
    kernel_env,
    kernel_specs_installed,
    outputs,
    stream_text,
    wait_gone,
)

NP = 3
REPORT_WITHIN = 5.0  # seconds for a failure to be reported (about one on an idle machine)
DEADLOCK_AFTER = 3.0  # the default of %mpi config deadlock_after (a real MPI)
RESTART_WITHIN = 60.0
GONE_WITHIN = 10.0
WORKING = 3.0  # seconds the cells that are still working work, with deadlock_after=1
LONG = 2.5  # seconds one long Allreduce should last (with deadlock_after=0.2)
LARGEST = 2**26  # the most doubles it may take (512 MiB a buffer)
MPIEXEC = shutil.which("mpiexec") or os.path.join(os.path.dirname(sys.executable), "mpiexec")
HAVE_MPI4PY = importlib.util.find_spec("mpi4py") is not None and os.access(MPIEXEC, os.X_OK)
BACKENDS = [
    "builtin",
    pytest.param(
        "mpi4py",
        marks=pytest.mark.skipif(
            not HAVE_MPI4PY, reason="needs mpi4py and mpiexec (pip install mpi4py mpich)"
        ),
    ),
]
# What a cell's error says when ipympi ends a world of a real MPI.
ENDED = "so the MPI world was ended (the next cell starts a fresh one)"
UNINTERRUPTIBLE = "a rank inside a call of a real MPI cannot be interrupted"


@pytest.fixture(scope="module")
def kernel_specs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with kernel_specs_installed(tmp_path_factory.mktemp("jupyter")) as data_dir:
        yield data_dir


@pytest.fixture(scope="module", params=BACKENDS)
def session(request: pytest.FixtureRequest, kernel_specs: Path) -> Iterator[KernelSession]:
    """One kernel per backend; none of its processes may be left when the module ends."""
    backend = request.param
    seen: set[int] = set()
    with KernelSession("ipympi", kernel_env(np=NP, IPYMPI_BACKEND=backend)) as k:
        k.ok("None", timeout=60)  # the first cell waits for the ranks to start
        k.backend = backend  # type: ignore[attr-defined]
        k.seen = seen  # type: ignore[attr-defined]
        try:
            yield k
        finally:
            seen.update([k.pid, *descendants(k.pid)])
    assert wait_gone(seen, GONE_WITHIN) == []


@pytest.fixture
def kernel(session: KernelSession) -> Iterator[KernelSession]:
    """The backend's kernel, with the default settings, a running world and ``kept``
    defined on every rank; put back in order after the test."""
    k = session
    restore(k)
    k.ok("kept = rank * 10", timeout=RESTART_WITHIN)
    k.seen.update(descendants(k.pid))  # type: ignore[attr-defined]
    yield k
    k.seen.update(descendants(k.pid))  # type: ignore[attr-defined]
    k.drain_iopub()
    restore(k)


def restore(k: KernelSession) -> None:
    reply, _ = k.execute("%mpi config on_error=interrupt deadlock_after=3")
    if reply["content"]["status"] != "ok":  # a stopped session: start it again
        k.ok("%mpi start", timeout=RESTART_WITHIN)
        k.ok("%mpi config on_error=interrupt deadlock_after=3")


def real(k: KernelSession) -> bool:
    return k.backend == "mpi4py"  # type: ignore[attr-defined,no-any-return]


def count_of(reply: dict) -> int:
    return int(reply["content"]["execution_count"])


def results(messages: list[dict]) -> list[str]:
    return [
        m["content"]["data"]["text/plain"]
        for m in outputs(messages)
        if m["msg_type"] == "execute_result"
    ]


def assert_next_cell_works(k: KernelSession, world_kept: bool) -> None:
    """The next cell runs collectives; ``kept`` survived the failure, or the fresh
    world's notice names it among the variables lost."""
    reply, messages = k.execute("comm.allreduce(1), 'kept' in dir()", timeout=RESTART_WITHIN)
    assert reply["content"]["status"] == "ok", error_text(reply)
    assert results(messages) == [f"({NP}, {world_kept})"]
    notice = stream_text(outputs(messages), "stderr")
    if world_kept:
        assert notice == ""
    else:
        assert notice.startswith("ipympi: the previous MPI world has ended (ipympi ended it "), (
            notice
        )
        assert notice.endswith(f"; starting a fresh world of {NP} ranks (variables lost: kept)\n")


DEADLOCK = (
    "if rank == 0:\n    comm.recv(source=1, tag=7)\nelif rank == 1:\n    comm.recv(source=0, tag=7)"
)


# -- a failing rank, a deadlock ----------------------------------------------------------------
@pytest.mark.timeout(90)
def test_a_failing_rank_ends_the_cell_with_its_error_first(kernel: KernelSession) -> None:
    reply, lines, took = failing_cell(kernel, "if rank == 1:\n    1 / 0\ncomm.Barrier()")
    assert took < REPORT_WITHIN
    assert reply["content"]["ename"] == "ZeroDivisionError"
    n = count_of(reply)
    summary = lines[0]
    assert summary.startswith("rank 1 of 3 raised ZeroDivisionError: division by zero; "), summary
    for rank in (0, 2):  # what each other rank was doing: its call and line
        call = r"comm\.Barrier\(\)" if real(kernel) else r"Barrier \(collective #\d+, round \d\)"
        assert re.search(
            rf"\b{rank}\b[^;]* waiting in {call}[^;]* at line 3 of cell \[{n}\]", summary
        )
    if real(kernel):
        assert summary.endswith(
            f"; {UNINTERRUPTIBLE} and its world cannot go on after a peer failed, {ENDED}"
        )
    assert execute_headers(lines) == ["[1:execute]"]
    assert "ZeroDivisionError: division by zero" in lines
    assert_next_cell_works(kernel, world_kept=not real(kernel))


@pytest.mark.timeout(90)
def test_two_ranks_receiving_from_each_other_are_a_deadlock(kernel: KernelSession) -> None:
    reply, lines, took = failing_cell(kernel, DEADLOCK)
    assert took < (DEADLOCK_AFTER if real(kernel) else 0) + REPORT_WITHIN
    assert reply["content"]["ename"] == "DeadlockError"
    n = count_of(reply)
    if real(kernel):
        assert lines[0] == (
            f"probable deadlock: rank 0 waits in comm.recv(source=1, tag=7) at line 2 of cell "
            f"[{n}]; rank 1 waits in comm.recv(source=0, tag=7) at line 4 of cell [{n}]; rank 2 "
            f"has finished the cell (no rank moved or printed for 3 s); {UNINTERRUPTIBLE}, {ENDED}"
        )
    else:
        assert lines[0] == (
            "no rank can progress: rank 0 waits in recv(source=1, tag=7) on MPI_COMM_WORLD; "
            "rank 1 waits in recv(source=0, tag=7) on MPI_COMM_WORLD; rank 2 has finished the "
            "cell; the ranks were stopped"
        )
    assert execute_headers(lines) == ["[0:execute]", "[1:execute]"]
    assert_next_cell_works(kernel, world_kept=not real(kernel))


# -- cells that are still working ---------------------------------------------------------------
RING = """\
import time
left, right = (rank - 1) % size, (rank + 1) % size
start, hops = time.monotonic(), 0
if rank == 0:
    comm.send(False, dest=right)
while True:
    stop = comm.recv(source=left)
    hops += 1
    if rank == 0:
        if stop:
            break
        stop = time.monotonic() - start > {seconds}
    comm.send(stop, dest=right)
    if stop:
        break
hops > 1
"""

COMPUTING = """\
import time
if rank == 0:
    comm.recv(source=1, tag=3)
elif rank == 1:
    start, spins = time.monotonic(), 0
    while time.monotonic() - start < {seconds}:
        spins += 1
    comm.send(spins, dest=0, tag=3)
True
"""

LONG_ALLREDUCE = """\
import time
started = time.monotonic()
comm.Allreduce(a, b)
time.monotonic() - started
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", ["loop of short waits", "computing rank"])
def test_a_cell_still_working_is_never_ended(kernel: KernelSession, case: str) -> None:
    """With a short ``deadlock_after``, a cell of many waits, or waiting on a rank that
    computes, runs to its end."""
    kernel.ok("%mpi config deadlock_after=1")
    code = (RING if case == "loop of short waits" else COMPUTING).format(seconds=WORKING)
    started = time.monotonic()
    reply, messages = kernel.execute(code, timeout=60)
    assert reply["content"]["status"] == "ok", error_text(reply)
    assert time.monotonic() - started > WORKING
    assert results(messages) == ["True"]


@pytest.mark.timeout(180)
def test_a_long_allreduce_is_never_ended(kernel: KernelSession) -> None:
    """One ``Allreduce`` that lasts several seconds (its size chosen from a first, shorter
    one: the machine's speed decides), with ``deadlock_after`` far shorter, runs to its end."""
    kernel.ok("import numpy as np\na = np.ones(2**22); b = np.empty_like(a)")
    kernel.ok("comm.Allreduce(a, b)", timeout=120)  # the first one touches the pages
    reply, messages = kernel.execute(LONG_ALLREDUCE, timeout=120)
    assert reply["content"]["status"] == "ok", error_text(reply)
    took = max(float(value) for value in results(messages))
    n = min(LARGEST, int(2**22 * LONG / took))
    kernel.ok(f"a = np.ones({n}); b = np.empty_like(a)")
    kernel.ok("%mpi config deadlock_after=0.2")
    reply, messages = kernel.execute(LONG_ALLREDUCE, timeout=120)
    assert reply["content"]["status"] == "ok", error_text(reply)
    lasted = min(float(value) for value in results(messages))
    if lasted < 1.0:
        pytest.skip(f"an Allreduce of {n} doubles took only {lasted:.2f} s here")
    assert kernel.value("float(b[0])") == float(NP)
    kernel.ok("del a, b")


# -- on_error=wait: the magics and the interrupt get through ----------------------------------
def wait_for_text(kernel: KernelSession, msg_id: str, needle: str, timeout: float) -> str:
    """The first output text of the running cell ``msg_id`` that holds ``needle``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg = kernel.kc.get_iopub_msg(timeout=deadline - time.monotonic())
        if msg["parent_header"].get("msg_id") != msg_id or msg["msg_type"] != "stream":
            continue
        if needle in msg["content"]["text"]:
            return str(msg["content"]["text"])
    raise TimeoutError(f"the cell did not say {needle!r}")


def wait_for_note(kernel: KernelSession, msg_id: str) -> str:
    """The note of the cell ``msg_id`` that says it is stuck, and keeps waiting."""
    return wait_for_text(kernel, msg_id, "on_error=wait", DEADLOCK_AFTER + REPORT_WITHIN)


def reply_to(kernel: KernelSession, msg_id: str, timeout: float) -> dict:
    return kernel.shell_reply(msg_id, time.monotonic() + timeout)


@pytest.mark.timeout(120)
def test_on_error_wait_keeps_waiting_while_status_and_restart_get_through(
    kernel: KernelSession,
) -> None:
    kernel.ok("%mpi config on_error=wait")
    cell = kernel.send(DEADLOCK)
    note = wait_for_note(kernel, cell)
    assert ("probable deadlock: " if real(kernel) else "no rank can progress: ") in note
    # the cell keeps waiting; %mpi status gets past it and shows where each rank is
    status = kernel.ok("%mpi status", timeout=10)[0]["content"]["data"]["text/plain"]
    rows = status.splitlines()[2:]
    call = "comm.recv(source=1, tag=7)" if real(kernel) else "recv(source=1, tag=7)"
    assert rows[0].split()[3] == "blocked" and call in rows[0], status
    assert rows[2].split()[3] == "idle", status
    # %mpi restart gets past it too, and ends it
    said = stream_text(kernel.ok("%mpi restart", timeout=RESTART_WITHIN))
    assert said.startswith(f"MPI session restarted: {NP} ranks"), said
    reply = reply_to(kernel, cell, 10)
    assert reply["content"]["ename"] == "EngineStopped"
    assert reply["content"]["evalue"] == "the engines were stopped"
    assert results(kernel.execute("comm.allreduce(1)")[1]) == [str(NP)]


@pytest.mark.timeout(120)
def test_stop_gets_past_a_cell_that_computes(kernel: KernelSession) -> None:
    cell = kernel.send("import time\nprint('under way')\nwhile True:\n    time.sleep(0.01)")
    wait_for_text(kernel, cell, "under way", REPORT_WITHIN)
    stopped = time.monotonic()
    assert stream_text(kernel.ok("%mpi stop", timeout=20)) == "MPI session stopped\n"
    reply = reply_to(kernel, cell, 10)
    assert time.monotonic() - stopped < REPORT_WITHIN
    assert reply["content"]["ename"] == "EngineStopped"
    kernel.ok("%mpi start", timeout=RESTART_WITHIN)


@pytest.mark.timeout(120)
def test_the_interrupt_gets_through_on_error_wait(kernel: KernelSession) -> None:
    kernel.ok("%mpi config on_error=wait")
    cell = kernel.send(DEADLOCK)
    wait_for_note(kernel, cell)
    kernel.km.interrupt_kernel()
    interrupted = time.monotonic()
    reply = reply_to(kernel, cell, 30)
    assert reply["content"]["ename"] == "KeyboardInterrupt"
    # a real MPI's ranks ignore it inside their calls: their world ends after a grace period
    assert time.monotonic() - interrupted < (5.0 if real(kernel) else 0) + REPORT_WITHIN
    assert_next_cell_works(kernel, world_kept=not real(kernel))


# -- the progress machinery ---------------------------------------------------------------------
@pytest.mark.timeout(90)
def test_a_failure_of_a_ranks_progress_thread_ends_the_cell_and_its_world(
    kernel: KernelSession,
) -> None:
    """The thread that answers the controller's questions raises (on purpose, at the next
    question); the cell ends naming the rank and what broke; the next cell starts afresh."""
    code = (
        "import os\nif rank == 1:\n    os.environ['IPYMPI_TEST_FAULT'] = 'control'\n"
        "if rank == 0:\n    comm.recv(source=1, tag=5)"
    )
    reply, lines, took = failing_cell(kernel, code)
    assert took < REPORT_WITHIN
    assert reply["content"]["ename"] == "MPIAbort"
    thread = "the engine's control thread" if real(kernel) else "the MPI progress thread"
    assert lines[0] == (
        f"the MPI world was aborted: rank 1: {thread} failed: RuntimeError: a fault injected "
        "for a test at 'control' (IPYMPI_TEST_FAULT) (error code 16); every rank of the world "
        "was ended"
    )
    reply, messages = kernel.execute("comm.allreduce(1), 'kept' in dir()", timeout=RESTART_WITHIN)
    assert reply["content"]["status"] == "ok", error_text(reply)
    notice = stream_text(outputs(messages), "stderr")
    assert notice.startswith(f"ipympi: the previous MPI world has ended (rank 1: {thread} failed")
    assert "(variables lost: kept, os)" in notice
    assert results(messages) == [f"({NP}, False)"]


# -- leftovers (ipympi's own MPI: a real MPI keeps its unreceived messages to itself) --------
@pytest.mark.timeout(120)
def test_a_message_left_unreceived_is_reported_under_its_cell_every_time(
    kernel: KernelSession,
) -> None:
    if real(kernel):
        pytest.skip("a real MPI keeps its unreceived messages to itself")
    warning = (
        "[stderr:1] ipympi warning: a message from rank 0 (tag {tag}, 16 bytes) on "
        "MPI_COMM_WORLD has not been received\n"
    )
    for _ in range(12):
        messages = kernel.ok("if rank == 0:\n    comm.send('x', dest=1, tag=99)")
        assert stream_text(messages, "stderr") == warning.format(tag=99)
        assert stream_text(kernel.ok("%mpi status"), "stderr") == ""
    messages = kernel.ok("if rank == 0:\n    comm.send('x', dest=1, tag=98)")
    assert stream_text(messages, "stderr") == warning.format(tag=98)
    _, lines, _ = failing_cell(kernel, "if rank == 1:\n    comm.Abort(3)")
    assert "warning" not in "\n".join(lines)
