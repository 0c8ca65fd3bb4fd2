"""``mpi4py.futures`` and ``mpi4py.util.pool``: executors over threads and MPI ranks."""

from __future__ import annotations

import concurrent.futures as cf
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import RunMPI, _env

from ipympi.mpi4py.futures import MPIPoolExecutor, ThreadPoolExecutor, collect, compose
from ipympi.mpi4py.util.pool import ThreadPool


def _square(x: int) -> int:
    return x * x


def test_thread_executor_map_chunks_orders_and_times_out() -> None:
    with ThreadPoolExecutor(2) as executor:
        assert executor.num_workers == 2
        squares = [x * x for x in range(10)]
        assert list(executor.map(_square, range(10), chunksize=3)) == squares
        assert sorted(executor.map(_square, range(10), unordered=True)) == squares
        assert list(executor.starmap(pow, [(2, 3), (3, 2)], buffersize=1)) == [8, 9]
        with pytest.raises(cf.TimeoutError):
            list(executor.map(time.sleep, [0.5], timeout=0.05))
    with pytest.raises(RuntimeError):
        executor.submit(_square, 1)


def test_a_failing_initializer_breaks_the_executor() -> None:
    executor = ThreadPoolExecutor(1, initializer=int, initargs=("x",))
    with pytest.raises(cf.BrokenExecutor):
        executor.submit(_square, 2).result(timeout=5)
    with pytest.raises(cf.BrokenExecutor):
        executor.submit(_square, 2)
    executor.shutdown()


POOL_PROGRAM = """
import os
import sys
from ipympi.mpi4py.futures import MPIPoolExecutor, get_comm_workers


def square(x):
    return x * x


def setup(base):
    global BASE
    BASE = base


def add(a, b):
    return a + b + BASE


def where():
    import helper  # a module on the executor's ``path``

    return helper.NAME, os.environ.get("POOL_VAR"), os.getcwd(), get_comm_workers().Get_size()


if __name__ == "__main__":
    with MPIPoolExecutor(max_workers=4) as ex:
        assert ex.num_workers == 4
        assert list(ex.map(square, range(100), chunksize=7)) == [x * x for x in range(100)]
        assert ex.submit(square, 12).result() == 144
    options = dict(initializer=setup, initargs=(100,), env={"POOL_VAR": "set"}, path=[HERE])
    with MPIPoolExecutor(2, wdir=HERE, **options) as ex:
        assert list(ex.starmap(add, [(1, 2), (3, 4)])) == [103, 107]
        assert ex.submit(where).result() == ("helper", "set", HERE, 2)
    with MPIPoolExecutor(1, main=False) as ex:  # the workers do not import this program
        assert ex.submit(pow, 2, 10).result() == 1024
        try:
            ex.submit(square, 3).result()
        except AttributeError as exc:
            print("main=False:", exc)
    idle = MPIPoolExecutor(1).bootup()  # workers that never run a task
    idle.shutdown()
    idle.shutdown()
    print("pool ok")
"""


def test_an_mpi_pool_executor_needs_a_worker() -> None:
    with pytest.raises(ValueError):
        MPIPoolExecutor(0)


def _pool_program(tmp_path: Path) -> Path:
    lib = tmp_path / "lib"
    lib.mkdir()
    (lib / "helper.py").write_text('NAME = "helper"\n')
    prog = tmp_path / "pool.py"
    prog.write_text(f"HERE = {str(lib)!r}\n" + POOL_PROGRAM)
    return prog


