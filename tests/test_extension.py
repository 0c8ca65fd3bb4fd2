"""The ipympi extension in a stock IPython kernel: ``%load_ext ipympi`` in any notebook.

Without the ipympi kernel, a notebook on the ordinary ``python3`` kernel
loads the extension, starts ranks with ``%mpi start``, and sends chosen cells
to them (``%%px``, ``%px``, or every cell with ``%autopx``); the Python API
(``ipympi.current()``) moves data between the notebook and the ranks. A
kernel subshell (ipykernel 7) gets ``%mpi status`` and ``%mpi stop`` past a
running cell. The kernel spec ``python3`` is installed into a temporary
prefix first, so that the kernel is this interpreter, where ipympi is
installed.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kernel_helpers import (
    KernelSession,
    children,
    kernel_env,
    kernel_specs_installed,
    session_processes,
    stream_text,
    wait_gone,
)

KERNEL = "python3"
GONE_WITHIN = 10.0  # seconds for stopped engines to exit


@pytest.fixture(scope="module")
def kernel_specs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with kernel_specs_installed(tmp_path_factory.mktemp("jupyter")) as data_dir:
        yield data_dir


@pytest.fixture(scope="module")
def kernel(kernel_specs: Path) -> Iterator[KernelSession]:
    """A stock IPython kernel with the extension loaded and two ranks started."""
    with KernelSession(KERNEL, kernel_env()) as k:
        k.ok("%load_ext ipympi")
        out = k.ok("%mpi start -n 2", timeout=60)
        assert re.fullmatch(r"MPI session: 2 ranks ready in [0-9.]+ s\n", stream_text(out))
        yield k


def labelled(messages: list[dict]) -> list[tuple[str, list[int]]]:
    """(text, ranks) of each stream message, which must carry ipympi's rank metadata."""
    out = []
    for m in messages:
        assert m["msg_type"] == "stream", m["msg_type"]
        out.append((m["content"]["text"], m["metadata"]["ipympi"]["ranks"]))
    return out


@pytest.mark.timeout(60)
def test_the_kernel_is_this_interpreter(kernel: KernelSession) -> None:
    out = kernel.ok("import sys\nprint(sys.executable)")
    assert stream_text(out) == f"{sys.executable}\n"


@pytest.mark.timeout(60)
def test_mpi4py_on_the_ranks_is_ipympi_but_not_in_the_kernel(kernel: KernelSession) -> None:
    out = kernel.ok("%%px\nfrom mpi4py import MPI as M\nprint(M is MPI, M.COMM_WORLD.Get_size())")
    assert labelled(out) == [("[stdout:0,1] True 2\n", [0, 1])]
    out = kernel.ok("import importlib.util\nprint(importlib.util.find_spec('mpi4py'))")
    assert "mpi4py_name" not in stream_text(out)


@pytest.mark.timeout(60)
def test_px_cell_output_is_labelled(kernel: KernelSession) -> None:
    out = kernel.ok("%%px\nprint('hi', rank)")
    assert sorted(labelled(out)) == [("[stdout:0] hi 0\n", [0]), ("[stdout:1] hi 1\n", [1])]


@pytest.mark.timeout(60)
def test_px_line_and_pull(kernel: KernelSession) -> None:
    assert kernel.ok("%px x = rank") == []
    assert kernel.value("import ipympi\nipympi.current().pull('x')") == [0, 1]
    # the notebook's own namespace is untouched
    assert kernel.value("'x' in dir()") is False


@pytest.mark.timeout(60)
def test_autopx_toggles_parallel_mode(kernel: KernelSession) -> None:
    out = kernel.ok("%autopx")
    assert stream_text(out) == "%autopx on: cells run on the ranks\n"
    try:
        out = kernel.ok("print('auto', rank)")
        assert sorted(labelled(out)) == [
            ("[stdout:0] auto 0\n", [0]),
            ("[stdout:1] auto 1\n", [1]),
        ]
        out = kernel.ok("%%local\nprint('local')")
        assert out[0]["content"]["text"] == "local\n"
        assert "ipympi" not in out[0]["metadata"]
    finally:
        out = kernel.ok("%autopx")
    assert stream_text(out) == "%autopx off\n"
    out = kernel.ok("print('plain')")
    assert [(m["content"]["text"], m["metadata"]) for m in out] == [("plain\n", {})]


@pytest.mark.timeout(60)
def test_apply_a_notebook_function(kernel: KernelSession) -> None:
    code = (
        "import ipympi\n"
        "def f(a, b=1):\n"
        "    return (a + b) * (rank + 1)\n"
        "ipympi.current().apply(f, 10, b=2)"
    )
    assert kernel.value(code) == [12, 24]


