"""The mpi4py backend through a real ``ipympi`` kernel: ranks on a real MPI, started by mpiexec.

A kernel is started from its installed spec with ``IPYMPI_BACKEND=mpi4py``
and three ranks, and driven by a ``jupyter_client`` client, as a notebook
would. The same labelled output and errors as with the built-in MPI; the
interrupt of a rank in Python code; a rank blocked in a real MPI call, which
no interrupt reaches, ending its world with an explanation; ranks that die
or abort; ``%mpi status``; ``srun`` (a stand-in script that checks what it
is given and runs the ranks under mpiexec); and no process left behind by a
stop, a restart, a shutdown or a killed kernel.

Skipped where mpi4py or mpiexec is missing (``pip install mpi4py mpich``).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kernel_helpers import (
    KernelSession,
    cmdline,
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

MPIEXEC = shutil.which("mpiexec") or os.path.join(os.path.dirname(sys.executable), "mpiexec")
pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("mpi4py") is None or not os.access(MPIEXEC, os.X_OK),
    reason="the mpi4py backend needs mpi4py and mpiexec (pip install mpi4py mpich)",
)

NP = 3
REPORT_WITHIN = 5.0  # seconds for a failure to be reported (about one on an idle machine)
GRACE = 5.0  # seconds interrupted ranks get to answer (the cluster's INTERRUPT_GRACE)
GONE_WITHIN = 10.0  # seconds for a world's processes to exit

# A stand-in for Slurm's srun: it checks what ipympi gives it, writes it down
# and runs the ranks under mpiexec on this host.
FAKE_SRUN = """#!/bin/sh
fail() {{ echo "fake srun: $*" >&2; exit 2; }}
case "$1" in --ntasks=*) n="${{1#--ntasks=}}" ;; *) fail "expected --ntasks=N, not $1" ;; esac
[ "$2" = "--kill-on-bad-exit=1" ] || fail "expected --kill-on-bad-exit=1, not $2"
shift 2
[ -n "$IPYMPI_ENGINE_KEY" ] && [ -n "$IPYMPI_KEY" ] || fail "no keys in the environment"
case "$*" in *"$IPYMPI_ENGINE_KEY"*|*"$IPYMPI_KEY"*) fail "a key on the command line" ;; esac
printf '%s\\n' "$n" "$IPYMPI_ENGINES" "$IPYMPI_CTL" "$*" > "{log}"
exec "{mpiexec}" -n "$n" "$@"
"""


@pytest.fixture(scope="module")
def kernel_specs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with kernel_specs_installed(tmp_path_factory.mktemp("jupyter")) as data_dir:
        yield data_dir


@pytest.fixture(scope="module")
def fake_srun(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory holding the stand-in ``srun``; what it was given goes to ``srun.log`` there."""
    directory = tmp_path_factory.mktemp("slurm")
    srun = directory / "srun"
    srun.write_text(FAKE_SRUN.format(log=directory / "srun.log", mpiexec=MPIEXEC))
    srun.chmod(0o755)
    return directory


def mpi4py_env(path: Path | None = None) -> dict[str, str]:
    env = kernel_env(np=NP, IPYMPI_BACKEND="mpi4py")
    if path is not None:
        env["PATH"] = os.pathsep.join([str(path), env.get("PATH", "")])
    return env


@pytest.fixture(scope="module")
def kernel(kernel_specs: Path, fake_srun: Path) -> Iterator[KernelSession]:
    """One kernel on the mpi4py backend, shared by the module; no process of it may be left."""
    seen: set[int] = set()
    with KernelSession("ipympi", mpi4py_env(fake_srun)) as k:
        k.ok("None", timeout=60)  # the first cell waits for the ranks to start
        k.seen = seen  # type: ignore[attr-defined]
        yield k
        seen.update([k.pid, *descendants(k.pid)])
    assert wait_gone(seen, GONE_WITHIN) == []


@pytest.fixture
def fresh_kernel(kernel_specs: Path) -> Iterator[KernelSession]:
    """A kernel of its own, for the tests that end it."""
    with KernelSession("ipympi", mpi4py_env()) as k:
        k.ok("None", timeout=60)
        yield k


