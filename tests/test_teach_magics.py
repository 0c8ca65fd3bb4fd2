"""The teaching magics in a real kernel: ``%%px --trace``, ``%mpi trace``, ``%mpi explain``,
``%mpi show`` and ``ipympi.last_trace()``.

A stock IPython kernel with ``%load_ext ipympi`` and three ranks, driven by
jupyter_client: every check looks at the iopub messages a notebook would get.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kernel_helpers import KernelSession, kernel_env, kernel_specs_installed, strip_ansi

from ipympi.teach.recording import COLLECTIVES

RANKS = 3


@pytest.fixture(scope="module")
def kernel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KernelSession]:
    with (
        kernel_specs_installed(tmp_path_factory.mktemp("jupyter")),
        KernelSession("python3", kernel_env()) as k,
    ):
        k.ok("%load_ext ipympi")
        k.ok(f"%mpi start -n {RANKS}", timeout=60)
        k.ok("%px import numpy as np")
        yield k


def displays(messages: list[dict]) -> list[dict]:
    return [m["content"]["data"] for m in messages if m["msg_type"] == "display_data"]


def result_data(messages: list[dict]) -> dict:
    (data,) = [m["content"]["data"] for m in messages if m["msg_type"] == "execute_result"]
    return data


def explanation_data(messages: list[dict]) -> dict:
    """The bundle of an explanation: a result, or a display with the widget stepper."""
    (data,) = [
        m["content"]["data"]
        for m in messages
        if m["msg_type"] in ("execute_result", "display_data")
    ]
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        assert "application/vnd.jupyter.widget-view+json" not in data
    else:
        assert "application/vnd.jupyter.widget-view+json" in data
    return data


def error_of(kernel: KernelSession, code: str) -> dict:
    reply, messages = kernel.execute(code)
    assert reply["content"]["status"] == "error", messages
    return reply["content"]


@pytest.mark.timeout(60)
def test_px_trace_draws_the_cells_messages(kernel: KernelSession) -> None:
    out = kernel.ok(
        "%%px --trace\n"
        "total = comm.allreduce(rank)\n"
        "if rank == 0:\n"
        "    comm.send('hi', dest=2, tag=5)\n"
        "elif rank == 2:\n"
        "    comm.recv(source=0, tag=5)\n"
    )
    (shown,) = displays(out)
    assert shown["image/svg+xml"].lstrip().startswith("<svg")
    assert "allreduce" in strip_ansi(shown["text/plain"])
    summary = kernel.value(
        "import ipympi\n"
        "t = ipympi.last_trace()\n"
        "(sorted(t.ranks), [(c.call, c.algorithm) for c in t.collectives],\n"
        " [(m.src, m.dst, m.tag, m.call) for m in t.messages if m.coll is None])"
    )
    ranks, collectives, p2p = summary
    assert ranks == list(range(RANKS))
    assert collectives == [("allreduce", "allreduce_recursive_doubling")]
    assert p2p == [(0, 2, 5, "send")]


@pytest.mark.timeout(60)
def test_px_trace_shows_file_operations(kernel: KernelSession, tmp_path) -> None:
    path = str(tmp_path / "traced.bin")
    out = kernel.ok(
        "%%px --trace\n"
        f"fh = MPI.File.Open(comm, {path!r}, MPI.MODE_CREATE | MPI.MODE_RDWR)\n"
        "fh.Write_at_all(rank * 24, np.zeros(3))\n"
        "fh.Close()\n"
    )
    (shown,) = displays(out)
    text = strip_ansi(shown["text/plain"])
    assert f"{RANKS} file operations" in text, text
    for r in range(RANKS):
        assert f"rank {r}  Write_at_all  offset {r * 24}, 24 bytes" in text, text
    assert "File operations:" in shown["text/html"]
    ops = kernel.value(
        "import ipympi\n"
        "sorted((r['rank'], r['offset'], r['bytes']) for r in ipympi.last_trace().file_ops)"
    )
    assert ops == [[r, r * 24, 24] for r in range(RANKS)] or ops == [
        (r, r * 24, 24) for r in range(RANKS)
    ]


@pytest.fixture
def window(kernel: KernelSession) -> Iterator[None]:
    """``win``: a window of 4 doubles on every rank, freed afterwards."""
    kernel.ok("%%px\nwin = MPI.Win.Allocate(4 * 8, disp_unit=8, comm=comm)")
    try:
        yield
    finally:
        kernel.ok("%%px\nwin.Free()")


@pytest.mark.timeout(60)
def test_px_trace_shows_puts_and_gets_inside_their_fence_epoch(
    kernel: KernelSession, window: None
) -> None:
    out = kernel.ok(
        "%%px --trace\n"
        "win.Fence()\n"
        "win.Put(np.full(1, float(rank)), (rank + 1) % size, 0)\n"
        "got = np.zeros(2)\n"
        "win.Get(got, (rank - 1) % size, 1)\n"
        "win.Fence()\n"
    )
    (shown,) = displays(out)
    text = strip_ansi(shown["text/plain"])
    assert "6 one-sided operations in 1 epoch" in text, text
    assert "fence epoch 1 on Allocate window, ranks 0-2: Fence at " in text, text
    for r in range(RANKS):
        assert f"rank {r} Put → rank {(r + 1) % RANKS}: 8 B at displacement 0" in text, text
        assert f"rank {r} Get ← rank {(r - 1) % RANKS}: 16 B at displacement 1" in text, text
    svg = shown["image/svg+xml"]
    assert svg.count('<g class="rma" ') == 6 and svg.count('data-call="Fence"') == 2 * RANKS
    assert "Barrier" not in svg and "Barrier" not in text  # the Fence is not its barrier
    summary = kernel.value(
        "import ipympi\n"
        "t = ipympi.last_trace()\n"
        "(sorted([o.origin, o.target, o.call, o.nbytes, o.disp] for o in t.rma_ops),\n"
        " [c.call for c in t.collectives], len(t.messages),\n"
        " sorted([e.rank, e.kind, e.index, len(e.ops)] for e in t.epochs))"
    )
    ops, collectives, messages, epochs = summary
    assert ops == sorted(
        [[r, (r + 1) % RANKS, "Put", 8, 0] for r in range(RANKS)]
        + [[r, (r - 1) % RANKS, "Get", 16, 1] for r in range(RANKS)]
    )
    assert (collectives, messages) == ([], 0)
    assert epochs == [[r, "fence", 1, 2] for r in range(RANKS)]
    # what the ranks read and wrote is what the trace says
    assert kernel.value("[g.tolist() for g in ipympi.current().pull('got')]") == [[0.0, 0.0]] * 3


@pytest.mark.timeout(60)
def test_px_trace_shows_a_passive_target_lock_epoch(kernel: KernelSession, window: None) -> None:
    out = kernel.ok(
        "%%px --trace\n"
        "if rank != 0:\n"
        "    old = np.zeros(1)\n"
        "    win.Lock(0, MPI.LOCK_EXCLUSIVE)\n"
        "    win.Fetch_and_op(np.ones(1), old, 0, 2, MPI.SUM)\n"
        "    win.Unlock(0)\n"
        "comm.Barrier()\n"
    )
    (shown,) = displays(out)
    text = strip_ansi(shown["text/plain"])
    for r in (1, 2):
        assert (
            f"lock epoch to 0 (exclusive) on Allocate window, rank {r}: Lock(0, exclusive) at "
        ) in text, text
        assert f"1. rank {r} Fetch_and_op(SUM) ↔ rank 0: 8 B at displacement 2" in text, text
    assert "Barrier on MPI_COMM_WORLD" in text  # the cell's own collective, as always
    epochs = kernel.value(
        "t = ipympi.last_trace()\n"
        "sorted([e.rank, e.kind, list(e.peers), e.lock, [o.label for o in e.ops],\n"
        "        e.opened.call, e.closed.call] for e in t.epochs)"
    )
    assert epochs == [
        [r, "lock", [0], "exclusive", ["Fetch_and_op(SUM)"], "Lock", "Unlock"] for r in (1, 2)
    ]


@pytest.mark.timeout(60)
def test_px_trace_shows_operations_on_the_programs_own_memory(kernel: KernelSession) -> None:
    """``Win.Create`` over numpy arrays: data moves by process_vm copies, not a shared
    segment, and is traced the same way, in a ``Lock_all`` epoch with its ``Flush``."""
    kernel.ok(
        "%%px\nmemory = np.zeros(4, dtype='i4')\n"
        "named = MPI.Win.Create(memory, disp_unit=4, comm=comm)\nnamed.Set_name('counters')"
    )
    try:
        out = kernel.ok(
            "%%px --trace\n"
            "named.Lock_all()\n"
            "named.Accumulate(np.ones(2, dtype='i4'), 0, (1, 2, MPI.INT), MPI.SUM)\n"
            "named.Flush(0)\n"
            "named.Rput(np.full(1, rank, dtype='i4'), 1, 3).Wait()\n"
            "named.Unlock_all()\n"
        )
        (shown,) = displays(out)
        text = strip_ansi(shown["text/plain"])
        for r in range(RANKS):
            assert f"lock_all epoch on counters, rank {r}: Lock_all at " in text, text
            assert f"rank {r} Accumulate(SUM) → rank 0: 8 B at displacement 1" in text, text
            assert f"rank {r} Rput → rank 1: 4 B at displacement 3" in text, text
        syncs = kernel.value("sorted({s.call for s in ipympi.last_trace().rma_syncs})")
        assert syncs == ["Flush", "Lock_all", "Unlock_all"]
        kernel.ok("%%px\nnamed.Fence()")  # the memory: the sum of every rank's 1s
        assert kernel.value("ipympi.current().pull('memory')[0].tolist()") == [0, 3, 3, 0]
    finally:
        kernel.ok("%%px\nnamed.Free()")


@pytest.mark.timeout(60)
def test_untraced_cells_draw_nothing_and_keep_the_last_trace(kernel: KernelSession) -> None:
    kernel.ok("%%px --trace\ncomm.Barrier()")
    before = kernel.value("ipympi.last_trace().summary()")
    out = kernel.ok("%%px\ncomm.Barrier()")
    assert displays(out) == []
    assert kernel.value("ipympi.last_trace().summary()") == before


@pytest.mark.timeout(60)
def test_trace_on_traces_every_cell_until_off(kernel: KernelSession) -> None:
    out = kernel.ok("%mpi trace on")
    assert "tracing is on" in out[0]["content"]["text"]
    assert len(displays(kernel.ok("%px comm.Barrier()"))) == 1
    assert len(displays(kernel.ok("%%px\ncomm.Barrier()"))) == 1
    assert displays(kernel.ok("%%px --no-trace\ncomm.Barrier()")) == []
    kernel.ok("%mpi trace off")
    assert displays(kernel.ok("%%px\ncomm.Barrier()")) == []


@pytest.mark.timeout(60)
def test_a_failing_traced_cell_still_shows_its_trace(kernel: KernelSession) -> None:
    reply, messages = kernel.execute("%%px --trace\ncomm.Barrier()\nif rank == 1:\n    1 / 0\n")
    assert reply["content"]["status"] == "error"
    assert reply["content"]["ename"] == "ZeroDivisionError"
    assert len(displays(messages)) == 1
    assert kernel.value("ipympi.last_trace().collectives[0].call") == "Barrier"


@pytest.mark.timeout(60)
def test_explain_shows_allreduce_step_by_step(kernel: KernelSession) -> None:
    kernel.ok("%px a = np.array([1.0, 2.0]) * (rank + 1); b = np.zeros(2)")
    data = explanation_data(kernel.ok("%mpi explain comm.Allreduce(a, b)"))
    text = data["text/plain"]
    assert "comm.Allreduce(a, b) — algorithm allreduce_recursive_doubling, 3 ranks" in text
    assert "text/html" in data
    # the call really ran: every rank holds the sum
    assert kernel.value("[v.tolist() for v in ipympi.current().pull('b')]") == [[6.0, 12.0]] * 3


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("call", "message"),
    [
        ("", "give the collective call"),
        ("comm.Send(a, dest=1)", "Send is not a collective"),
        ("comm.Allreduce(a,", "is not a Python expression"),
        ("Allreduce(a, b)", "is not a method call"),
        ("comm.Allreduce(*xs)", "write the call's arguments out"),
    ],
)
def test_explain_rejects_what_it_cannot_explain(
    kernel: KernelSession, call: str, message: str
) -> None:
    content = error_of(kernel, f"%mpi explain {call}")
    assert content["ename"] == "UsageError"
    assert message in content["evalue"]


@pytest.mark.timeout(60)
def test_explain_of_a_failing_call_reports_the_ranks_error(kernel: KernelSession) -> None:
    content = error_of(kernel, "%mpi explain comm.Bcast(a, root=7)")
    assert content["ename"] == "UsageError"
    assert "root 7" in content["evalue"]
    # the session is still usable
    assert kernel.value("ipympi.current().pull('b')[0].tolist()") == [6.0, 12.0]


@pytest.mark.timeout(120)
def test_a_bare_collective_name_is_explained_on_default_buffers(kernel: KernelSession) -> None:
    """Every collective ``%mpi explain`` knows, by its name alone; the user's variables
    stay as they were."""
    kernel.ok("%px sendbuf = 'mine'")
    for name in sorted(COLLECTIVES):
        reply, messages = kernel.execute(f"%mpi explain {name}")
        assert reply["content"]["status"] == "ok", (name, reply["content"].get("evalue"))
        said = "".join(m["content"]["text"] for m in messages if m["msg_type"] == "stream")
        assert said.startswith(f"comm.{name}("), said
        assert f"comm.{name}(" in explanation_data(messages)["text/plain"]
    assert kernel.value("%mpi pull sendbuf") == ["mine"] * RANKS
    content = error_of(kernel, "%mpi explain Allreducee")
    assert content["evalue"].startswith(
        "%mpi explain: Allreducee is not a collective that can be explained; choose one of "
    )


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("code", "line"),
    [
        (
            "%mpi explain comm.Allreduce(nowhere, b)",
            "%mpi explain: all 3 ranks raised NameError: name 'nowhere' is not defined",
        ),
        (
            "%mpi pull nowhere",
            "%mpi pull: all 3 ranks raised NameError (rank 0: name 'nowhere' is not defined "
            "on rank 0)",
        ),
        ("%mpi push lock", "%mpi push: TypeError: cannot pickle '_thread.lock' object"),
    ],
)
def test_errors_of_magics_are_one_readable_line(
    kernel: KernelSession, code: str, line: str
) -> None:
    kernel.ok("import threading; lock = threading.Lock()")  # in the kernel: no pickle
    reply, messages = kernel.execute(code)
    content = reply["content"]
    assert (content["status"], content["ename"]) == ("error", "UsageError")
    assert content["evalue"].startswith(line), content["evalue"]
    shown = "".join(m["content"]["text"] for m in messages if m["msg_type"] == "stream")
    assert shown.startswith(f"UsageError: {line}"), shown
    assert len(shown.splitlines()) == 1 and "Traceback" not in shown


@pytest.mark.timeout(60)
def test_show_puts_ranks_side_by_side(kernel: KernelSession) -> None:
    kernel.ok("%px v = np.arange(3) + (rank == 1)")
    data = result_data(kernel.ok("%mpi show v"))
    assert "text/html" in data
    text = data["text/plain"]
    assert all(f"rank {r}" in text for r in range(RANKS))
    content = error_of(kernel, "%mpi show no_such_name")
    assert "no_such_name" in content["evalue"]


@pytest.mark.timeout(60)
def test_tracing_stops_with_the_traced_cell(kernel: KernelSession) -> None:
    """Tracing costs nothing afterwards: each rank's tracer is off again after the cell."""
    kernel.ok("%%px --trace\ncomm.Barrier()")
    assert (
        kernel.value(
            "from ipympi.progress import tracing as _trace\nipympi.current().apply(_trace.active)"
        )
        == [False] * RANKS
    )
