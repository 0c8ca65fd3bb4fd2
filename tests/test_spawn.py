"""``Comm.Spawn``, ``Spawn_multiple`` and ``Get_parent`` with real processes: under
``python -m ipympi.run`` and from a plain ``python prog.py`` (a singleton that becomes a job)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import RunMPI, _env

from ipympi.launch.spawning import Refused, plan_apps

WORKER = """
from ipympi import MPI
parent = MPI.Comm.Get_parent()
world = MPI.COMM_WORLD
x = parent.recv(source=0, tag=1)
parent.send((x * x, world.Get_rank(), world.Get_size(), world.Get_attr(MPI.APPNUM)), 0, tag=2)
merged = parent.Merge(high=True)
assert merged.allreduce(1) == merged.Get_size()
print(f"child {world.Get_rank()} merged {merged.Get_rank()}/{merged.Get_size()}", flush=True)
merged.Free()
parent.Disconnect()
assert MPI.Comm.Get_parent() == MPI.COMM_NULL
"""


def _write(folder: Path, name: str, source: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(source))
    return path


def _private_tmp(tmp_path: Path) -> Path:
    folder = tmp_path / "tmp"
    folder.mkdir()
    return folder


def _plain(path: Path, tmp: Path, timeout: float = 40) -> subprocess.CompletedProcess:
    """Run ``python path`` (no launcher) with a private temp folder."""
    env = _env()
    env["TMPDIR"] = str(tmp)
    return subprocess.run(
        [sys.executable, str(path)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=str(path.parent),
    )


MASTER = """
import sys
from ipympi import MPI
world = MPI.COMM_WORLD
assert MPI.Comm.Get_parent() == MPI.COMM_NULL
codes = []
inter = world.Spawn(sys.executable, [WORKER], 3, root=0, errcodes=codes)
assert codes == [MPI.SUCCESS] * 3, codes
assert inter.Is_inter() and inter.Get_size() == world.Get_size()
assert inter.Get_remote_size() == 3
if world.Get_rank() == 0:
    for i in range(3):
        inter.send(i + 2, dest=i, tag=1)
    answers = [inter.recv(source=i, tag=2) for i in range(3)]
    assert answers == [((i + 2) ** 2, i, 3, 0) for i in range(3)], answers
    print("answers", answers, flush=True)
