"""``Comm.Spawn`` from the ranks of an ``ipympi`` kernel's session, over the messaging protocol.

A real kernel of two ranks, driven by ``jupyter_client``: a cell where rank 0 spawns two
workers (a script written to a temporary folder) that print and send a value back; the
cell shows the workers' output labelled with their process indexes (``[stdout:2]``), the
parents get the values, a worker that fails is reported in the cell, and no child
outlives its world (``%mpi stop``, ``%mpi restart``) or the kernel. The stuck-cell rule
looks at the workers too; ``Spawn_multiple``, workers that spawn and ``MPIPoolExecutor``
on a rank work the same way.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kernel_helpers import (
    KernelSession,
    alive,
    cmdline,
    descendants,
    error_text,
    kernel_env,
    kernel_specs_installed,
    stream_text,
    strip_ansi,
    wait_gone,
)

NP = 2
GONE_WITHIN = 10.0  # seconds for a session's processes to exit

WORKER = """\
import sys
import time
from ipympi import MPI

parent = MPI.Comm.Get_parent()
rank = MPI.COMM_WORLD.Get_rank()
print(f"worker {rank} of {MPI.COMM_WORLD.Get_size()} says hello", flush=True)
if sys.argv[1:] == ["fail"] and rank == 1:
    time.sleep(1)  # rank 0 waits for this worker's value by then
    raise RuntimeError("worker 1 gives up")
if sys.argv[1:] == ["deadlock"]:
    parent.recv(source=0)  # as the parent waits for this worker's value: neither can go on
if sys.argv[1:] == ["abort"] and rank == 1:
    MPI.COMM_WORLD.Abort(7)
if sys.argv[1:] == ["slow"]:
    time.sleep(3)  # longer than the stuck-cell rule's looks: the parents are not stuck
parent.send(100 + rank, dest=0)
parent.Disconnect()
"""


@pytest.fixture(scope="module")
def kernel_specs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with kernel_specs_installed(tmp_path_factory.mktemp("jupyter")) as data_dir:
        yield data_dir


@pytest.fixture
def kernel(kernel_specs: Path) -> Iterator[KernelSession]:
    """A kernel of two ranks of its own: the tests restart its world."""
    with KernelSession("ipympi", kernel_env(np=NP)) as k:
        k.ok("None", timeout=60)  # the first cell waits for the ranks to start
        yield k


@pytest.fixture
def worker(tmp_path: Path) -> Path:
    path = tmp_path / "worker.py"
    path.write_text(WORKER)
    return path


def spawn_cell(worker: Path, *args: str) -> str:
    """A cell where rank 0 spawns two workers over ``COMM_SELF`` and receives their values."""
    return (
        "import sys\n"
        "from ipympi import MPI\n"
        "if MPI.COMM_WORLD.rank == 0:\n"
        f"    inter = MPI.COMM_SELF.Spawn(sys.executable, [{str(worker)!r}, *{list(args)!r}],"
        " maxprocs=2)\n"
        "    got = [inter.recv(source=i) for i in range(inter.remote_size)]\n"
        "    inter.Disconnect()\n"
        "else:\n"
        "    got = None\n"
        "print('got', got)\n"
    )


def spawned(kernel_pid: int, worker: Path) -> list[int]:
    """The kernel's descendants running ``worker``."""
    return [p for p in descendants(kernel_pid) if str(worker) in cmdline(p)]


def shown(kernel: KernelSession, messages: list[dict], name: str) -> str:
    return strip_ansi(stream_text(messages, name))