@pytest.mark.timeout(60)
def test_scatter_and_gather(kernel: KernelSession) -> None:
    code = (
        "import ipympi\n"
        "c = ipympi.current()\n"
        "c.scatter('part', list(range(5)))\n"
        "(c.pull('part'), c.gather('part'))"
    )
    assert kernel.value(code) == ([[0, 1, 2], [3, 4]], [0, 1, 2, 3, 4])
    code = (
        "import numpy as np\n"
        "a = np.arange(7.0)\n"
        "c.scatter('arr', a)\n"
        "parts = c.pull('arr')\n"
        "back = c.gather('arr')\n"
        "([p.tolist() for p in parts], type(back).__name__, bool((back == a).all()))"
    )
    assert kernel.value(code) == ([[0.0, 1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], "ndarray", True)
    out = kernel.ok("%px print(type(arr).__name__, arr.sum())")
    assert sorted(labelled(out)) == [
        ("[stdout:0] ndarray 6.0\n", [0]),
        ("[stdout:1] ndarray 15.0\n", [1]),
    ]


@pytest.mark.timeout(90)
def test_stop_then_start_again(kernel: KernelSession) -> None:
    # the engines are the supervisor's children; the supervisor itself stays for the next start
    [supervisor], engines = session_processes(kernel.pid)
    assert len(engines) == 2
    out = kernel.ok("%mpi stop")
    assert stream_text(out) == "MPI session stopped\n"
    assert wait_gone(engines, GONE_WITHIN) == []
    assert children(supervisor) == []
    out = kernel.ok("%mpi start -n 2", timeout=60)
    assert re.fullmatch(r"MPI session: 2 ranks ready in [0-9.]+ s\n", stream_text(out))
    out = kernel.ok("%px print(rank, size)")
    assert sorted(labelled(out)) == [("[stdout:0] 0 2\n", [0]), ("[stdout:1] 1 2\n", [1])]
    _, new_engines = session_processes(kernel.pid)
    assert len(new_engines) == 2
    assert not set(new_engines) & set(engines)


def in_subshell(kernel: KernelSession, subshell: str, code: str) -> tuple[dict, list[dict]]:
    """Run ``code`` in a subshell of the kernel (its own thread): reply and IOPub messages."""
    msg = kernel.kc.session.msg(
        "execute_request",
        {"code": code, "silent": False, "store_history": False, "user_expressions": {}},
    )
    msg["header"]["subshell_id"] = subshell
    kernel.kc.shell_channel.send(msg)
    return kernel.collect(msg["header"]["msg_id"], timeout=30)


@pytest.mark.timeout(90)
def test_a_subshell_gets_status_and_stop_past_a_running_cell(kernel: KernelSession) -> None:
    kernel.kc.control_channel.send(kernel.kc.session.msg("create_subshell_request", {}))
    subshell = kernel.kc.get_control_msg(timeout=10)["content"]["subshell_id"]
    cell = kernel.send("%%px\nimport time\nprint('under way', flush=True)\ntime.sleep(60)")
    deadline = time.monotonic() + 30
    while True:  # until the cell is under way on the ranks
        msg = kernel.kc.get_iopub_msg(timeout=max(0.1, deadline - time.monotonic()))
        if msg["parent_header"].get("msg_id") == cell and msg["msg_type"] == "stream":
            break
    reply, messages = in_subshell(kernel, subshell, "%mpi status")
    assert reply["content"]["status"] == "ok"
    (result,) = [m for m in messages if m["msg_type"] == "execute_result"]
    rows = result["content"]["data"]["text/plain"].splitlines()[2:]
    assert [row.split()[3] for row in rows] == ["running", "running"]
    reply, _ = in_subshell(kernel, subshell, "%mpi pull rank")  # waits for the cell's end
    assert reply["content"]["ename"] == "UsageError"
    assert "only status, stop and restart get past it" in reply["content"]["evalue"]
    reply, messages = in_subshell(kernel, subshell, "%mpi stop")
    assert stream_text(messages) == "MPI session stopped\n"
    assert kernel.shell_reply(cell, time.monotonic() + 10)["content"]["ename"] == "EngineStopped"
    kernel.ok("%mpi start -n 2", timeout=60)


@pytest.mark.timeout(60)
def test_shutdown_leaves_no_process(kernel_specs: Path) -> None:
    with KernelSession(KERNEL, kernel_env()) as k:
        k.ok("%load_ext ipympi")
        k.ok("%mpi start -n 2", timeout=60)
        supervisors, engines = session_processes(k.pid)
        assert len(supervisors) == 1
        assert len(engines) == 2
        pid = k.pid
    assert wait_gone([pid, *supervisors, *engines], GONE_WITHIN) == []