merged = inter.Merge(high=False)
assert merged.Get_size() == world.Get_size() + 3
assert merged.Get_rank() == world.Get_rank(), (merged.Get_rank(), world.Get_rank())
assert merged.allreduce(1) == world.Get_size() + 3
merged.Free()
inter.Disconnect()
assert inter == MPI.COMM_NULL
print("master done", world.Get_rank(), flush=True)
"""


def _master(tmp_path: Path) -> Path:
    worker = _write(tmp_path, "worker.py", WORKER)
    return _write(tmp_path, "master.py", f"WORKER = {str(worker)!r}\n" + textwrap.dedent(MASTER))


def test_a_master_spawns_three_workers_that_compute_and_answer(
    run_mpi: RunMPI, tmp_path: Path
) -> None:
    tmp = _private_tmp(tmp_path)
    master = _master(tmp_path)
    proc = run_mpi(2, master.read_text(), env={"TMPDIR": str(tmp)}, launcher_args=("--tag-output",))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("master done") == 2
    for child in range(3):  # Merge with high=True puts the children after both parents
        # labelled with their process index, after the job's first two ranks
        assert f"[{child + 2}] child {child} merged {child + 2}/5" in proc.stdout
    assert list(tmp.iterdir()) == []


def test_a_plain_python_program_spawns_and_leaves_nothing(tmp_path: Path) -> None:
    tmp = _private_tmp(tmp_path)
    proc = _plain(_master(tmp_path), tmp)
    assert proc.returncode == 0, proc.stderr
    assert "master done 0" in proc.stdout, proc.stdout + proc.stderr
    assert "child 2 merged 3/4" in proc.stdout, proc.stdout + proc.stderr
    assert list(tmp.iterdir()) == [], proc.stdout + proc.stderr


def test_spawn_multiple_numbers_the_programs_and_fills_errcodes(
    run_mpi: RunMPI, tmp_path: Path
) -> None:
    proc = run_mpi(
        1,
        """
        import sys
        from ipympi import MPI
        child = (
            "from ipympi import MPI; p = MPI.Comm.Get_parent(); "
            "p.send((MPI.COMM_WORLD.Get_rank(), MPI.COMM_WORLD.Get_attr(MPI.APPNUM)), 0); "
            "p.Disconnect()"
        )
        codes = []
        inter = MPI.COMM_SELF.Spawn_multiple(
            [sys.executable] * 2, [["-c", child]] * 2, [1, 2], root=0, errcodes=codes
        )
        assert codes == [[MPI.SUCCESS], [MPI.SUCCESS] * 2], codes
        got = sorted(inter.recv(source=i) for i in range(3))
        assert got == [(0, 0), (1, 1), (2, 1)], got
        inter.Disconnect()
        print("ok")
        """,
    )
    assert proc.returncode == 0, proc.stderr
    assert "ok" in proc.stdout


def test_info_keys_wdir_path_env_and_host(run_mpi: RunMPI, tmp_path: Path) -> None:
    folder = tmp_path / "bin"
    folder.mkdir()
    tool = folder / "childtool"
    tool.write_text(f"#!{sys.executable}\nimport runpy, sys\nrunpy.run_path(sys.argv[1])\n")
    tool.chmod(0o755)
    body = _write(
        tmp_path,
        "body.py",
        """
        import os
        from ipympi import MPI
        p = MPI.Comm.Get_parent()
        p.send((os.getcwd(), os.environ.get("GREETING")), 0)
        p.Disconnect()
        """,
    )
    proc = run_mpi(
        1,
        f"""
        import socket, sys
        from ipympi import MPI
        info = MPI.Info.Create()
        info.Set("wdir", {str(folder)!r})
        info.Set("path", {str(folder)!r})
        info.Set("env", "GREETING=hello there")
        info.Set("host", socket.gethostname())
        info.Set("soft", "1:2")
        bad = MPI.Info.Create()
        bad.Set("soft", "1:two")
        try:
            MPI.COMM_SELF.Spawn("childtool", [], 1, info=bad)
        except MPI.Exception as exc:
            assert exc.Get_error_class() == MPI.ERR_INFO_VALUE, exc
        else:
            raise AssertionError("a bad soft value was taken")
        inter = MPI.COMM_SELF.Spawn("childtool", [{str(body)!r}], 2, info=info)
        assert [inter.recv(source=i) for i in range(2)] == [({str(folder)!r}, "hello there")] * 2
        inter.Disconnect()
        print("ok")
        """,
    )
    assert proc.returncode == 0, proc.stderr
    assert "ok" in proc.stdout


def test_a_command_that_cannot_start_raises_err_spawn_and_starts_nothing(
    run_mpi: RunMPI, tmp_path: Path
) -> None:
    marker = f"ipympi-spawn-test-{os.getpid()}"
    proc = run_mpi(
        2,
        f"""
        import sys
        from ipympi import MPI
        world = MPI.COMM_WORLD
        def refused(command, args, info=MPI.INFO_NULL):
            codes = []
            try:
                world.Spawn(command, args, 2, info=info, errcodes=codes)
            except MPI.Exception as exc:
                assert exc.Get_error_class() == MPI.ERR_SPAWN, exc
                assert codes == [MPI.ERR_SPAWN] * 2, codes
                return str(exc)
            raise AssertionError("Spawn did not raise")
        print(refused("no-such-command-{marker}", []))
        bad_wdir = MPI.Info.Create()
        bad_wdir.Set("wdir", "/no/such/folder")
        print(refused(sys.executable, ["-c", "pass", "{marker}"], bad_wdir))
        elsewhere = MPI.Info.Create()
        elsewhere.Set("host", "no-such-host.invalid")
        print(refused(sys.executable, ["-c", "pass", "{marker}"], elsewhere))
        # the job goes on: a good spawn works afterwards
        bye = "from ipympi import MPI; MPI.Comm.Get_parent().Disconnect()"
        inter = world.Spawn(sys.executable, ["-c", bye], 1)
        inter.Disconnect()
        print("after", world.Get_rank())
        """,
    )
    assert proc.returncode == 0, proc.stderr
    assert "command 'no-such-command-" in proc.stdout and "not found" in proc.stdout
    assert "wdir '/no/such/folder' is not a folder" in proc.stdout
    assert "'no-such-host.invalid' is not this host" in proc.stdout
    assert proc.stdout.count("after") == 2
    left = subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True, check=False)
    assert left.stdout.strip() == ""


def test_a_failing_child_ends_the_job_with_its_traceback(run_mpi: RunMPI, tmp_path: Path) -> None:
    proc = run_mpi(
        2,
        """
        import sys
        from ipympi import MPI
        if MPI.Comm.Get_parent() == MPI.COMM_NULL:
            inter = MPI.COMM_WORLD.Spawn(sys.executable, [__file__], 2)
            inter.recv(source=0)  # never answered: the job ends
        elif MPI.COMM_WORLD.Get_rank() == 1:
            raise ValueError("the child fails")
        else:
            MPI.Comm.Get_parent().recv(source=0)
        """,
    )
    assert proc.returncode == 1, proc.stderr
    assert "ValueError: the child fails" in proc.stderr
    assert "rank 3 exited with status 1; ending the other ranks" in proc.stderr


def test_spawned_processes_die_with_a_singleton_parent(tmp_path: Path) -> None:
    tmp = _private_tmp(tmp_path)
    pidfile = tmp_path / "child.pid"
    prog = _write(
        tmp_path,
        "parent.py",
        f"""
        import os, sys
        from ipympi import MPI
        child = (
            "import os; from ipympi import MPI; p = MPI.Comm.Get_parent(); "
            "open({str(pidfile)!r}, 'w').write(str(os.getpid())); p.send('up', 0); p.recv(source=0)"
        )
        inter = MPI.COMM_SELF.Spawn(sys.executable, ["-c", child], 1)
        assert inter.recv(source=0) == "up"
        os._exit(3)  # without Finalize: the child must not stay
        """,
    )
    proc = _plain(prog, tmp)
    assert proc.returncode == 3, proc.stderr
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _running(pid):
        time.sleep(0.05)
    assert not _running(pid)
    while time.monotonic() < deadline and list(tmp.iterdir()):
        time.sleep(0.05)  # the supervisor removes the session directory as it ends
    assert list(tmp.iterdir()) == []


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_universe_size_defaults_to_the_cores_and_can_be_set(run_mpi: RunMPI) -> None:
    source = """
        import os
        from ipympi import MPI
        print("universe", MPI.COMM_WORLD.Get_attr(MPI.UNIVERSE_SIZE))
        """
    proc = run_mpi(1, source)
    assert proc.returncode == 0, proc.stderr
    assert f"universe {max(1, os.cpu_count() or 1)}" in proc.stdout
    proc = run_mpi(1, source, env={"IPYMPI_UNIVERSE_SIZE": "16"})
    assert proc.returncode == 0, proc.stderr
    assert "universe 16" in proc.stdout


def test_a_deadlock_between_parents_and_children_is_reported(run_mpi: RunMPI) -> None:
    proc = run_mpi(
        1,
        """
        import sys
        from ipympi import MPI
        parent = MPI.Comm.Get_parent()
        if parent == MPI.COMM_NULL:
            inter = MPI.COMM_WORLD.Spawn(sys.executable, [__file__], 1)
            inter.recv(source=0, tag=5)  # both sides receive: nobody sends
        else:
            parent.recv(source=0, tag=6)
        """,
    )
    assert proc.returncode == 125, proc.stderr
    assert "deadlock" in proc.stderr
    assert "rank 1 (pid" in proc.stderr and "MPI_COMM_PARENT" in proc.stderr


def test_a_singleton_whose_children_wait_for_it_ends_as_a_deadlock(tmp_path: Path) -> None:
    tmp = _private_tmp(tmp_path)
    prog = _write(
        tmp_path,
        "parent.py",
        """
        import sys
        from ipympi import MPI
        if MPI.Comm.Get_parent() == MPI.COMM_NULL:
            inter = MPI.COMM_SELF.Spawn(sys.executable, [__file__], 1)
            print("parent done", flush=True)  # and finalizes: the child waits forever
        else:
            MPI.Comm.Get_parent().recv(source=0)
        """,
    )
    proc = _plain(prog, tmp)
    assert proc.returncode == 125, proc.stderr
    assert "parent done" in proc.stdout
    assert "deadlock" in proc.stderr and "waiting for the spawned processes" in proc.stderr
    assert list(tmp.iterdir()) == []


def test_a_singleton_that_fails_ends_its_children_and_shows_its_traceback(
    tmp_path: Path,
) -> None:
    tmp = _private_tmp(tmp_path)
    prog = _write(
        tmp_path,
        "parent.py",
        """
        import sys
        from ipympi import MPI
        if MPI.Comm.Get_parent() == MPI.COMM_NULL:
            inter = MPI.COMM_SELF.Spawn(sys.executable, [__file__], 2)
            raise RuntimeError("the parent fails")
        else:
            MPI.Comm.Get_parent().recv(source=0)
        """,
    )
    proc = _plain(prog, tmp)
    assert proc.returncode == 1, proc.stderr
    assert "RuntimeError: the parent fails" in proc.stderr
    assert "ending the other ranks" in proc.stderr
    assert list(tmp.iterdir()) == []


def test_the_launcher_checks_every_program_before_starting_any(tmp_path: Path) -> None:
    tool = tmp_path / "tool"
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    plain = tmp_path / "data.txt"
    plain.write_text("")
    env = {"PATH": "/usr/bin:/bin"}
    [start] = plan_apps(
        [{"argv": ["tool", "x"], "maxprocs": 2, "path": str(tmp_path), "env": "A=1\nB=two=2"}],
        env,
    )
    assert start.argv == [str(tool), "x"] and start.count == 2
    assert start.env == {"A": "1", "B": "two=2"} and start.cwd is None
    [start] = plan_apps([{"argv": ["./tool"], "maxprocs": 1, "wdir": str(tmp_path)}], env)
    assert start.cwd == str(tmp_path)
    refused = {
        "names no program": [],
        "not described": ["tool"],
        "has no command line": [{"argv": [], "maxprocs": 1}],
        "not a positive number": [{"argv": ["sh"], "maxprocs": 0}],
        "is not this host": [{"argv": ["sh"], "maxprocs": 1, "host": "elsewhere.invalid"}],
        "is not a folder": [{"argv": ["sh"], "maxprocs": 1, "wdir": str(plain)}],
        "not found": [{"argv": ["no-such-tool-anywhere"], "maxprocs": 1}],
        "not an executable file": [{"argv": [str(plain)], "maxprocs": 1}],
        "does not exist": [{"argv": [str(tmp_path / "gone")], "maxprocs": 1}],
        "is not NAME=value": [{"argv": ["sh"], "maxprocs": 1, "env": "oops"}],
    }
    for why, apps in refused.items():
        with pytest.raises(Refused, match=why):
            plan_apps(apps, env)


def test_a_singleton_that_aborts_ends_its_children_and_exits_with_its_code(
    tmp_path: Path,
) -> None:
    tmp = _private_tmp(tmp_path)
    prog = _write(
        tmp_path,
        "parent.py",
        """
        import sys
        from ipympi import MPI
        if MPI.Comm.Get_parent() == MPI.COMM_NULL:
            inter = MPI.COMM_SELF.Spawn(sys.executable, [__file__], 2)
            MPI.COMM_WORLD.Abort(7)
        else:
            MPI.Comm.Get_parent().recv(source=0)
        """,
    )
    start = time.monotonic()
    proc = _plain(prog, tmp)
    assert proc.returncode == 7, proc.stderr
    assert "rank 0 called Abort with error code 7" in proc.stderr
    assert time.monotonic() - start < 20
    assert list(tmp.iterdir()) == []


LOUD_CHILD = """
import sys
from ipympi import MPI
if len(sys.argv) > 1:  # the child: a megabyte while its parent computes, then a barrier
    parent = MPI.Comm.Get_parent()
    for i in range(10000):
        print(f"{i:05d}", "w" * 94)
    sys.stdout.flush()
    parent.Barrier()
    parent.Disconnect()
else:
    import time
    inter = MPI.COMM_SELF.Spawn(sys.executable, [__file__, "child"], maxprocs=1)
    time.sleep(2)  # outside MPI: the child's output must be forwarded meanwhile
    inter.Barrier()
    inter.Disconnect()
    print("parent done", flush=True)
"""


@pytest.mark.parametrize("how", ["launcher", "singleton"])
def test_a_child_printing_a_megabyte_does_not_stall(
    run_mpi: RunMPI, tmp_path: Path, how: str
) -> None:
    tmp = _private_tmp(tmp_path)
    if how == "launcher":
        proc = run_mpi(1, LOUD_CHILD, env={"TMPDIR": str(tmp)})
    else:
        proc = _plain(_write(tmp_path, "loud.py", LOUD_CHILD), tmp)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert [line for line in lines if line.endswith("w" * 94)] == [
        f"{i:05d} " + "w" * 94 for i in range(10000)
    ]
    assert "parent done" in lines