@pytest.mark.timeout(120)
def test_rank_0_spawns_two_workers_whose_output_is_labelled(
    kernel: KernelSession, worker: Path
) -> None:
    reply, messages = kernel.execute(spawn_cell(worker), timeout=60)
    assert reply["content"]["status"] == "ok", "\n".join(error_text(reply))
    text = shown(kernel, messages, "stdout")
    # later output of a child may come with the next cell: look there too
    _, later = kernel.execute("None", timeout=30)
    text += shown(kernel, later, "stdout")
    assert "[stdout:0] got [100, 101]" in text, text
    assert "[stdout:1] got None" in text, text
    assert "[stdout:2] worker 0 of 2 says hello" in text, text
    assert "[stdout:3] worker 1 of 2 says hello" in text, text
    # the workers have exited, and a second Spawn takes the next process indexes
    deadline = time.monotonic() + GONE_WITHIN
    while spawned(kernel.pid, worker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not spawned(kernel.pid, worker)
    reply, messages = kernel.execute(spawn_cell(worker), timeout=60)
    assert reply["content"]["status"] == "ok", "\n".join(error_text(reply))
    text = shown(kernel, messages, "stdout") + shown(kernel, kernel.execute("None")[1], "stdout")
    assert "[stdout:4] worker 0 of 2 says hello" in text, text
    assert "[stdout:5] worker 1 of 2 says hello" in text, text


@pytest.mark.timeout(120)
def test_a_worker_that_fails_is_reported_in_the_cell(kernel: KernelSession, worker: Path) -> None:
    code = spawn_cell(worker, "fail")
    reply, messages = kernel.execute(code, timeout=60)
    # rank 0 waits for worker 1's value: the worker's death makes that receive fail
    assert reply["content"]["status"] == "error"
    _, later = kernel.execute("None", timeout=30)
    out = shown(kernel, messages + later, "stdout")
    err = shown(kernel, messages + later, "stderr")
    assert "[stdout:2] worker 0 of 2 says hello" in out, out
    assert "[stdout:3] worker 1 of 2 says hello" in out, out
    assert "[stderr:3] RuntimeError: worker 1 gives up" in err, err
    assert "[stderr:3] spawned process 3 exited with status 1" in err, err
    failure = "\n".join(error_text(reply))
    # rank 0's receive from worker 1 fails as the worker dies (on a machine so loaded that
    # it was posted later, the stuck-cell rule ends it, naming what it waited for)
    died = "rank 3 has died (exited with status 1)" in failure
    assert died or "waits in recv(source=1" in failure, failure


LOUD = """\
import time
from ipympi import MPI

MPI.Comm.Get_parent().Disconnect()
time.sleep(0.5)  # the cell that spawned it has ended by now
for i in range(2000):  # ~200 KB, three times what a pipe holds
    print(f"line {i:04d}", "z" * 90)
"""


@pytest.mark.timeout(120)
def test_a_worker_printing_much_between_cells_finishes_and_shows_it_all(
    kernel: KernelSession, tmp_path: Path
) -> None:
    loud = tmp_path / "loud.py"
    loud.write_text(LOUD)
    cell = (
        "import sys\n"
        "from ipympi import MPI\n"
        "if MPI.COMM_WORLD.rank == 0:\n"
        f"    MPI.COMM_SELF.Spawn(sys.executable, [{str(loud)!r}], maxprocs=1).Disconnect()\n"
    )
    reply, messages = kernel.execute(cell, timeout=60)
    assert reply["content"]["status"] == "ok", "\n".join(error_text(reply))
    # no cell runs: the worker's output must still be read, or it stalls on a full pipe
    deadline = time.monotonic() + 30
    while spawned(kernel.pid, loud) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not spawned(kernel.pid, loud), "the worker stalled writing its output"
    _, later = kernel.execute("None", timeout=30)
    text = shown(kernel, messages + later, "stdout")
    lines = [line for line in text.splitlines() if "z" * 90 in line]
    assert lines == [f"[stdout:2] line {i:04d} " + "z" * 90 for i in range(2000)], text[:2000]


@pytest.mark.timeout(120)
def test_ranks_waiting_for_a_busy_worker_are_not_stuck(kernel: KernelSession, worker: Path) -> None:
    reply, messages = kernel.execute(spawn_cell(worker, "slow"), timeout=60)
    assert reply["content"]["status"] == "ok", "\n".join(error_text(reply))
    assert "[stdout:0] got [100, 101]" in shown(kernel, messages, "stdout")


@pytest.mark.timeout(120)
@pytest.mark.parametrize("magic", ["%mpi restart", "%mpi stop"])
def test_mpi_stop_and_restart_end_the_workers(
    kernel: KernelSession, tmp_path: Path, magic: str
) -> None:
    sleeper = tmp_path / "sleeper.py"
    sleeper.write_text(
        "import time\nfrom ipympi import MPI\nprint('sleeping', flush=True)\ntime.sleep(300)\n"
    )
    code = (
        "import sys\nfrom ipympi import MPI\n"
        "inter = MPI.COMM_WORLD.Spawn(sys.executable, "
        f"[{str(sleeper)!r}], maxprocs=2, root=0)\n"
        "print(inter.remote_size)\n"
    )
    reply, messages = kernel.execute(code, timeout=60)
    assert reply["content"]["status"] == "ok", "\n".join(error_text(reply))
    assert "[stdout:0,1] 2" in shown(kernel, messages, "stdout")
    children = spawned(kernel.pid, sleeper)
    assert len(children) == 2, children
    # what they print between cells is shown by the next cell
    text = shown(kernel, messages, "stdout")
    deadline = time.monotonic() + GONE_WITHIN

    def both_said() -> bool:
        together = "[stdout:2,3] sleeping" in text  # the same line of both, collapsed
        return together or ("[stdout:2] sleeping" in text and "[stdout:3] sleeping" in text)

    while not both_said() and time.monotonic() < deadline:
        time.sleep(0.2)
        text += shown(kernel, kernel.execute("None", timeout=30)[1], "stdout")
    assert both_said(), text
    # %mpi status lists them after the ranks, by process index
    table = kernel.ok("%mpi status")[0]["content"]["data"]["text/plain"].splitlines()
    rows = {int(row.split()[0]): row.split() for row in table[2:]}
    assert sorted(rows) == [0, 1, 2, 3], table
    assert sorted(int(rows[i][1]) for i in (2, 3)) == sorted(children), table
    assert [rows[i][3:5] for i in (2, 3)] == [["running", "sleeper.py:4"]] * 2, table
    kernel.execute(magic, timeout=60)
    wait_gone(children, GONE_WITHIN)
    assert not [p for p in children if alive(p)]
    assert not spawned(kernel.pid, sleeper)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("end", ["shutdown", "kill"])
def test_the_kernels_end_ends_the_workers(kernel_specs: Path, tmp_path: Path, end: str) -> None:
    sleeper = tmp_path / "sleeper.py"
    sleeper.write_text("import time\nfrom ipympi import MPI\ntime.sleep(300)\n")
    with KernelSession("ipympi", kernel_env(np=NP)) as k:
        code = (
            "import sys\nfrom ipympi import MPI\n"
            f"inter = MPI.COMM_WORLD.Spawn({sys.executable!r}, [{str(sleeper)!r}], maxprocs=1)\n"
        )
        reply, _ = k.execute(code, timeout=60)
        assert reply["content"]["status"] == "ok", "\n".join(error_text(reply))
        children = spawned(k.pid, sleeper)
        assert len(children) == 1, children
        if end == "kill":
            os.kill(k.pid, signal.SIGKILL)
            wait_gone([k.pid], GONE_WITHIN)
    wait_gone(children, GONE_WITHIN)
    assert not [p for p in children if alive(p)]


@pytest.mark.timeout(120)
def test_a_command_that_cannot_start_raises_err_spawn(kernel: KernelSession) -> None:
    code = (
        "from ipympi import MPI\n"
        "codes = []\n"
        "try:\n"
        "    MPI.COMM_WORLD.Spawn('no-such-command-here', maxprocs=2, errcodes=codes)\n"
        "except MPI.Exception as exc:\n"
        "    print(exc.Get_error_class() == MPI.ERR_SPAWN, codes == [MPI.ERR_SPAWN] * 2)\n"
    )
    reply, messages = kernel.execute(code, timeout=60)
    assert reply["content"]["status"] == "ok", "\n".join(error_text(reply))
    assert "[stdout:0,1] True True" in shown(kernel, messages, "stdout")
    # nothing was started, and the next Spawn still works
    assert not [p for p in descendants(kernel.pid) if "no-such-command-here" in cmdline(p)]


@pytest.mark.timeout(120)
def test_parents_and_workers_waiting_for_each_other_are_stuck(
    kernel: KernelSession, worker: Path
) -> None:
    reply, _ = kernel.execute(spawn_cell(worker, "deadlock"), timeout=60)
    assert reply["content"]["status"] == "error"
    failure = "\n".join(error_text(reply))
    assert "no rank can progress" in failure, failure
    assert "rank 0 waits in recv(source=0" in failure, failure
    assert "rank 2 waits in recv(source=0" in failure, failure
    kernel.execute("%mpi restart", timeout=60)
    assert not spawned(kernel.pid, worker)


@pytest.mark.timeout(120)
def test_a_worker_that_aborts_ends_the_world(kernel: KernelSession, worker: Path) -> None:
    reply, _ = kernel.execute(spawn_cell(worker, "abort"), timeout=60)
    assert reply["content"]["status"] == "error"
    failure = "\n".join(error_text(reply))
    assert "rank 3 called Abort with error code 7" in failure, failure
    deadline = time.monotonic() + GONE_WITHIN
    while spawned(kernel.pid, worker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not spawned(kernel.pid, worker)
    reply, messages = kernel.execute(spawn_cell(worker), timeout=60)  # a fresh world
    assert reply["content"]["status"] == "ok", "\n".join(error_text(reply))
    assert "[stdout:0] got [100, 101]" in shown(kernel, messages, "stdout")


@pytest.mark.timeout(120)
def test_a_one_rank_session_labels_its_workers(kernel_specs: Path, worker: Path) -> None:
    with KernelSession("ipympi", kernel_env(np=1)) as k:
        reply, messages = k.execute(spawn_cell(worker), timeout=60)
        assert reply["content"]["status"] == "ok", "\n".join(error_text(reply))
        text = shown(k, messages, "stdout") + shown(k, k.execute("None")[1], "stdout")
    assert "got [100, 101]\n" in text.splitlines(keepends=True), text  # the rank's own
    assert "[stdout:1] worker 0 of 2 says hello" in text, text
    assert "[stdout:2] worker 1 of 2 says hello" in text, text


@pytest.mark.timeout(120)
def test_an_mpipoolexecutor_on_a_rank_spawns_its_workers(kernel: KernelSession) -> None:
    code = (
        "from mpi4py.futures import MPIPoolExecutor\n"
        "from ipympi import MPI\n"
        "if MPI.COMM_WORLD.rank == 0:\n"
        "    with MPIPoolExecutor(2) as pool:\n"
        "        print(list(pool.map(abs, [-1, -2, -3])))\n"
    )
    reply, messages = kernel.execute(code, timeout=60)
    assert reply["content"]["status"] == "ok", "\n".join(error_text(reply))
    assert "[stdout:0] [1, 2, 3]" in shown(kernel, messages, "stdout")


NESTED = """\
import sys
from ipympi import MPI

parent = MPI.Comm.Get_parent()
if sys.argv[1:] == ["grandchild"]:
    parent.send(f"grandchild appnum {MPI.COMM_WORLD.Get_attr(MPI.APPNUM)}", dest=0)
else:
    inner = MPI.COMM_SELF.Spawn(sys.executable, [__file__, "grandchild"], maxprocs=1)
    said = inner.recv(source=0)
    appnum = MPI.COMM_WORLD.Get_attr(MPI.APPNUM)
    print(f"child {MPI.COMM_WORLD.rank} (appnum {appnum}) heard: {said}")
    parent.send(said, dest=0)
"""


@pytest.mark.timeout(120)
def test_spawn_multiple_and_a_child_that_spawns(kernel: KernelSession, tmp_path: Path) -> None:
    script = tmp_path / "nested.py"
    script.write_text(NESTED)
    code = (
        "import sys\nfrom ipympi import MPI\n"
        "if MPI.COMM_WORLD.rank == 0:\n"
        f"    argv = [[{str(script)!r}], [{str(script)!r}]]\n"
        "    inter = MPI.COMM_SELF.Spawn_multiple([sys.executable] * 2, argv, [1, 1])\n"
        "    print([inter.recv(source=i) for i in range(2)])\n"
    )
    reply, messages = kernel.execute(code, timeout=60)
    assert reply["content"]["status"] == "ok", "\n".join(error_text(reply))
    text = shown(kernel, messages, "stdout") + shown(kernel, kernel.execute("None")[1], "stdout")
    assert "[stdout:0] ['grandchild appnum 0', 'grandchild appnum 0']" in text, text
    assert "[stdout:2] child 0 (appnum 0) heard: grandchild appnum 0" in text, text
    assert "[stdout:3] child 1 (appnum 1) heard: grandchild appnum 0" in text, text


@pytest.mark.timeout(120)
def test_cell_functions_as_mpicommexecutor_tasks_leave_the_ranks_main_alone(
    kernel: KernelSession,
) -> None:
    # In a session, MPICommExecutor's workers are the other ranks: a cell's function
    # reaches them by value, and their __main__ (the cell namespace) stays theirs.
    kernel.ok("SCALE = 3\ndef triple(x):\n    return x * SCALE")
    code = (
        "import sys\n"
        "from mpi4py.futures import MPICommExecutor\n"
        "with MPICommExecutor(comm, root=0) as pool:\n"
        "    if pool is not None:\n"
        "        print(list(pool.map(triple, [1, 2, 3])))\n"
        "print(sys.modules['__main__'].__dict__ is get_ipython().user_ns)"
    )
    reply, messages = kernel.execute(code, timeout=60)
    assert reply["content"]["status"] == "ok", "\n".join(error_text(reply))
    said = shown(kernel, messages, "stdout")
    assert "[stdout:0] [3, 6, 9]" in said, said
    assert "True" in said and "False" not in said, said
