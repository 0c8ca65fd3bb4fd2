"""Ranks forked from the launcher's template behave as ranks started as new interpreters.

Each test runs a real job through ``python -m ipympi.run``; most run the same program
forked (the default) and exec'd (``IPYMPI_FORK_RANKS=0``) and compare what the ranks
report. ``ipympi.launch.forker`` in ``sys.modules`` tells a forked rank (an exec'd
rank never imports it).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from ipympi.launch import pymain

ROOT = Path(__file__).resolve().parent.parent
FORKED = "ipympi.launch.forker"

FACTS = """
import atexit, json, os, signal, sys
from mpi4py import MPI

def facts(**extra):
    handlers = {}
    for name in ("SIGINT", "SIGTERM", "SIGHUP", "SIGCHLD", "SIGPIPE", "SIGXFSZ", "SIGUSR1"):
        h = signal.getsignal(getattr(signal, name))
        handlers[name] = getattr(h, "__name__", None) or getattr(h, "name", str(h))
    return dict(
        rank=MPI.COMM_WORLD.Get_rank(), size=MPI.COMM_WORLD.Get_size(),
        argv=sys.argv, path0=sys.path[0], cwd=os.getcwd(), name=__name__,
        file=globals().get("__file__"), var=os.environ.get("MY_VAR"),
        ipympi_vars=sorted(k for k in os.environ
                           if k.startswith("IPYMPI_") and k != "IPYMPI_FORK_RANKS"),
        flags=list(sys.flags), orig_argv=getattr(sys, "orig_argv", [""])[1:], handlers=handlers,
        forked="ipympi.launch.forker" in sys.modules,
        main_is_module=sys.modules["__main__"].__dict__ is globals(), **extra,
    )
"""


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("IPYMPI_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    env.update(extra)
    return env


def launch(
    tmp_path: Path,
    program: list[str],
    n: int = 2,
    *,
    fork: bool = True,
    stdin: str | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 30,
) -> subprocess.CompletedProcess[str]:
    full = _env(MY_VAR="my value", **(env or {}))
    if not fork:
        full["IPYMPI_FORK_RANKS"] = "0"
    cmd = [sys.executable, "-m", "ipympi.run", "-n", str(n), "--timeout", str(timeout), *program]
    return subprocess.run(
        cmd,
        input=stdin,
        stdin=None if stdin is not None else subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout + 15,
        env=full,
        cwd=str(tmp_path),
    )


def reports(proc: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    """The ranks' ``FACTS {...}`` lines, in rank order."""
    detail = f"exit {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
    found = [json.loads(line[6:]) for line in proc.stdout.splitlines() if line.startswith("FACTS ")]
    assert found, detail
    return sorted(found, key=lambda fact: fact["rank"])


def both(tmp_path: Path, program: list[str], **options: Any) -> list[list[dict[str, Any]]]:
    """The facts of a forked run and of an exec'd one, ``forked`` checked and dropped."""
    runs = []
    for fork in (True, False):
        proc = launch(tmp_path, program, fork=fork, **options)
        assert proc.returncode == 0, f"fork={fork}\n{proc.stdout}\n{proc.stderr}"
        facts = reports(proc)
        assert [fact.pop("forked") for fact in facts] == [fork] * len(facts), facts
        runs.append(facts)
    for forked, execd in zip(*runs):
        differ = {
            key: (forked[key], execd.get(key)) for key in forked if forked[key] != execd.get(key)
        }
        assert not differ, differ
    return runs


def write(tmp_path: Path, name: str, source: str) -> Path:
    path = tmp_path / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(FACTS + textwrap.dedent(source))
    return path


def test_a_script_sees_what_a_new_interpreter_sees(tmp_path: Path) -> None:
    script = write(
        tmp_path,
        "sub/prog.py",
        """
        if __name__ == "__main__":
            print("FACTS " + json.dumps(facts()), flush=True)
        """,
    )
    forked, execd = both(tmp_path, [sys.executable, str(script), "a", "b c"])
    assert forked == execd
    first = forked[0]
    assert first["argv"] == [str(script), "a", "b c"]
    assert first["path0"] == str((tmp_path / "sub").resolve())
    assert first["cwd"] == str(tmp_path)
    assert (first["name"], first["file"], first["main_is_module"]) == (
        "__main__",
        str(script),
        True,
    )
    assert first["var"] == "my value"
    assert "IPYMPI_RANK" not in first["ipympi_vars"]  # consumed by Init, as when exec'd
    assert first["handlers"]["SIGINT"] == "default_int_handler"
    assert first["handlers"]["SIGPIPE"] == "SIG_IGN"
    assert first["handlers"]["SIGTERM"] == "SIG_DFL"
    assert [fact["rank"] for fact in forked] == [0, 1]


