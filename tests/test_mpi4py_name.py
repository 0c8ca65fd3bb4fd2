"""The ``mpi4py`` name: programs written for mpi4py run unchanged on ipympi's ranks.

Under ``python -m ipympi.run`` (and in the engines, see test_kernel/test_extension),
``import mpi4py`` gives ipympi, also when the real mpi4py is installed, and nowhere else.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import RunMPI, _env

from ipympi import mpi4py as mpi4py_name

REAL_MPI4PY = importlib.util.find_spec("mpi4py")  # where pip installed it, if anywhere

WHO_AM_I = """
import mpi4py
from mpi4py import MPI
import mpi4py.MPI
import ipympi, ipympi.MPI
comm = MPI.COMM_WORLD
assert mpi4py.MPI is MPI is ipympi.MPI, (mpi4py.MPI, MPI)
assert mpi4py.rc is ipympi.rc and sys.modules["mpi4py.rc"] is ipympi.rc
assert MPI.get_vendor()[0] == "ipympi" and "ipympi" in MPI.Get_library_version()
print(f"rank {comm.Get_rank()} of {comm.Get_size()}: sum {comm.allreduce(comm.Get_rank())}")
"""


def _lines(text: str) -> list[str]:
    return sorted(line for line in text.splitlines() if line.startswith("rank "))


@pytest.mark.timeout(60)
def test_from_mpi4py_import_MPI_gives_ipympi(run_mpi: RunMPI) -> None:
    result = run_mpi(3, "import sys\n" + WHO_AM_I)
    assert result.returncode == 0, result.stderr
    assert _lines(result.stdout) == [f"rank {r} of 3: sum 3" for r in range(3)]


def _launch(n: int, *argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "ipympi.run", "-n", str(n), "--timeout", "20", *argv]
    return subprocess.run(command, capture_output=True, text=True, timeout=40, env=env or _env())


@pytest.mark.timeout(60)
def test_python_m_mpi4py_runs_the_program(tmp_path: Path) -> None:
    prog = tmp_path / "prog.py"
    prog.write_text("import sys\n" + WHO_AM_I + "print('args', sys.argv)\n")
    result = _launch(2, "-m", "mpi4py", str(prog), "x")
    assert result.returncode == 0, result.stderr
    assert _lines(result.stdout) == ["rank 0 of 2: sum 1", "rank 1 of 2: sum 1"]
    assert result.stdout.count(f"args [{str(prog)!r}, 'x']") == 2


@pytest.mark.timeout(60)
def test_python_m_mpi4py_forms() -> None:
    result = _launch(2, "-m", "mpi4py", "-c", "import sys; from mpi4py import MPI\n"
                     "print('rank', MPI.COMM_WORLD.rank, sys.argv)", "a")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert _lines(result.stdout) == ["rank 0 ['-c', 'a']", "rank 1 ['-c', 'a']"]
    result = _launch(1, "-m", "mpi4py", "--version")
    assert result.stdout.startswith("mpi4py 4.1.2 (ipympi "), result
    result = _launch(1, "-m", "mpi4py", "-rc", "thread_level='funneled'", "-c",
                     "import mpi4py; from mpi4py import MPI\n"
                     "print('rank', mpi4py.rc.thread_level,"
                     "      MPI.Query_thread() == MPI.THREAD_FUNNELED)")  # fmt: skip
    assert _lines(result.stdout) == ["rank funneled True"], result.stderr
    result = _launch(1, "-m", "mpi4py", "--bogus")
    assert result.returncode == 1 and "Unknown option: --bogus" in result.stderr


@pytest.mark.timeout(60)
def test_python_m_mpi4py_run_is_python_m_mpi4py() -> None:
    """mpi4py's own launcher tests run ``python -m mpi4py.run -rc threads=False ...``."""
    code = (
        "from mpi4py import MPI; import sys\n"
        "print(MPI.COMM_WORLD.rank, sys.argv, MPI.Query_thread())"
    )
    result = _launch(2, "-m", "mpi4py.run", "-rc", "threads=False", "-c", code)
    assert result.returncode == 0, result.stderr
    assert sorted(result.stdout.splitlines()) == ["0 ['-c'] 0", "1 ['-c'] 0"]


