"""Nothing outlives a session or a job: no directory, socket or shared-memory file.

Every ending Jupyter or a user causes is tried on a real launcher or a real
``ipympi`` kernel, each started with a private ``TMPDIR`` (the machine's temporary
folder is shared with other runs), which must be empty afterwards: a shutdown
request, SIGTERM and SIGHUP (SIGTERM also after a shutdown request that timed out on a stuck
cell), SIGINT of the launcher, an engine's death, and SIGKILL of the kernel or of
the launcher, whose leftovers the next start reaps. On mpi4py with MPICH the
shared-memory files a world's ranks noted must be gone when the world ends; only
those files are looked at, never another job's. The rules that decide which
directories are stale are unit-tested without processes.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT, _env, wait_gone
from kernel_helpers import KernelSession, descendants, kernel_env, kernel_specs_installed

from ipympi.launch import sessiondir

MPIEXEC = shutil.which("mpiexec") or os.path.join(os.path.dirname(sys.executable), "mpiexec")
HAVE_MPI4PY = importlib.util.find_spec("mpi4py") is not None and os.access(MPIEXEC, os.X_OK)
GONE_WITHIN = 10.0


def _left_over(tmp: Path) -> list[str]:
    return sorted(str(p.relative_to(tmp)) for p in tmp.rglob("*"))


def _wait_empty(tmp: Path, timeout: float = GONE_WITHIN) -> list[str]:
    deadline = time.monotonic() + timeout
    while _left_over(tmp) and time.monotonic() < deadline:
        time.sleep(0.1)
    return _left_over(tmp)


@pytest.fixture
def tmp() -> Iterator[Path]:
    """A private temporary folder for the processes under test (their ``TMPDIR``), with a
    short path: in one too long for socket paths the launcher makes its directories in
    ``/tmp`` instead, as it would under pytest's own folders once their counter is long."""
    path = Path(tempfile.mkdtemp(prefix="clean-ends-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


# -- which directories are stale (no processes) -------------------------------------------
def _session(parent: Path, owner: str | None) -> Path:
    path = parent / f"{sessiondir.PREFIX}test{len(list(parent.iterdir()))}"
    path.mkdir(mode=0o700)
    (path / "w1").mkdir()
    if owner is not None:
        (path / sessiondir.OWNER_FILE).write_text(owner)
    return path


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(10)
    return proc.pid


def test_only_directories_of_gone_owners_are_reaped(tmp_path: Path) -> None:
    me = sessiondir._owner_line(os.getpid())
    dead_pid = _dead_pid()
    stale = _session(tmp_path, f"{dead_pid} 1 {sessiondir._pid_namespace() or '-'}\n")
    live = _session(tmp_path, me)
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"]) as other:
        try:
            other_live = _session(tmp_path, sessiondir._owner_line(other.pid))
            reused = _session(tmp_path, f"{other.pid} 1 {sessiondir._pid_namespace() or '-'}\n")
            elsewhere = _session(tmp_path, f"{dead_pid} 1 not-this-namespace\n")
            in_the_making = _session(tmp_path, None)
            garbled = _session(tmp_path, "what is this")
            unrelated = tmp_path / "other-dir"
            unrelated.mkdir()
            reaped = sessiondir.reap_stale(str(tmp_path))
            assert sorted(reaped) == sorted([str(stale), str(reused)])
            for kept in (live, other_live, elsewhere, in_the_making, garbled, unrelated):
                assert kept.is_dir()
        finally:
            other.kill()


def test_made_directories_are_marked_and_removed(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    path = sessiondir.make_session_dir()
    assert Path(path).parent == tmp_path
    assert oct(os.stat(path).st_mode & 0o777) == "0o700"
    assert Path(path, sessiondir.OWNER_FILE).read_text() == sessiondir._owner_line(os.getpid())
    assert sessiondir.reap_stale(str(tmp_path)) == []  # its owner (this process) lives
    sessiondir.remove_session_dir(path)
    assert _left_over(tmp_path) == []


def test_noted_shared_memory_is_removed_only_if_it_is_the_same_file(tmp_path: Path) -> None:
    if not os.path.isdir(sessiondir.SHM_DIR):
        pytest.skip("no /dev/shm")
    world = tmp_path / "w1"
    world.mkdir()
    mine = Path(sessiondir.SHM_DIR, f"mpich_shm_ipympitest{os.getpid()}_0")
    replaced = Path(sessiondir.SHM_DIR, f"mpich_shm_ipympitest{os.getpid()}_1")
    try:
        mine.write_bytes(b"x")
        replaced.write_bytes(b"y")
        lines = []
        for path in (mine, replaced):
            st = path.stat()
            lines.append(f"{st.st_dev} {st.st_ino} {path}\n")
        (world / "shm-0").write_text("".join(lines))
        replaced.unlink()  # another job's file of the same name: not ours to remove
        replaced.write_bytes(b"z" * 10)
        if replaced.stat().st_ino == int(lines[1].split()[1]):
            pytest.skip("the file system gave the same inode again")
        sessiondir.remove_session_dir(str(world))
        assert not mine.exists() and replaced.exists() and not world.exists()
    finally:
        for path in (mine, replaced):
            path.unlink(missing_ok=True)


# -- the launcher ---------------------------------------------------------------------------
SLEEPER = """
from ipympi import MPI
MPI.COMM_WORLD.Barrier()
print("ready", flush=True)
import time
time.sleep(60)
"""


def _launcher(tmp: Path, prog: Path, n: int = 2) -> subprocess.Popen[str]:
    env = _env()
    env["TMPDIR"] = str(tmp)
    return subprocess.Popen(
        [sys.executable, "-m", "ipympi.run", "-n", str(n), "--timeout", "50", str(prog)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=str(ROOT),
    )


def _started(proc: subprocess.Popen[str], n: int) -> None:
    assert proc.stdout is not None
    for _ in range(n):
        assert proc.stdout.readline().strip() == "ready"


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGKILL])
def test_launcher_ended_by_a_signal_leaves_nothing(tmp_path: Path, sig: int, tmp: Path) -> None:
    prog = tmp_path / "sleeper.py"
    prog.write_text(textwrap.dedent(SLEEPER))
    proc = _launcher(tmp, prog)
    try:
        _started(proc, 2)
        ranks = [int(p) for p in descendants(proc.pid)]
        assert _left_over(tmp), "the job's directory exists while it runs"
        proc.send_signal(sig)
        proc.wait(20)
        assert wait_gone(ranks, GONE_WITHIN) == []
    finally:
        proc.kill()
        proc.communicate(timeout=10)
    if sig == signal.SIGKILL:
        # Nothing can run at SIGKILL: the next job in this folder reaps what is left.
        assert [p for p in _left_over(tmp) if "/" not in p]
        prog.write_text("from ipympi import MPI\nMPI.COMM_WORLD.Barrier()\n")
        done = subprocess.run(
            [sys.executable, "-m", "ipympi.run", "-n", "2", "--timeout", "30", str(prog)],
            env={**_env(), "TMPDIR": str(tmp)},
            capture_output=True,
            text=True,
            timeout=45,
        )
        assert done.returncode == 0, done.stderr
    assert _wait_empty(tmp) == []


@pytest.mark.skipif(not HAVE_MPI4PY, reason="needs mpi4py with MPICH (pip install mpi4py mpich)")
@pytest.mark.parametrize("uses_mpi", [False, True])
def test_forked_ranks_on_a_real_mpi4py_leave_no_shared_memory(
    tmp_path: Path, uses_mpi: bool, tmp: Path
) -> None:
    """With ``--no-mpi4py-name`` the ranks' ``mpi4py`` is the real one, which each rank
    starts as a world of its own (an MPICH singleton maps /dev/shm/mpich_shm_<pid in
    hex>_0 until ``MPI_Finalize``). The template the ranks are forked from must not start
    it, and a forked rank must end it as the interpreter's end would."""
    prog = tmp_path / "prog.py"
    body = "from mpi4py import MPI\nassert MPI.Is_initialized()\n" if uses_mpi else ""
    prog.write_text(f"import os\nimport mpi4py\n{body}print(os.getpid(), os.getppid())\n")
    done = subprocess.run(
        [sys.executable, "-m", "ipympi.run", "-n", "2", "--no-mpi4py-name", "--timeout", "40",
         sys.executable, str(prog)],
        env={**_env(), "TMPDIR": str(tmp)}, capture_output=True, text=True, timeout=55,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    pids = {int(word) for word in done.stdout.split()}
    assert len(pids) == 3, done.stdout  # two ranks and the template they were forked from
    left = [path for pid in pids if (path := Path(f"/dev/shm/mpich_shm_{pid:x}_0")).exists()]
    for path in left:  # this test's processes' files: do not leave them to the machine
        path.unlink()
    assert left == []
    assert _wait_empty(tmp) == []


# -- the kernel ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def kernel_specs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    with kernel_specs_installed(tmp_path_factory.mktemp("jupyter")) as data_dir:
        yield data_dir


def _kernel(tmp: Path, backend: str = "builtin") -> KernelSession:
    k = KernelSession("ipympi", kernel_env(np=2, IPYMPI_BACKEND=backend, TMPDIR=str(tmp)))
    k.ok("None", timeout=60)
    return k


def test_kernel_shutdown_request_leaves_nothing(kernel_specs: Path, tmp: Path) -> None:
    k = _kernel(tmp)
    processes = [k.pid, *descendants(k.pid)]
    k.shutdown()
    assert wait_gone(processes, GONE_WITHIN) == []
    assert _wait_empty(tmp) == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_kernel_ended_by_a_signal_leaves_nothing(kernel_specs: Path, sig: int, tmp: Path) -> None:
    with _kernel(tmp) as k:
        processes = [k.pid, *descendants(k.pid)]
        os.kill(k.pid, sig)
        assert wait_gone(processes, GONE_WITHIN) == []
    assert _wait_empty(tmp) == []


def test_kernel_shutdown_after_a_stuck_cell_leaves_nothing(kernel_specs: Path, tmp: Path) -> None:
    """A ring of ssend that Jupyter's interrupt stopped; the shutdown request may
    time out, and Jupyter then sends SIGTERM: either way nothing is left."""
    with _kernel(tmp) as k:
        k.ok("%mpi config on_error=wait")
        msg_id = k.send("comm.ssend(rank, dest=(rank + 1) % size)")
        time.sleep(1.0)
        k.km.interrupt_kernel()
        k.collect(msg_id, timeout=30)
        processes = [k.pid, *descendants(k.pid)]
        k.km.shutdown_wait_time = 1.0  # Jupyter's SIGTERM comes soon after the request
        k.shutdown()
        assert wait_gone(processes, GONE_WITHIN) == []
    assert _wait_empty(tmp) == []


def test_engine_death_then_shutdown_leaves_nothing(kernel_specs: Path, tmp: Path) -> None:
    with _kernel(tmp) as k:
        k.execute("import os\nif rank == 1: os._exit(3)", timeout=30)
        processes = [k.pid, *descendants(k.pid)]
    assert wait_gone(processes, GONE_WITHIN) == []
    assert _wait_empty(tmp) == []


def test_sigterm_of_a_stock_kernel_with_a_session_leaves_nothing(
    kernel_specs: Path, tmp: Path
) -> None:
    """``%load_ext ipympi`` and ``%mpi start`` in IPython's own kernel."""
    with KernelSession("python3", kernel_env(TMPDIR=str(tmp))) as k:
        k.ok("%load_ext ipympi\n%mpi start -n 2", timeout=60)
        k.ok("%%px\nx = comm.allreduce(rank)", timeout=30)
        assert _left_over(tmp)
        processes = [k.pid, *descendants(k.pid)]
        os.kill(k.pid, signal.SIGTERM)
        assert wait_gone(processes, GONE_WITHIN) == []
    assert _wait_empty(tmp) == []


def test_killed_kernel_is_reaped_at_the_next_start(kernel_specs: Path, tmp: Path) -> None:
    with _kernel(tmp) as k:
        processes = [k.pid, *descendants(k.pid)]
        os.kill(k.pid, signal.SIGKILL)
        assert wait_gone(processes, GONE_WITHIN) == []
    assert _left_over(tmp), "SIGKILL lets nothing run: the directory is still there"
    with _kernel(tmp) as k:
        assert len([p for p in _left_over(tmp) if "/" not in p]) == 1  # the new one only
    assert _wait_empty(tmp) == []


# -- a real MPI's shared memory ------------------------------------------------------------
def _noted_shm(tmp: Path) -> list[Path]:
    paths = []
    for note in tmp.rglob(f"{sessiondir.SHM_NOTE}*"):
        paths += [Path(line.split()[2]) for line in note.read_text().splitlines()]
    return paths


def _mapped_shm(pids: list[int]) -> set[Path]:
    """The files in /dev/shm that the processes ``pids`` (this test's) map now."""
    paths = set()
    for pid in pids:
        try:
            lines = Path(f"/proc/{pid}/maps").read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            parts = line.split(maxsplit=5)
            if len(parts) == 6 and parts[5].startswith("/dev/shm/") and "(deleted)" not in parts[5]:
                paths.add(Path(parts[5]))
    return paths


@pytest.mark.skipif(not HAVE_MPI4PY, reason="needs mpi4py and mpiexec (pip install mpi4py mpich)")
@pytest.mark.parametrize("ending", ["restart", "shutdown", "sigterm", "sigkill"])
def test_mpi4py_worlds_leave_no_shared_memory(kernel_specs: Path, ending: str, tmp: Path) -> None:
    with _kernel(tmp, "mpi4py") as k:
        processes = [k.pid, *descendants(k.pid)]
        shm = _noted_shm(tmp)
        assert shm and all(p.exists() for p in shm), "MPICH maps shared memory in /dev/shm"
        assert _mapped_shm(processes) <= set(shm), "the ranks noted every file they map"
        if ending == "restart":
            k.ok("%mpi restart", timeout=60)
            assert not any(p.exists() for p in shm)
            processes = [k.pid, *descendants(k.pid)]
            shm = _noted_shm(tmp)
            assert shm and _mapped_shm(processes) <= set(shm)
            k.shutdown()
        elif ending == "shutdown":
            k.shutdown()
        else:
            os.kill(k.pid, signal.SIGTERM if ending == "sigterm" else signal.SIGKILL)
        assert wait_gone(processes, GONE_WITHIN) == []
    if ending == "sigkill":
        assert _left_over(tmp)
        with _kernel(tmp) as k:  # the next start reaps the folder and its noted files
            pass
    assert _wait_empty(tmp) == []
    assert not any(p.exists() for p in shm)