def test_module_and_code_programs(tmp_path: Path) -> None:
    write(tmp_path, "pkg/__init__.py", "")
    write(tmp_path, "pkg/tool.py", 'print("FACTS " + json.dumps(facts(module=__spec__.name)))')
    forked, execd = both(tmp_path, [sys.executable, "-m", "pkg.tool", "x"])
    assert forked == execd
    assert forked[0]["argv"] == [str(tmp_path / "pkg" / "tool.py"), "x"]
    assert forked[0]["path0"] == str(tmp_path) and forked[0]["module"] == "pkg.tool"
    code = FACTS + 'print("FACTS " + json.dumps(facts()))'
    forked, execd = both(tmp_path, [sys.executable, "-c", code, "y"])
    assert forked == execd
    assert (forked[0]["argv"], forked[0]["path0"]) == (["-c", "y"], "")


def test_python_m_mpi4py_and_futures(tmp_path: Path) -> None:
    script = write(tmp_path, "prog.py", 'print("FACTS " + json.dumps(facts()), flush=True)')
    forked, execd = both(tmp_path, [sys.executable, "-m", "mpi4py", str(script), "z"])
    assert forked == execd and forked[0]["argv"] == [str(script), "z"]
    futures = tmp_path / "pool.py"
    futures.write_text(
        textwrap.dedent(
            """
            import sys
            from mpi4py.futures import MPIPoolExecutor

            def square(x):
                return x * x

            if __name__ == "__main__":
                with MPIPoolExecutor() as pool:
                    print("squares", list(pool.map(square, range(5))), "forked",
                          "ipympi.launch.forker" in sys.modules, flush=True)
            """
        )
    )
    proc = launch(tmp_path, [sys.executable, "-m", "mpi4py.futures", str(futures)], n=3)
    assert proc.returncode == 0, proc.stderr
    assert "squares [0, 1, 4, 9, 16] forked True" in proc.stdout, proc.stdout


def test_classes_of_main_pickle_between_ranks(tmp_path: Path) -> None:
    script = tmp_path / "points.py"
    script.write_text(
        textwrap.dedent(
            """
            from mpi4py import MPI

            class Point:
                def __init__(self, x):
                    self.x = x

            comm = MPI.COMM_WORLD
            if comm.rank == 0:
                comm.send(Point(41), dest=1)
            else:
                got = comm.recv(source=0)
                print("got", type(got).__module__, type(got) is Point, got.x + 1, flush=True)
            """
        )
    )
    proc = launch(tmp_path, [sys.executable, str(script)])
    assert proc.returncode == 0, proc.stderr
    assert "got __main__ True 42" in proc.stdout


def test_rank_0_reads_stdin_and_the_others_read_nothing(tmp_path: Path) -> None:
    script = tmp_path / "read.py"
    script.write_text(
        "import sys\nfrom mpi4py import MPI\n"
        "print('rank', MPI.COMM_WORLD.rank, 'read', repr(sys.stdin.read()), flush=True)\n"
    )
    proc = launch(tmp_path, [sys.executable, str(script)], stdin="line one\nline two\n")
    assert proc.returncode == 0, proc.stderr
    assert "rank 0 read 'line one\\nline two\\n'" in proc.stdout
    assert "rank 1 read ''" in proc.stdout


@pytest.mark.parametrize(
    ("ending", "status", "said"),
    [
        ("sys.exit(3)", 3, ""),
        ("sys.exit('leaving now')", 1, "leaving now"),
        ("raise ValueError('boom')", 1, "ValueError: boom"),
        ("os._exit(4)", 4, ""),
        ("raise SystemExit", 0, ""),
    ],
)
def test_exit_statuses(tmp_path: Path, ending: str, status: int, said: str) -> None:
    script = tmp_path / "end.py"
    script.write_text(
        f"import os, sys\nfrom mpi4py import MPI\nif MPI.COMM_WORLD.rank == 1:\n    {ending}\n"
    )
    for fork in (True, False):
        proc = launch(tmp_path, [sys.executable, str(script)], fork=fork)
        assert proc.returncode == status, f"fork={fork}\n{proc.stderr}"
        assert said in proc.stderr, proc.stderr


def test_atexit_handlers_and_buffered_output_are_kept(tmp_path: Path) -> None:
    script = tmp_path / "bye.py"
    script.write_text(
        textwrap.dedent(
            """
            import atexit, sys, threading, time
            from mpi4py import MPI

            rank = MPI.COMM_WORLD.rank
            atexit.register(lambda: print(f"atexit {rank}", flush=True))
            sys.stdout = open(sys.stdout.fileno(), "w", buffering=4096, closefd=False)
            print(f"buffered {rank}", end="")

            def late():
                time.sleep(0.2)
                sys.__stdout__.write(f"thread {rank}\\n")

            threading.Thread(target=late).start()
            """
        )
    )
    proc = launch(tmp_path, [sys.executable, str(script)])
    assert proc.returncode == 0, proc.stderr
    for rank in (0, 1):
        for what in (f"buffered {rank}", f"atexit {rank}", f"thread {rank}"):
            assert what in proc.stdout, proc.stdout