@pytest.mark.timeout(60)
def test_python_m_mpi4py_aborts_on_an_uncaught_exception(tmp_path: Path) -> None:
    """Rank 0 fails while rank 1 waits for it: the job ends at once, with Abort's status."""
    prog = tmp_path / "fail.py"
    prog.write_text("from mpi4py import MPI\ncomm = MPI.COMM_WORLD\n"
                    "if comm.rank == 0:\n    1/0\ncomm.recv(source=0)\n")  # fmt: skip
    result = _launch(2, "-m", "mpi4py", str(prog))
    assert result.returncode == 1, (result.stdout, result.stderr)
    assert "ZeroDivisionError" in result.stderr
    assert "rank 0 called Abort with error code 1" in result.stderr
    result = _launch(2, "-m", "mpi4py", "-c", "import sys\nsys.exit(3)")
    assert result.returncode == 3, result.stderr
    result = _launch(2, "-m", "mpi4py", "-c", "raise KeyboardInterrupt")
    assert result.returncode == 130, result.stderr
    assert "KeyboardInterrupt" in result.stderr


@pytest.mark.timeout(60)
def test_mpi4py_rc_variables_reach_the_ranks(run_mpi: RunMPI) -> None:
    source = """
        import mpi4py
        from mpi4py import MPI
        print('rank', mpi4py.rc.thread_level, MPI.Query_thread() == MPI.THREAD_SERIALIZED)
    """
    result = run_mpi(2, source, env={"MPI4PY_RC_THREAD_LEVEL": "serialized"})
    assert _lines(result.stdout) == ["rank serialized True"] * 2, result.stderr


@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", ["option", "variable"])
def test_the_name_can_be_turned_off(run_mpi: RunMPI, how: str) -> None:
    source = "import mpi4py\nprint('rank', mpi4py.__file__)"
    if how == "option":
        result = run_mpi(1, source, launcher_args=("--no-mpi4py-name",))
    else:
        result = run_mpi(1, source, env={mpi4py_name.ENV_SWITCH: "0"})
    if REAL_MPI4PY is None:
        assert "ModuleNotFoundError: No module named 'mpi4py'" in result.stderr
    else:
        assert _lines(result.stdout) == [f"rank {REAL_MPI4PY.origin}"], result.stderr


@pytest.mark.timeout(60)
def test_a_rank_python_without_ipympi_is_told_why(tmp_path: Path) -> None:
    # `... ipympi.run -n 2 python prog.py` runs the `python` on PATH: here one that
    # cannot import ipympi (no site-packages), as an unactivated environment's would be.
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    python.chmod(0o755)
    prog = tmp_path / "prog.py"
    prog.write_text("from mpi4py import MPI\nprint(MPI.COMM_WORLD.Get_rank())\n")
    env = {k: v for k, v in _env().items() if k != "PYTHONPATH"}
    result = _launch(2, "--tag-output", str(python), str(prog), env=env)
    assert result.returncode == 1, result.stderr
    for rank in range(2):
        assert f"[{rank}] ModuleNotFoundError: No module named 'ipympi': this Python " in (
            result.stderr
        ), result.stderr
    assert "cannot import ipympi. `python -m ipympi.run -n N prog.py` runs" in result.stderr


@pytest.mark.timeout(30)
def test_nothing_is_shadowed_outside_the_ranks() -> None:
    code = "import importlib.util as u; s = u.find_spec('mpi4py'); print(s and s.origin)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=_env(), timeout=20)  # fmt: skip
    assert result.stdout.strip() == str(REAL_MPI4PY and REAL_MPI4PY.origin)
    assert mpi4py_name.SITE not in sys.path


def test_rank_environment_puts_the_site_first_once() -> None:
    env = {"PYTHONPATH": os.pathsep.join(["/a", mpi4py_name.SITE, "/b"])}
    mpi4py_name.rank_environment(env)
    assert env["PYTHONPATH"].split(os.pathsep) == [mpi4py_name.SITE, "/a", "/b"]
    off = {mpi4py_name.ENV_SWITCH: "off", "PYTHONPATH": "/a"}
    mpi4py_name.rank_environment(off)
    assert off["PYTHONPATH"] == "/a"
    assert not mpi4py_name.enabled({mpi4py_name.ENV_SWITCH: "0"})
    assert mpi4py_name.enabled({})


def test_every_module_of_the_name_has_a_type_stub() -> None:
    site = Path(mpi4py_name.SITE) / "mpi4py"
    assert (site / "py.typed").exists()
    modules = [path for path in site.rglob("*.py") if "__pycache__" not in path.parts]
    assert {"bench.py", "typing.py", "pkl5.py", "server.py"} <= {path.name for path in modules}
    assert [path for path in modules if not path.with_suffix(".pyi").exists()] == []
