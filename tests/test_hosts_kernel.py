"""A notebook session on several hosts, through a real ``ipympi`` kernel.

``IPYMPI_HOSTS=127.0.0.2:2,127.0.0.3:2`` puts the kernel's four ranks on two
"hosts" (loopback addresses of this machine): one engine supervisor per
host, engines talking to the controller and to each other over signed tcp,
interrupts sent through the supervisors. What a notebook user sees must be
what one host gives: labelled output, errors with the failing rank's
traceback, deadlocks explained, interrupts reaching every host, a dead rank
reported, ``%mpi restart`` onto other hosts, and no process left behind. The
last tests start the supervisors through an ssh stand-in (``tests/fakes``).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kernel_helpers import (
    KernelSession,
    failing_cell,
    kernel_env,
    kernel_specs_installed,
    outputs,
    session_processes,
    stream_text,
    wait_gone,
)

from ipympi.notebook.controller.render import strip_ansi

HOSTS = "127.0.0.2:2,127.0.0.3:2"
FAKES = Path(__file__).resolve().parent / "fakes"
GONE_WITHIN = 10.0
WHERE = "from ipympi.mpi.process import PROCESS\n"


@pytest.fixture(scope="module")
def kernel_specs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with kernel_specs_installed(tmp_path_factory.mktemp("jupyter")) as data_dir:
        yield data_dir


def _start(**env: str) -> KernelSession:
    return KernelSession("ipympi", kernel_env(np=4, IPYMPI_HOSTS=HOSTS, **env))


@pytest.fixture(scope="module")
def kernel(kernel_specs: Path) -> Iterator[KernelSession]:
    with _start() as k:
        k.ok("None", timeout=60)
        yield k


def _text(messages: list[dict]) -> str:
    """The stdout and plain-text displays of ``messages``, ANSI codes removed."""
    shown = [
        m["content"]["data"].get("text/plain", "")
        for m in outputs(messages)
        if m["msg_type"] in ("display_data", "execute_result")
    ]
    return strip_ansi(stream_text(outputs(messages)) + "\n".join(shown))


@pytest.mark.timeout(60)
def test_cells_run_on_both_hosts(kernel: KernelSession) -> None:
    out = _text(kernel.ok(WHERE + "print(rank, PROCESS.host_name(), comm.allreduce(rank))"))
    for rank, host in enumerate(["127.0.0.2"] * 2 + ["127.0.0.3"] * 2):
        assert f"[stdout:{rank}] {rank} {host} 6" in out, out
    status = _text(kernel.ok("%mpi status"))
    assert "forked by supervisors on 2 hosts" in status
    rows = [line.split() for line in status.splitlines()[2:]]  # below the title and header
    assert [(row[0], row[2], row[3]) for row in rows] == [
        ("0", "127.0.0.2", "idle"),
        ("1", "127.0.0.2", "idle"),
        ("2", "127.0.0.3", "idle"),
        ("3", "127.0.0.3", "idle"),
    ], status


@pytest.mark.timeout(60)
def test_a_deadlock_across_hosts_is_explained(kernel: KernelSession) -> None:
    code = (
        "if rank == 0:\n    comm.recv(source=3, tag=1)\n"
        "elif rank == 3:\n    comm.recv(source=0, tag=2)"
    )
    _, lines, took = failing_cell(kernel, code)
    assert lines[0].startswith(
        "no rank can progress: rank 0 waits in recv(source=3, tag=1) on MPI_COMM_WORLD; "
        "rank 3 waits in recv(source=0, tag=2) on MPI_COMM_WORLD"
    ), lines
    assert any("at line 2 of cell" in line for line in lines), lines
    assert took < 10
    assert kernel.value("comm.allreduce(1)") == 4  # the ranks were realigned


@pytest.mark.timeout(60)
def test_an_error_on_another_host_shows_its_traceback(kernel: KernelSession) -> None:
    _, lines, _ = failing_cell(kernel, "if rank == 3:\n    1 / 0\ncomm.Barrier()")
    assert lines[0].startswith("rank 3 of 4 raised ZeroDivisionError: division by zero"), lines
    assert "[3:execute]" in lines
    assert kernel.value("comm.allreduce(1)") == 4


@pytest.mark.timeout(60)
def test_an_interrupt_reaches_ranks_on_every_host(kernel: KernelSession) -> None:
    kernel.ok("%mpi config on_error=wait")
    try:
        code = (
            "import time\nif rank in (1, 2):\n    comm.recv(source=0, tag=9)\n"
            "else:\n    time.sleep(30)"
        )
        _, lines, took = failing_cell(kernel, code, interrupt_after=1.0)
    finally:
        kernel.ok("%mpi config on_error=interrupt")
    text = "\n".join(lines)
    assert "KeyboardInterrupt" in text, text
    assert "recv(source=0, tag=9)" in text, text
    assert took < 8
    assert kernel.value("comm.allreduce(1)") == 4


@pytest.mark.timeout(90)
def test_a_dead_rank_then_a_restart_onto_other_hosts(kernel_specs: Path) -> None:
    with _start() as kernel:
        kernel.ok("None", timeout=60)
        _, lines, _ = failing_cell(
            kernel, "import os\nif rank == 2:\n    os._exit(3)\ncomm.Barrier()"
        )
        assert lines[0].startswith("rank 2 has died (exited with status 3) while "), lines
        said = _text(kernel.ok("%mpi restart -n 3 --hosts 127.0.0.2:1,127.0.0.3:2", timeout=60))
        assert "MPI session restarted: 3 ranks ready on 2 hosts" in said, said
        out = _text(kernel.ok(WHERE + "print(rank, PROCESS.host_name(), size)"))
        assert "[stdout:0] 0 127.0.0.2 3" in out and "[stdout:2] 2 127.0.0.3 3" in out, out
        supervisors, engines = session_processes(kernel.pid)
        assert len(supervisors) == 2 and len(engines) == 3
        pid = kernel.pid
        kernel.shutdown()
    assert wait_gone([pid, *supervisors, *engines], GONE_WITHIN) == []


@pytest.mark.timeout(90)
def test_supervisors_start_through_ssh(kernel_specs: Path, tmp_path: Path) -> None:
    log = tmp_path / "ssh.log"
    with _start(
        IPYMPI_LAUNCHER="ssh",
        IPYMPI_LAUNCHER_EXEC=str(FAKES / "ssh"),
        FAKE_SSH_LOG=str(log),
        MY_SETTING="forwarded",
    ) as kernel:
        out = _text(kernel.ok("import os\nprint(rank, os.environ.get('MY_SETTING'))", timeout=60))
        assert all(f"[stdout:{rank}] {rank} forwarded" in out for rank in range(4)), out
        calls = [json.loads(line) for line in log.read_text().splitlines()]
        assert sorted(call["host"] for call in calls) == ["127.0.0.2", "127.0.0.3"]
        assert all(call["command"].endswith("-m ipympi.notebook.engine") for call in calls)
        supervisors, engines = session_processes(kernel.pid)
        assert len(supervisors) == 2 and len(engines) == 4
        os.kill(kernel.pid, signal.SIGKILL)  # the notebook server dies: nothing may stay
        assert wait_gone([kernel.pid, *supervisors, *engines], GONE_WITHIN) == []
        kernel.shutdown()


@pytest.mark.timeout(90)
def test_an_unreachable_host_is_explained(kernel_specs: Path) -> None:
    with _start(
        IPYMPI_LAUNCHER="ssh", IPYMPI_LAUNCHER_EXEC=str(FAKES / "ssh"), FAKE_SSH_FAIL="1"
    ) as kernel:
        started = time.monotonic()
        reply, messages = kernel.execute("comm.allreduce(1)", timeout=60)
        content = reply["content"]
        assert content["status"] == "error"
        # both hosts refuse; the one whose ssh ends first is named
        assert content["evalue"] in [
            f"the engines did not start: host {host}: lost the connection to its supervisor "
            f"(exit status 255: ssh: connect to host {host} port 22: Connection refused)"
            for host in ("127.0.0.2", "127.0.0.3")
        ]
        assert content["evalue"] in strip_ansi(stream_text(messages, "stderr"))
        assert time.monotonic() - started < 15