def test_keyboard_interrupt_ends_the_rank_by_sigint(tmp_path: Path) -> None:
    script = tmp_path / "ctrl_c.py"
    script.write_text(
        "from mpi4py import MPI\nif MPI.COMM_WORLD.rank == 1:\n    raise KeyboardInterrupt\n"
    )
    statuses = []
    for fork in (True, False):
        proc = launch(tmp_path, [sys.executable, str(script)], fork=fork)
        assert "KeyboardInterrupt" in proc.stderr, proc.stderr
        statuses.append(proc.returncode)
    assert statuses == [128 + signal.SIGINT] * 2


@pytest.mark.parametrize("option", [["-O"], ["-X", "dev"], ["-u"], ["-I"], ["-E"]])
def test_interpreter_options_start_a_new_interpreter(tmp_path: Path, option: list[str]) -> None:
    script = write(tmp_path, "opt.py", 'print("FACTS " + json.dumps(facts()), flush=True)')
    proc = launch(tmp_path, [sys.executable, *option, str(script)])
    facts = reports(proc)
    assert [fact["forked"] for fact in facts] == [False, False]
    if option == ["-O"]:
        assert facts[0]["flags"][list(sys.flags.__match_args__).index("optimize")] == 1


def test_another_python_and_other_programs_are_executed(tmp_path: Path) -> None:
    other = tmp_path / "bin" / "python3"
    other.parent.mkdir()
    other.symlink_to(sys.executable)  # same binary, another folder: as a venv's python
    script = tmp_path / "which.py"
    script.write_text("import sys\nprint('forked', 'ipympi.launch.forker' in sys.modules)\n")
    proc = launch(tmp_path, [str(other), str(script)])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["forked False"] * 2, proc.stdout
    proc = launch(tmp_path, [sys.executable, str(script)])
    assert proc.stdout.splitlines() == ["forked True"] * 2, proc.stdout
    proc = launch(tmp_path, ["hostname"])
    assert proc.returncode == 0 and len(proc.stdout.splitlines()) == 2, proc.stderr


def test_a_missing_script_fails_as_python_does(tmp_path: Path) -> None:
    for fork in (True, False):
        proc = launch(tmp_path, [sys.executable, str(tmp_path / "nope.py")], fork=fork)
        assert proc.returncode == 2, proc.stderr
        assert "can't open file" in proc.stderr and "nope.py" in proc.stderr


# -- deciding how to start a rank (no processes) ----------------------------------------
def test_plan_forks_only_this_interpreter_without_options(tmp_path: Path) -> None:
    me = sys.executable
    cases = {
        ("prog.py", "-O"): ("script", "prog.py", ["prog.py", "-O"]),
        ("-m", "mod", "a"): ("module", "mod", ["-m", "a"]),
        ("-c", "pass"): ("code", "pass", ["-c"]),
    }
    for args, (kind, target, argv) in cases.items():
        found = pymain.plan([me, *args])
        assert found is not None
        assert (found["kind"], found["target"], found["argv"]) == (kind, target, argv)
        assert found["orig_argv"] == [me, *args]
    for argv in (
        [me],
        [me, "-"],
        [me, "-O", "prog.py"],
        [me, "-u", "prog.py"],
        [me, "-m"],
        ["hostname"],
        [str(tmp_path / "python"), "prog.py"],
        [me, str(tmp_path)],  # a folder with __main__.py
    ):
        assert pymain.plan(argv) is None, argv
    beside = Path(me).parent
    names = [p.name for p in beside.iterdir() if os.path.realpath(p) == os.path.realpath(me)]
    for name in names:
        assert pymain.same_interpreter(str(beside / name)), name