# -- helpers ------------------------------------------------------------------------------
def results(messages: list[dict]) -> list[str]:
    return [
        m["content"]["data"]["text/plain"] for m in messages if m["msg_type"] == "execute_result"
    ]


def count_of(reply: dict) -> int:
    return reply["content"]["execution_count"]


def world(kernel: KernelSession) -> set[int]:
    """The processes of the kernel's current world (mpiexec, its agent, keepers, engines...)."""
    processes = set(descendants(kernel.pid))
    getattr(kernel, "seen", set()).update(processes)
    return processes


def assert_fresh_world(kernel: KernelSession, old: set[int]) -> str:
    """The next cell says the world ended (and that ``kept`` is lost) and starts a new one;
    the old processes are gone. Returns the notice."""
    reply, messages = kernel.execute("comm.allreduce(1), 'kept' in dir()", timeout=60)
    assert reply["content"]["status"] == "ok", error_text(reply)
    notice = stream_text(outputs(messages), "stderr")
    assert notice.startswith("ipympi: the previous MPI world has ended ("), notice
    tail = f"); starting a fresh world of {NP} ranks (variables lost: kept)\n"
    assert notice.endswith(tail), notice
    assert results(outputs(messages)) == [f"({NP}, False)"]
    assert wait_gone(old, GONE_WITHIN) == []
    return notice


# -- the same notebook as with the built-in MPI ---------------------------------------------
@pytest.mark.timeout(60)
def test_each_rank_prints_one_labelled_line_from_mpi4py(kernel: KernelSession) -> None:
    code = "print('hello from', rank, 'of', size, MPI.__name__, comm is MPI.COMM_WORLD)"
    texts = sorted(m["content"]["text"] for m in kernel.ok(code))
    assert texts == [f"[stdout:{r}] hello from {r} of {NP} mpi4py.MPI True\n" for r in range(NP)]


SPAWNED = """\
import sys
from mpi4py import MPI
parent = MPI.Comm.Get_parent()
rank = MPI.COMM_WORLD.Get_rank()
print(f"worker {rank} of {MPI.COMM_WORLD.Get_size()} says hello", flush=True)
print(f"worker {rank} warns", file=sys.stderr, flush=True)
parent.send(100 + rank, dest=0)
parent.Disconnect()
"""


@pytest.mark.timeout(120)
def test_workers_spawned_from_rank_0_are_labelled_as_with_the_builtin_mpi(
    kernel: KernelSession, tmp_path: Path
) -> None:
    worker = tmp_path / "worker.py"
    worker.write_text(SPAWNED)
    cell = (
        "import sys\n"
        "if rank == 0:\n"
        f"    inter = MPI.COMM_SELF.Spawn(sys.executable, [{str(worker)!r}], maxprocs=2)\n"
        "    got = [inter.recv(source=i) for i in range(inter.remote_size)]\n"
        "    inter.Disconnect()\n"
        "    print('got', got)\n"
    )
    for first in (NP, NP + 2):  # a second Spawn takes the next indexes
        reply, messages = kernel.execute(cell, timeout=60)
        assert reply["content"]["status"] == "ok", error_text(reply)
        says = [f"[stdout:{first + i}] worker {i} of 2 says hello\n" for i in range(2)]
        warns = [f"[stderr:{first + i}] worker {i} warns\n" for i in range(2)]
        # late output (mpiexec relays the workers' pipes) comes with a next cell
        for _ in range(10):
            _, later = kernel.execute("None", timeout=30)
            messages += later
            out = stream_text(outputs(messages), "stdout")
            err = stream_text(outputs(messages), "stderr")
            if all(t in out for t in says) and all(t in err for t in warns):
                break
            time.sleep(0.2)
        assert "[stdout:0] got [100, 101]\n" in out, out
        for text in says:
            assert text in out, out
        for text in warns:
            assert text in err, err


