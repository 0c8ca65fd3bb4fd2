"""``ipympi.Cluster`` in a stock IPython kernel: the lines an IPython Parallel user runs.

A real ``python3`` kernel (this interpreter) driven by jupyter_client: the client binds
``%px`` to its ranks, Ctrl-C interrupts a view's call, ``wait_interactive`` shows a
progress bar, and a failure shows ipympi's report.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kernel_helpers import (
    KernelSession,
    failing_cell,
    kernel_env,
    kernel_specs_installed,
    session_processes,
    wait_gone,
)

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(scope="module")
def kernel_specs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with kernel_specs_installed(tmp_path_factory.mktemp("jupyter")) as data_dir:
        yield data_dir


@pytest.fixture(scope="module")
def kernel(kernel_specs: Path) -> Iterator[KernelSession]:
    with KernelSession("python3", kernel_env()) as k:
        k.ok("import ipympi\nrc = ipympi.Cluster(n=2).start_and_connect_sync()", timeout=60)
        yield k


def test_the_client_binds_px_to_its_ranks(kernel: KernelSession) -> None:
    kernel.ok("%px here = rank * 3")
    assert kernel.value('rc[:]["here"]') == [0, 3]
    assert kernel.value("rc.ids") == [0, 1]


def test_ctrl_c_interrupts_a_views_call(kernel: KernelSession) -> None:
    code = "import time\nrc[:].apply_sync(time.sleep, 30)"
    reply, lines, took = failing_cell(kernel, code, interrupt_after=1.5)
    assert reply["content"]["ename"] == "CompositeError"
    assert any("KeyboardInterrupt" in line for line in lines), lines
    assert took < 15
    assert kernel.value("rc[:].apply_sync(int)") == [0, 0]


def test_a_failure_shows_ipympis_report(kernel: KernelSession) -> None:
    code = (
        "def f():\n"
        "    from mpi4py import MPI\n"
        "    if MPI.COMM_WORLD.rank == 0:\n"
        "        1 / 0\n"
        "    MPI.COMM_WORLD.barrier()\n"
        "rc[:].apply_sync(f)"
    )
    reply, lines, _ = failing_cell(kernel, code)
    assert reply["content"]["ename"] == "CompositeError"
    assert "rank 0 of 2 raised ZeroDivisionError" in lines[0]
    assert "waiting in barrier" in lines[0]


def test_wait_interactive_shows_progress(kernel: KernelSession) -> None:
    code = "ar = rc[:].apply_async(__import__('time').sleep, 0.5)\nar.wait_interactive(0.1)"
    messages = kernel.ok(code)
    shown = [
        m["content"]["data"]["text/plain"]
        for m in messages
        if m["msg_type"] in ("display_data", "update_display_data")
    ]
    assert shown and shown[-1].startswith("[") and "2/2 ranks done" in shown[-1], shown


def test_stopping_the_cluster_ends_its_ranks(kernel_specs: Path) -> None:
    with KernelSession("python3", kernel_env()) as k:
        k.ok("import ipympi\ncluster = ipympi.Cluster(n=2)\nrc = cluster.start_and_connect_sync()")
        pids = k.value("rc[:].apply_sync(__import__('os').getpid)")
        k.ok("cluster.stop_cluster_sync()")
        assert wait_gone(pids) == []
        assert k.value("rc.ids") == []
        deadline = time.monotonic() + 10
        while session_processes(k.pid) != ([], []) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert session_processes(k.pid) == ([], [])  # nor the supervisor that forked them