def test_a_launcher_without_stdin_starts_its_ranks(tmp_path: Path) -> None:
    script = tmp_path / "read.py"
    script.write_text("import sys\nprint('read', repr(sys.stdin.read()), flush=True)\n")
    cmd = [sys.executable, "-m", "ipympi.run", "-n", "2", "--timeout", "20", str(script)]
    proc = subprocess.run(
        ["/bin/sh", "-c", 'exec "$@" <&-', "sh", *cmd],
        capture_output=True,
        text=True,
        timeout=40,
        env=_env(),
        cwd=str(tmp_path),
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["read ''"] * 2, proc.stdout


@pytest.mark.parametrize("fork", [True, False], ids=["forked", "exec"])
def test_a_plain_program_s_traceback_starts_in_the_program(tmp_path: Path, fork: bool) -> None:
    (tmp_path / "bad.py").write_text("x = 1\nx = x / 0\n")
    result = launch(tmp_path, ["bad.py"], n=1, fork=fork)
    assert result.returncode == 1, result.stderr
    lines = result.stderr.splitlines()
    start = lines.index("Traceback (most recent call last):")
    where = f'  File "{tmp_path / "bad.py"}", line 2, in <module>'
    assert lines[start + 1] == where, result.stderr
    assert "ZeroDivisionError: division by zero" in result.stderr
    assert "pymain" not in result.stderr, result.stderr


def test_reading_the_command_line_imports_neither_pyzmq_nor_the_launcher() -> None:
    """``ipympi.run`` starts a forked job's template before it imports the launcher's
    machinery, so that the template's import of MPI and the launcher's imports overlap:
    what runs before the template starts imports none of it."""
    heavy = ("zmq", "ipympi.launch.launcher", "ipympi.launch.agents", "ipympi.MPI", "numpy")
    code = f"import sys, ipympi.run; print([m for m in {heavy!r} if m in sys.modules])"
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=_env()
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


PARENT = "import os\nfrom mpi4py import MPI\nprint(MPI.COMM_WORLD.Get_rank(), os.getppid())\n"


def _parents(argv: list[str], early: Any) -> set[int]:
    """Run ``argv`` on 2 ranks as a Job given ``early``; the pids of the ranks' parents."""
    import io

    from ipympi.launch.basics import job_environment
    from ipympi.launch.launcher import Job

    out, err = io.BytesIO(), io.BytesIO()
    with Job(argv, 2, env=job_environment(_env()), stdout=out, stderr=err, early=early) as job:
        job.start()
        assert job.wait(30) == 0, err.getvalue()
    lines = out.getvalue().decode().split("\n")
    assert sorted(line.split()[0] for line in lines if line) == ["0", "1"]
    return {int(line.split()[1]) for line in lines if line}


def test_a_job_forks_from_the_template_started_for_it(tmp_path: Path) -> None:
    from ipympi.launch import template
    from ipympi.launch.basics import job_environment

    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    argv = [sys.executable, str(script)]
    early = template.start(argv, 2, job_environment(_env()), None)
    assert early is not None
    assert _parents(argv, early) == {early.process.proc.pid}
    assert early.process.proc.poll() is not None  # closed with the job

    other = template.start([sys.executable, "-c", "pass"], 2, job_environment(_env()), None)
    assert other is not None
    parents = _parents(argv, other)  # started for another program: closed, not used
    assert other.process.proc.poll() is not None
    assert len(parents) == 1 and other.process.proc.pid not in parents


def test_the_template_imports_numpy_for_programs_that_may_move_buffers(tmp_path: Path) -> None:
    """A program whose text names no buffer call (nor numpy) gets ranks forked from a
    template that imported only what starting MPI needs; others get numpy imported once,
    in the template, rather than by every rank."""
    show = "import sys\nfrom mpi4py import MPI\n"
    show += "print(any(m.startswith('nump') for m in sys.modules))\n"
    plain, buffers = tmp_path / "plain.py", tmp_path / "buffers.py"
    plain.write_text(show)
    buffers.write_text(show + "if False:\n    MPI.COMM_WORLD.Bcast(bytearray(8))\n")
    for script, preloaded in ((plain, False), (buffers, True)):
        result = launch(tmp_path, [sys.executable, str(script)], 2)
        assert result.returncode == 0, result.stderr
        assert result.stdout.split() == [str(preloaded)] * 2, script


def test_what_tells_a_program_that_may_move_buffers(tmp_path: Path) -> None:
    from ipympi.launch.template import needs_everything

    def code(text: str) -> pymain.Plan:
        return {"kind": "code", "target": text, "argv": ["-c"], "orig_argv": []}

    assert not needs_everything(code("from mpi4py import MPI\nprint(MPI.COMM_WORLD.rank)"))
    assert not needs_everything(code("c = MPI.COMM_WORLD\nc.send(1, 0)\nc.allreduce(2)"))
    for text in ("import numpy as np", "c.Send(b, 1)", "c.Allreduce(a, b)", "c.Bcast(x)",
                 "MPI.Win.Create(m, comm=c)", "MPI.File.Open(c, 'f')",
                 "MPI.DOUBLE.Create_vector(2, 1, 2)"):  # fmt: skip
        assert needs_everything(code(text)), text
    assert needs_everything({"kind": "module", "target": "pkg.main", "argv": [], "orig_argv": []})
    script = tmp_path / "prog.py"
    script.write_text("from mpi4py import MPI\nprint(MPI.COMM_WORLD.Get_rank())\n")
    spec = {"kind": "script", "target": str(script), "argv": [], "orig_argv": []}
    assert not needs_everything(spec)
    script.write_text("import numpy\n")
    assert needs_everything(spec)