LOUD = """\
import sys, time
from mpi4py import MPI
MPI.Comm.Get_parent().Disconnect()
time.sleep(0.5)  # the cell that spawned it has ended by now
for i in range(10000):  # ~1 MB, far more than the pipes between it and the kernel hold
    print(f"line {i:05d}", "z" * 90)
sys.stdout.flush()
open(sys.argv[1], "w").close()
"""


@pytest.mark.timeout(120)
def test_a_worker_printing_much_between_cells_finishes_and_shows_it_all(
    kernel: KernelSession, tmp_path: Path
) -> None:
    loud, done = tmp_path / "loud.py", tmp_path / "done"
    loud.write_text(LOUD)
    cell = (
        "import sys\n"
        "if rank == 0:\n"
        f"    MPI.COMM_SELF.Spawn(sys.executable, [{str(loud)!r}, {str(done)!r}], maxprocs=1)"
        ".Disconnect()\n"
    )
    reply, _ = kernel.execute(cell, timeout=60)
    assert reply["content"]["status"] == "ok", error_text(reply)
    deadline = time.monotonic() + 30
    while not done.exists() and time.monotonic() < deadline:  # no cell runs meanwhile
        time.sleep(0.1)
    assert done.exists(), "the worker stalled writing its output"
    shown: list[str] = []
    while len(shown) < 10000 and time.monotonic() < deadline + 30:
        _, later = kernel.execute("None", timeout=30)
        text = stream_text(outputs(later), "stdout")
        shown += [line for line in text.splitlines() if "z" * 90 in line]
    assert [line.split("] ", 1)[1] for line in shown] == [
        f"line {i:05d} " + "z" * 90 for i in range(10000)
    ]
    assert len({line.split("] ", 1)[0] for line in shown}) == 1  # one label


@pytest.mark.timeout(60)
def test_allreduce_result_is_collapsed(kernel: KernelSession) -> None:
    reply, messages = kernel.execute("comm.allreduce(rank)")
    inner = outputs(messages)
    label = inner[0]["content"]["text"]
    assert re.sub(r"\x1b\[[0-9;]*m", "", label) == f"Out[0-2:{count_of(reply)}]:\n"
    assert results(inner) == [str(sum(range(NP)))]


@pytest.mark.timeout(60)
def test_exception_on_one_rank_is_reported_as_with_the_builtin_mpi(kernel: KernelSession) -> None:
    reply, lines, took = failing_cell(kernel, "if rank == 1:\n    1 / 0")
    assert took < REPORT_WITHIN
    assert reply["content"]["ename"] == "ZeroDivisionError"
    assert lines[0] == "rank 1 of 3 raised ZeroDivisionError: division by zero"
    assert execute_headers(lines) == ["[1:execute]"]
    assert "----> 2     1 / 0" in lines
    assert results(kernel.ok("comm.allreduce(1)")) == [str(NP)]


@pytest.mark.timeout(60)
def test_mpi_status_names_the_backend_and_each_rank(kernel: KernelSession) -> None:
    kernel.ok("import os as _os\n_pid = _os.getpid()")
    pids = kernel.value("%mpi pull _pid")
    status = kernel.ok("%mpi status")[0]["content"]["data"]["text/plain"]
    caption, head, *rows = status.splitlines()
    assert re.fullmatch(
        rf"{NP} ranks: mpi4py backend \(MPICH [0-9.]+\), started by mpiexec", caption
    )
    assert head.split()[:4] == ["rank", "pid", "host", "state"]
    assert [row.split()[:2] for row in rows] == [[str(r), str(p)] for r, p in enumerate(pids)]
    assert all(row.split()[3] == "idle" for row in rows)


@pytest.mark.timeout(60)
def test_bad_options_get_readable_errors(kernel: KernelSession) -> None:
    for code, expected in [
        ("%mpi restart --backend foo", "argument --backend: invalid choice: 'foo'"),
        ("%mpi restart --backend builtin --launcher mpiexec", "starts ranks on mpi4py"),
        ("%mpi restart --backend builtin --launcher srun", "needs a Slurm allocation"),
        ("%mpi restart --launcher ssh", "--launcher ssh starts the built-in MPI's engines"),
        ("%%px --trace\n1", "--trace records the messages of ipympi's built-in MPI"),
        ("%mpi explain comm.bcast(rank)", "shows what ipympi's built-in MPI does"),
        ("%mpi explain Allreduce", "shows what ipympi's built-in MPI does"),
        ("%mpi pull no_such_name", "%mpi pull: all 3 ranks raised NameError"),
    ]:
        reply, _ = kernel.execute(code)
        assert reply["content"]["ename"] == "UsageError", code
        assert expected in reply["content"]["evalue"], reply["content"]["evalue"]
    assert results(kernel.ok("comm.allreduce(1)")) == [str(NP)]  # the world still runs


