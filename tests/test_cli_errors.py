"""A rank's uncaught exception on the command line: one readable traceback.

Under ``python -m ipympi.run`` a traceback leaves out ipympi's own frames (all
of them with ``IPYMPI_TRACEBACK=full``), and the same error raised by several
ranks is printed once, headed by the ranks that raised it; different errors are
each printed. Other output and the exit status are as before. The notebook's
engines leave the same frames out, through a real kernel. The grouping and
trimming (:mod:`ipympi.core.tracebacks`) are unit-tested on their own too.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import _env
from kernel_helpers import KernelSession, kernel_env, kernel_specs_installed, strip_ansi

from ipympi.core import tracebacks

SAME_ERROR = """
from mpi4py import MPI
import sys
comm = MPI.COMM_WORLD
print("out", comm.rank, flush=True)
print("err", comm.rank, file=sys.stderr, flush=True)
comm.Barrier()

def send_far():
    comm.send(1, dest=comm.size + 3)

send_far()
"""

TWO_ERRORS = """
from mpi4py import MPI
comm = MPI.COMM_WORLD
comm.Barrier()
if comm.rank == 1:
    raise ValueError("rank one is special")
comm.send(1, dest=comm.size + 3)
"""

LAUNCHER = [sys.executable, "-m", "ipympi.run", "-n", "2", "--timeout", "30"]
HEAD = re.compile(r"^\[(ranks? [0-9,\-]+)\] Traceback \(most recent call last\):$", re.M)


def _internal_frames(text: str) -> list[str]:
    return [
        line
        for line in text.splitlines()
        if line.strip().startswith("File ") and tracebacks.is_internal(line.split('"')[1])
    ]


def test_one_traceback_for_one_mistake_without_ipympi_frames(run_mpi) -> None:
    proc = run_mpi(4, SAME_ERROR)
    assert proc.returncode == 1
    err = proc.stderr
    assert err.count("Traceback") == 1, err
    heads = HEAD.findall(err)
    assert len(heads) == 1 and heads[0].startswith("rank"), err
    assert "in send_far" in err and "comm.send(1, dest=comm.size + 3)" in err
    assert "Invalid rank: send: dest 7" in err
    assert _internal_frames(err) == [], err
    for file in ("errhandling.py", "p2p.py", "engine.py", "transport.py"):
        assert file not in err
    # The ranks' own output is as it was.
    assert sorted(proc.stdout.split("\n")[:-1]) == [f"out {r}" for r in range(4)]
    for r in range(4):
        assert f"err {r}\n" in err
    assert re.search(r"ipympi\.run: rank \d exited with status 1", err)


def test_the_whole_traceback_on_request(run_mpi) -> None:
    by_env = run_mpi(2, SAME_ERROR, env={tracebacks.ENV_TRACEBACK: "full"})
    by_flag = run_mpi(2, SAME_ERROR, launcher_args=("--full-traceback",))
    for proc in (by_env, by_flag):
        assert proc.returncode == 1
        assert _internal_frames(proc.stderr), proc.stderr
        assert "p2p.py" in proc.stderr
        assert len(HEAD.findall(proc.stderr)) == 1


def test_different_errors_are_each_shown(run_mpi) -> None:
    proc = run_mpi(3, TWO_ERRORS)
    assert proc.returncode == 1
    err = proc.stderr
    heads = HEAD.findall(err)
    assert "rank 1" in heads, err
    assert "ValueError: rank one is special" in err
    assert err.count("Traceback") == len(heads)
    assert _internal_frames(err) == []


def test_a_rank_waiting_on_the_failed_one_is_still_reported(run_mpi) -> None:
    source = """
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    if comm.rank == 1:
        raise KeyError("missing")
    comm.recv(source=1)
    """
    proc = run_mpi(2, source)
    assert proc.returncode == 1
    assert "rank 1" in HEAD.findall(proc.stderr), proc.stderr
    assert proc.stderr.count("KeyError: 'missing'") == 1
    assert "ipympi.run: rank 1 exited with status 1" in proc.stderr


def test_an_error_under_python_m_mpi4py(tmp_path) -> None:
    prog = tmp_path / "boom.py"
    prog.write_text("from mpi4py import MPI\nif MPI.COMM_WORLD.rank == 1:\n    1 / 0\n")
    done = subprocess.run(
        [*LAUNCHER, sys.executable, "-m", "mpi4py", str(prog)],
        env=_env(),
        capture_output=True,
        text=True,
        timeout=45,
    )
    assert done.returncode == 1, done.stderr
    assert HEAD.findall(done.stderr) == ["rank 1"], done.stderr
    assert "runpy" not in done.stderr and _internal_frames(done.stderr) == []
    assert "ZeroDivisionError: division by zero" in done.stderr


# -- the notebook ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def kernel_specs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with kernel_specs_installed(tmp_path_factory.mktemp("jupyter")) as data_dir:
        yield data_dir


@pytest.mark.parametrize("full", [False, True])
def test_the_notebook_leaves_out_the_same_frames(kernel_specs: Path, full: bool) -> None:
    extra = {tracebacks.ENV_TRACEBACK: "full"} if full else {}
    with KernelSession("ipympi", kernel_env(np=2, **extra)) as k:
        k.ok("None", timeout=60)
        reply, _ = k.execute("def f():\n    comm.Send('not a buffer', dest=0)\nf()")
        lines = [strip_ansi(line) for line in reply["content"]["traceback"]]
    text = "\n".join(lines)
    assert reply["content"]["ename"] == "TypeError"
    assert "comm.Send('not a buffer', dest=0)" in text
    assert text.count("[0,1:execute]") == 1
    assert ("buffers.py" in text) is full, text


# -- pure -----------------------------------------------------------------------------------
def test_group_identical_ignores_colours_and_keeps_rank_order() -> None:
    groups = tracebacks.group_identical(
        {3: ["\x1b[31mA\x1b[0m", "x"], 0: ["A", "x"], 1: ["B"], 2: ["A", "x"]}
    )
    assert groups == [(["A", "x"], [0, 2, 3]), (["B"], [1])]
    assert tracebacks.headed(["Traceback", "y"], "[ranks 0-3]") == ["[ranks 0-3] Traceback", "y"]


def test_hide_internal_keeps_user_frames_only() -> None:
    from ipympi import MPI

    def user() -> None:
        MPI.COMM_SELF.send(1, dest=5)

    try:
        user()
    except MPI.Exception as exc:
        tb = exc.__traceback__
    names = []
    kept = tracebacks.hide_internal(tb)
    while kept is not None:
        names.append(kept.tb_frame.f_code.co_name)
        assert not tracebacks.is_internal(kept.tb_frame.f_code.co_filename)
        kept = kept.tb_next
    assert names == ["test_hide_internal_keeps_user_frames_only", "user"]
    assert tracebacks.wants_full({"IPYMPI_TRACEBACK": "full"})
    assert not tracebacks.wants_full({})
