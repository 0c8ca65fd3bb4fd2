"""No message of a failed or interrupted cell reaches a later cell, through a real kernel.

A cell that fails (or that Jupyter's interrupt or the stuck-cell rule stops)
may leave messages unreceived, receives posted and sends waiting for their
receiver. Every rank drops them before the next cell, also those still on their
way when the cell ended (a rank that sends late, a large message), and the
cell's error says how many. ``%mpi config keep_messages=on`` keeps them, and a
cell that succeeded keeps them as before (they are listed under it).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kernel_helpers import (
    KernelSession,
    descendants,
    kernel_env,
    kernel_specs_installed,
    outputs,
    stream_text,
    strip_ansi,
    wait_gone,
)

from ipympi.notebook.engine.leftovers import discard_note

NP = 3
DISCARDED = "ipympi: discarded "

# Rank 1 looks for a message of tag 5 from rank 0 without blocking: what it prints
# is whether the message is there (and its value), and the receive is withdrawn.
PROBE = """
import time
if rank == 1:
    req = comm.irecv(source=0, tag=5)
    deadline = time.monotonic() + 1.0
    done, value = req.test()
    while not done and time.monotonic() < deadline:
        time.sleep(0.05)
        done, value = req.test()
    if not done:
        req.Cancel()
        req.wait()
    print("got", repr(value) if done else "nothing")
"""


@pytest.fixture(scope="module")
def kernel_specs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with kernel_specs_installed(tmp_path_factory.mktemp("jupyter")) as data_dir:
        yield data_dir


@pytest.fixture(scope="module")
def kernel(kernel_specs: Path) -> Iterator[KernelSession]:
    seen: set[int] = set()
    with KernelSession("ipympi", kernel_env(np=NP)) as k:
        k.ok("None", timeout=60)
        try:
            yield k
        finally:
            seen.update([k.pid, *descendants(k.pid)])
    assert wait_gone(seen, 10.0) == []


@pytest.fixture
def fresh(kernel: KernelSession) -> Iterator[KernelSession]:
    kernel.ok("%mpi config keep_messages=off on_error=interrupt")
    yield kernel
    kernel.drain_iopub()
    kernel.ok("%mpi config keep_messages=off on_error=interrupt")
    kernel.execute(
        "if rank == 1:\n    while comm.iprobe(source=0, tag=5): comm.recv(source=0, tag=5)"
    )


def _error(kernel: KernelSession, code: str) -> list[str]:
    reply, _messages = kernel.execute(code, timeout=60)
    content = reply["content"]
    assert content["status"] == "error"
    return [strip_ansi(line) for line in content["traceback"]]


def _probe(kernel: KernelSession) -> str:
    return stream_text(kernel.ok(PROBE, timeout=30)).strip()


def test_a_failed_cells_message_does_not_reach_the_next_cell(fresh: KernelSession) -> None:
    lines = _error(fresh, "if rank == 0:\n    comm.send('old', dest=1, tag=5)\n1 / 0")
    assert lines[-1].startswith(DISCARDED + "1 unreceived message"), lines
    assert "on rank 1" in lines[-1] and "keep_messages=on" in lines[-1]
    assert _probe(fresh).endswith("got nothing")


def test_a_message_sent_late_by_a_rank_finishing_the_cell_is_discarded(
    fresh: KernelSession,
) -> None:
    code = (
        "import time\n"
        "if rank == 0:\n    time.sleep(0.5)\n    comm.send('late', dest=1, tag=5)\n"
        "if rank == 2:\n    posted = comm.irecv(source=0, tag=7)\n"
        "raise ValueError(rank)"
    )
    lines = _error(fresh, code)
    note = [line for line in lines if line.startswith(DISCARDED)]
    assert note and "1 unreceived message, 1 pending receive" in note[0], lines
    assert "ranks 1,2" in note[0]
    assert _probe(fresh).endswith("got nothing")
    # The receive left posted was cancelled: its request completes.
    assert fresh.value("posted.test() if rank == 2 else None", timeout=30) == (True, None)


def test_a_large_message_and_its_waiting_send_are_discarded(fresh: KernelSession) -> None:
    code = (
        "import numpy as np\n"
        "if rank == 0:\n    big = np.ones(1 << 20)\n    pending = comm.Isend(big, dest=1, tag=5)\n"
        "raise ValueError(rank)"
    )
    lines = _error(fresh, code)
    note = [line for line in lines if line.startswith(DISCARDED)]
    assert note and "1 unreceived message" in note[0] and "1 unanswered send" in note[0], lines
    assert "ranks 0,1" in note[0]
    assert _probe(fresh).endswith("got nothing")
    status = fresh.value("pending.Test() if rank == 0 else None", timeout=30)
    assert status is True  # the sender's request completed (cancelled): no hang


def test_an_interrupted_cells_leftovers_are_discarded(fresh: KernelSession) -> None:
    """A deadlock the stuck-cell rule stops: rank 0 waits for tag 1, rank 1 sends tag 5."""
    code = (
        "if rank == 0:\n    comm.recv(source=1, tag=1)\n"
        "elif rank == 1:\n    comm.ssend('stuck', dest=0, tag=5)\n"
    )
    lines = _error(fresh, code)
    note = [line for line in lines if line.startswith(DISCARDED)]
    assert note, lines
    # The interrupt withdrew rank 0's receive; rank 1's ssend still waited.
    assert "1 unreceived message" in note[0] and "1 unanswered send" in note[0]
    text = stream_text(
        fresh.ok(
            "if rank == 0:\n    r = comm.irecv(source=1, tag=5)\n    import time\n"
            "    time.sleep(0.5)\n    print('got', r.test())\n    r.Cancel()\n    r.wait()"
        )
    )
    assert "got (False, None)" in text


def test_keep_messages_on_keeps_them(fresh: KernelSession) -> None:
    fresh.ok("%mpi config keep_messages=on")
    lines = _error(fresh, "if rank == 0:\n    comm.send('old', dest=1, tag=5)\n1 / 0")
    assert not any(line.startswith(DISCARDED) for line in lines)
    assert _probe(fresh).endswith("got 'old'")


def test_a_successful_cells_leftovers_stay_receivable(fresh: KernelSession) -> None:
    reply, messages = fresh.execute("if rank == 0:\n    comm.send('kept', dest=1, tag=5)")
    assert reply["content"]["status"] == "ok"
    warning = stream_text(messages, "stderr")
    assert "has not been received" in warning and DISCARDED not in warning
    assert _probe(fresh).endswith("got 'kept'")


def test_the_note_counts_what_each_rank_dropped() -> None:
    assert discard_note({0: {"messages": 0, "receives": 0, "sends": 0}}) is None
    note = discard_note(
        {0: {"messages": 0, "receives": 0, "sends": 1}, 2: {"messages": 2, "receives": 1}}
    )
    assert note is not None and note.startswith(
        "ipympi: discarded 2 unreceived messages, 1 pending receive, 1 unanswered send "
        "that this cell left (on ranks 0,2)"
    )
    late = discard_note({1: {"messages": 0, "missing": 1}})
    assert late is not None and late.endswith("could not be discarded: a later cell may receive it")


def test_config_shows_and_checks_keep_messages(fresh: KernelSession) -> None:
    assert "keep_messages=off" in stream_text(outputs(fresh.execute("%mpi config")[1]))
    reply, _ = fresh.execute("%mpi config keep_messages=maybe")
    assert reply["content"]["status"] == "error"
    assert "keep_messages must be on or off" in reply["content"]["evalue"]