# -- interrupts -----------------------------------------------------------------------------
@pytest.mark.timeout(60)
def test_interrupt_of_ranks_in_python_keeps_the_world(kernel: KernelSession) -> None:
    """Ranks in ``time.sleep`` get KeyboardInterrupt; the progress line said where they were."""
    kernel.ok("kept = rank * 10")
    code = "import time\ntime.sleep(30)"
    msg_id = kernel.send(code)
    time.sleep(2.6)  # the progress line appears after 2 s
    kernel.km.interrupt_kernel()
    interrupted = time.monotonic()
    reply, messages = kernel.collect(msg_id, timeout=REPORT_WITHIN + 10)
    assert time.monotonic() - interrupted < REPORT_WITHIN
    assert reply["content"]["ename"] == "KeyboardInterrupt"
    n = count_of(reply)
    progress = [m for m in messages if m["msg_type"] == "display_data"]
    line = progress[0]["content"]["data"]["text/plain"]
    for rank in range(NP):
        assert f"rank {rank}: running at line 2 of cell [{n}]" in line, line
    [error] = [m for m in messages if m["msg_type"] == "error"]
    assert error_text(error)[0] == f"interrupted: ranks 0-2 at line 2 of cell [{n}]"
    assert kernel.value("%mpi pull kept") == [0, 10, 20]
    assert results(kernel.ok("comm.allreduce(1)")) == [str(NP)]


@pytest.mark.timeout(90)
def test_interrupt_of_a_rank_blocked_in_recv_ends_the_world(kernel: KernelSession) -> None:
    """No interrupt reaches a rank inside MPI_Recv: after the grace period its world is ended."""
    kernel.ok("kept = 1")
    old = world(kernel)
    code = "if rank == 0:\n    comm.recv(source=1, tag=7)"
    reply, lines, took = failing_cell(kernel, code, interrupt_after=1.0)
    assert GRACE - 0.5 < took < GRACE + REPORT_WITHIN
    assert reply["content"]["ename"] == "KeyboardInterrupt"
    n = count_of(reply)
    assert lines[0] == (
        f"interrupted: rank 0 at line 2 of cell [{n}] (comm.recv(source=1, tag=7)), which could "
        "not be interrupted; a rank inside a call of a real MPI cannot be interrupted, so the "
        "MPI world was ended (the next cell starts a fresh one)"
    )
    assert execute_headers(lines) == ["[0:execute]"]
    assert_fresh_world(kernel, old)


@pytest.mark.timeout(60)
def test_timeout_ends_a_cell(kernel: KernelSession) -> None:
    """``--timeout`` interrupts the ranks still running (one blocked in MPI would end the world,
    as an interrupt does: see the test above)."""
    kernel.ok("kept = rank * 10")
    code = "%%px --timeout 0.5\nimport time\nif rank == 1:\n    time.sleep(30)"
    reply, lines, took = failing_cell(kernel, code)
    assert took < 0.5 + REPORT_WITHIN
    assert reply["content"]["ename"] == "TimeoutError"
    n = count_of(reply)
    assert lines[0] == (
        f"the cell ran longer than --timeout 0.5 s; rank 1 was stopped at line 3 of cell [{n}]"
    )
    assert kernel.value("%mpi pull kept") == [0, 10, 20]