def test_an_mpi_pool_executor_spawns_its_workers_from_a_plain_program(tmp_path: Path) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = _env()
    env["TMPDIR"] = str(tmp)
    proc = subprocess.run(
        [sys.executable, str(_pool_program(tmp_path))],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr
    assert "pool ok" in proc.stdout
    assert "main=False:" in proc.stdout  # ``square`` is not found without the main program
    assert list(tmp.iterdir()) == []


def test_an_mpi_pool_executor_spawns_its_workers_from_a_rank(
    run_mpi: RunMPI, tmp_path: Path
) -> None:
    source = _pool_program(tmp_path).read_text()
    source = source.replace("from ipympi.mpi4py.futures", "from mpi4py.futures")  # the name
    proc = run_mpi(2, source, timeout=40)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("pool ok") == 2


def test_collect_and_compose() -> None:
    futures = [cf.Future() for _ in range(3)]
    gathered = collect(futures)
    doubled = compose(gathered, lambda values: [2 * v for v in values])
    for value, future in enumerate(futures):
        future.set_result(value)
    assert doubled.result(timeout=1) == [0, 2, 4]
    failing: cf.Future = cf.Future()
    recovered = compose(failing, excepthook=lambda exc: f"recovered {exc}")
    renamed = compose(failing, excepthook=lambda exc: KeyError(str(exc)))
    failing.set_exception(ValueError("x"))
    assert recovered.result(timeout=1) == "recovered x"
    with pytest.raises(KeyError):
        renamed.result(timeout=1)
    cancelled = collect([cf.Future(), cf.Future()])
    cancelled.cancel()
    assert cancelled.cancelled()


def test_thread_pool_has_multiprocessing_interface() -> None:
    with ThreadPool(2) as pool:
        assert pool.map(_square, range(5)) == [0, 1, 4, 9, 16]
        assert pool.starmap(pow, [(2, 2), (2, 3)]) == [4, 8]
        result = pool.apply_async(_square, (7,))
        assert result.get(timeout=5) == 49 and result.successful()
        errors: list[BaseException] = []
        failed = pool.map_async(int, ["x"], error_callback=errors.append)
        failed.wait(5)
        assert not failed.successful() and isinstance(errors[0], ValueError)
    with pytest.warns(UserWarning, match="maxtasksperchild"):
        ThreadPool(1, maxtasksperchild=1).close()


PROGRAM = """
import sys
from mpi4py import MPI
from mpi4py.futures import MPIPoolExecutor, get_comm_workers, wait

def square(x):
    return x * x

def fails(x):
    if x == 3:
        raise ValueError(f"task {x} failed")
    return x

def workers_sum():
    comm = get_comm_workers()
    comm.Barrier()
    return comm.allreduce(comm.Get_rank())

if __name__ == "__main__":
    assert MPI.COMM_WORLD.Get_rank() == 0
    with MPIPoolExecutor() as executor:
        print("workers", executor.num_workers)
        print("squares", list(executor.map(square, range(8), chunksize=3)))
        try:
            list(executor.map(fails, range(5)))
        except ValueError as exc:
            print("raised", exc)
        futures = [executor.submit(workers_sum) for _ in range(executor.num_workers)]
        wait(futures)
        print("sums", [f.result() for f in futures])
    print("args", sys.argv[1:])
"""


@pytest.mark.timeout(60)
def test_python_m_mpi4py_futures_runs_the_program_on_rank_0(tmp_path: Path) -> None:
    prog = tmp_path / "prog.py"
    prog.write_text(PROGRAM)
    command = [sys.executable, "-m", "ipympi.run", "-n", "3", "--timeout", "30",
               sys.executable, "-m", "mpi4py.futures", str(prog), "x"]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=50, env=_env())
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "workers 2",
        f"squares {[x * x for x in range(8)]}",
        "raised task 3 failed",
        "sums [1, 1]",
        "args ['x']",
    ]


COMM_EXECUTOR = """
from mpi4py import MPI
from mpi4py.futures import MPICommExecutor

def setup(value):
    global SETTING
    SETTING = value

def setting(_):
    return SETTING

with MPICommExecutor(MPI.COMM_WORLD, root=1, initializer=setup, initargs=(7,)) as executor:
    if executor is not None:
        assert executor.submit(abs, -42).result() == 42
        print("settings", set(executor.map(setting, range(6))), executor.num_workers)
print("rank", MPI.COMM_WORLD.Get_rank(), "left")
"""


@pytest.mark.timeout(60)
def test_comm_executor_splits_master_and_workers(run_mpi: RunMPI) -> None:
    result = run_mpi(3, COMM_EXECUTOR)
    assert result.returncode == 0, result.stderr
    assert "settings {7} 2" in result.stdout
    assert sorted(line for line in result.stdout.splitlines() if line.startswith("rank")) == [
        f"rank {r} left" for r in range(3)
    ]


@pytest.mark.timeout(60)
def test_bench_commands(tmp_path: Path) -> None:
    def bench(n: int, *args: str) -> str:
        command = [sys.executable, "-m", "ipympi.run", "-n", str(n), "--timeout", "30",
                   "-m", "mpi4py.bench", *args]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=50, env=_env())
        assert done.returncode == 0, done.stderr
        return done.stdout

    hello = bench(2, "helloworld").splitlines()
    assert [line.split(" on ")[0] for line in hello] == [
        f"Hello, World! I am process {r} of 2" for r in range(2)
    ]
    assert "(3 processes, 64 bytes)" in bench(3, "ringtest", "-n", "64", "-l", "5")
    pingpong = bench(2, "pingpong", "-n", "64", "-l", "5", "-s", "1", "-p")
    assert pingpong.splitlines()[0] == "# MPI PingPong Test" and len(pingpong.splitlines()) == 9


SHARED_POOL_PROGRAM = """
import traceback
from mpi4py import MPI
from mpi4py.futures import MPICommExecutor

def fails(x):
    raise KeyError(x)

if __name__ == "__main__":
    with MPICommExecutor(MPI.COMM_WORLD, root=0) as executor:
        print("workers", executor.num_workers, sorted(executor.map(abs, [-1, -2, -3])))
        error = executor.submit(fails, "k").exception()
        print("cause", type(error.__cause__).__name__)
        print(str(error.__cause__).splitlines()[1])
        print([line for line in str(error.__cause__).splitlines() if "raise KeyError" in line])
"""


@pytest.mark.timeout(60)
def test_under_python_m_mpi4py_futures_a_comm_executor_uses_the_serving_workers(
    tmp_path: Path,
) -> None:
    """Only rank 0 runs the program there: entering must not wait for the other ranks.

    A task's exception comes back with the worker's traceback as its cause.
    """
    prog = tmp_path / "prog.py"
    prog.write_text(SHARED_POOL_PROGRAM)
    command = [sys.executable, "-m", "ipympi.run", "-n", "3", "--timeout", "30",
               sys.executable, "-m", "mpi4py.futures", str(prog)]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=50, env=_env())
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:2] == ["workers 2 [1, 2, 3]", "cause RemoteTraceback"]
    assert re.fullmatch(r"### Worker [01] of 2 on .+", lines[2])
    assert lines[3] == "['    raise KeyError(x)']"