# -- ranks that die or abort ----------------------------------------------------------------
@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("code", "how"),
    [
        ("import os\nif rank == 1:\n    os._exit(3)\ncomm.Barrier()", "exited with status 3"),
        (
            "import os, signal\nif rank == 1:\n    os.kill(os.getpid(), signal.SIGKILL)\n"
            "comm.Barrier()",
            "was killed by signal SIGKILL",
        ),
    ],
    ids=["os._exit", "SIGKILL"],
)
def test_a_dying_rank_is_named_and_the_next_cell_starts_a_fresh_world(
    kernel: KernelSession, code: str, how: str
) -> None:
    kernel.ok("kept = 1")
    old = world(kernel)
    reply, lines, took = failing_cell(kernel, code)
    assert took < REPORT_WITHIN
    assert reply["content"]["ename"] == "EngineDied"
    assert reply["content"]["evalue"] == f"rank 1 has died ({how})"
    assert lines[0] == (
        f"rank 1 has died ({how}); the MPI world has ended: mpiexec then ended the other ranks"
    )
    assert execute_headers(lines) == ["[0,2:execute]", "[1:execute]"]
    assert_fresh_world(kernel, old)


@pytest.mark.timeout(60)
def test_abort_names_the_rank_and_the_next_cell_starts_a_fresh_world(kernel: KernelSession) -> None:
    kernel.ok("kept = 1")
    old = world(kernel)
    reply, lines, took = failing_cell(kernel, "if rank == 1:\n    comm.Abort(2)\ncomm.Barrier()")
    assert took < REPORT_WITHIN
    assert reply["content"]["ename"] == "MPIAbort"
    assert lines[0] == (
        "the MPI world was aborted: rank 1 called Abort with error code 2: "
        "MPI_Abort(MPI_COMM_WORLD, 2); every rank of the world was ended"
    )
    assert_fresh_world(kernel, old)


# -- srun ------------------------------------------------------------------------------------
@pytest.mark.timeout(90)
def test_srun_starts_the_ranks_connected_over_tcp(kernel: KernelSession, fake_srun: Path) -> None:
    old = world(kernel)
    restarted = kernel.ok("%mpi restart --launcher srun", timeout=60)
    assert re.fullmatch(
        rf"MPI session restarted: {NP} ranks on mpi4py ready in [0-9.]+ s\n",
        stream_text(restarted),
    )
    assert wait_gone(old, GONE_WITHIN) == []
    n, engines, control, command = (fake_srun / "srun.log").read_text().splitlines()
    assert n == str(NP)
    assert command == f"{sys.executable} -m ipympi.notebook.engine.mpi4py_engine"
    for address in (engines, control):
        host = re.fullmatch(r"tcp://([0-9.]+):[0-9]+", address)
        assert host and host[1] != "0.0.0.0", address
    assert sorted(results(kernel.ok("rank, size"))) == [f"({r}, {NP})" for r in range(NP)]
    status = kernel.ok("%mpi status")[0]["content"]["data"]["text/plain"]
    assert status.splitlines()[0].endswith("started by srun")
    world(kernel)
    kernel.ok("%mpi restart --launcher mpiexec", timeout=60)


# -- no process left behind ------------------------------------------------------------------
@pytest.mark.timeout(90)
def test_stop_restart_and_a_killed_kernel_leave_no_process(fresh_kernel: KernelSession) -> None:
    """(A kernel shut down politely leaves none either: see the module kernel's teardown.)"""
    kernel = fresh_kernel
    first = world(kernel)
    assert any("mpiexec" in cmdline(pid) for pid in first)
    assert sum("mpi4py_engine" in cmdline(pid) for pid in first) >= 2 * NP  # keepers, engines
    kernel.ok("%mpi stop")
    assert wait_gone(first, GONE_WITHIN) == []
    assert descendants(kernel.pid) == []
    kernel.ok("%mpi start -n 2", timeout=60)
    assert results(kernel.ok("size")) == ["2"]
    second = world(kernel)
    kernel.ok("%mpi restart --backend builtin", timeout=60)
    assert wait_gone(second, GONE_WITHIN) == []
    kernel.ok("%mpi restart --backend mpi4py", timeout=60)
    third = world(kernel)
    os.kill(kernel.pid, signal.SIGKILL)
    assert wait_gone([kernel.pid, *third], GONE_WITHIN) == []
