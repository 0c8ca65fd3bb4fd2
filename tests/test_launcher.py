"""The launcher with real processes: fake ranks speak the control protocol over pyzmq.

Each fake rank runs ``fake_rank.py`` (written into ``tmp_path``) with one action
per rank, e.g. ``0=sleep 2=exit:3 *=print:10``. Ranks that end the job on
purpose first wait until every other rank has announced itself (``PID <pid>``
on stdout, plus a ``ready-<rank>`` file), so every pid is known to the test,
which then checks that no process is left behind.
"""

from __future__ import annotations

import importlib.util
import io
import json
import os
import re
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import alive

from ipympi.launch.launcher import Job, rank_environment
from ipympi.run import _split, program_argv

_SPEC = importlib.util.find_spec("ipympi")
assert _SPEC is not None and _SPEC.submodule_search_locations
ROOT = str(Path(next(iter(_SPEC.submodule_search_locations))).parent)
RUN_TIMEOUT = 30

FAKE_RANK = r"""
import json, os, signal, socket, subprocess, sys, threading, time
import zmq
from ipympi.core import control as _control

rank, size = int(os.environ["IPYMPI_RANK"]), int(os.environ["IPYMPI_SIZE"])
ready_dir = os.environ["FAKE_DIR"]
actions = dict(arg.split("=", 1) for arg in sys.argv[1:])
kind, *params = actions.get(str(rank), actions.get("*", "exit:0")).split(":", 2)

ctx = zmq.Context()
sock = ctx.socket(zmq.DEALER)
sock.setsockopt(zmq.IDENTITY, b"rank%d" % rank)
sock.setsockopt(zmq.LINGER, 2000)
sock.connect(os.environ["IPYMPI_CTL"])


KEY = _control.session_key(os.environ["IPYMPI_KEY"])


def send(**msg):
    sock.send(_control.encode(msg, KEY))


send(type="hello", rank=rank, pid=os.getpid(), host=socket.gethostname())


def ready():
    # Announce the pid first: others act once every ready file exists.
    print(f"PID {os.getpid()} rank {rank}", flush=True)
    open(os.path.join(ready_dir, f"ready-{rank}"), "w").close()


def wait_for_others():
    deadline = time.monotonic() + 20
    while sum(f.startswith("ready-") for f in os.listdir(ready_dir)) < size - 1:
        if time.monotonic() > deadline:
            sys.exit("fake rank: the other ranks never got ready")
        time.sleep(0.01)


def sleep_forever():
    # Short naps: a signal whose handler runs just before time.sleep enters the system
    # call does not interrupt that sleep (CPython checks for signals only between
    # calls), so a long nap could outlast the launcher's grace after SIGINT.
    while True:
        time.sleep(0.05)


def answer_queries():
    t0 = time.monotonic()
    while True:
        if _control.decode(sock.recv(), KEY)["type"] == "query":
            send(type="state", rank=rank, pid=os.getpid(), host=socket.gethostname(),
                 state="blocked", call="Recv", comm="COMM_WORLD", peer=0, tag=7,
                 since=round(time.monotonic() - t0, 3), where="prog.py:5")


if kind == "print":
    for i in range(int(params[0])):
        print(f"out {rank} {i}")
        print(f"err {rank} {i}", file=sys.stderr)
    sys.stdout.write(f"tail {rank}")
    sys.stderr.write(f"etail {rank}")
elif kind == "exit":
    wait_for_others()
    sys.exit(int(params[0]))
elif kind == "kill":
    wait_for_others()
    os.kill(os.getpid(), signal.SIGKILL)
elif kind == "abort":
    wait_for_others()
    send(type="abort", rank=rank, code=int(params[0]), reason=params[1])
    sleep_forever()
elif kind == "sleep":
    ready()
    sleep_forever()
elif kind == "stubborn":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    ready()
    sleep_forever()
elif kind == "child":
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    print(f"PID {child.pid} child of {rank}", flush=True)
    ready()
    sleep_forever()
elif kind == "blocked":
    threading.Thread(target=answer_queries, daemon=True).start()
    ready()
    sleep_forever()
elif kind == "interruptible":
    try:
        ready()
        sleep_forever()
    except KeyboardInterrupt:
        print(f"rank {rank} interrupted", flush=True)
        sys.exit(1)
elif kind == "env":
    names = ("IPYMPI_", "PYTHONUNBUFFERED", "OPENBLAS_", "OMP_", "MKL_")
    env = {k: v for k, v in os.environ.items() if k.startswith(names)}
    mode = os.stat(env["IPYMPI_SESSION_DIR"]).st_mode & 0o777
    print(json.dumps({"env": env, "mode": mode}), flush=True)
"""


# -- helpers ------------------------------------------------------------------------
@pytest.fixture
def fake(tmp_path: Path) -> Path:
    script = tmp_path / "fake_rank.py"
    script.write_text(FAKE_RANK)
    return script


def launcher_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH")) if p)
    env["FAKE_DIR"] = str(tmp_path)
    env.update(extra)
    return env


def launch(
    tmp_path: Path, *args: str, module: str = "ipympi.run", env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", *module.split(), *args],
        env=env or launcher_env(tmp_path),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
    )


def pids(output: str) -> list[int]:
    return [int(pid) for pid in re.findall(r"^PID (\d+) ", output, re.MULTILINE)]


def rank_pids(output: str) -> dict[int, int]:
    found = re.findall(r"^PID (\d+) rank (\d+)$", output, re.MULTILINE)
    return {int(rank): int(pid) for pid, rank in found}


def assert_all_ended(pid_list: list[int], timeout: float = 3.0) -> None:
    assert pid_list
    deadline = time.monotonic() + timeout
    while any(alive(pid) for pid in pid_list):
        assert time.monotonic() < deadline, [pid for pid in pid_list if alive(pid)]
        time.sleep(0.02)


def read_until(proc: subprocess.Popen[bytes], stream: str, needle: bytes, count: int) -> bytes:
    """Read ``proc.<stream>`` until ``needle`` has appeared ``count`` times (10 s at most)."""
    pipe = getattr(proc, stream)
    data = b""
    deadline = time.monotonic() + 10
    with selectors.DefaultSelector() as selector:
        selector.register(pipe, selectors.EVENT_READ)
        while data.count(needle) < count:
            left = deadline - time.monotonic()
            assert left > 0, f"timed out waiting for {needle!r} in {data!r}"
            if selector.select(left):
                chunk = os.read(pipe.fileno(), 65536)
                assert chunk, f"EOF waiting for {needle!r} in {data!r}"
                data += chunk
    return data


@pytest.fixture
def popen_launcher(tmp_path: Path, fake: Path):
    """Start the launcher as a Popen (for signals); kill it and its ranks at the end."""
    procs: list[subprocess.Popen[bytes]] = []

    def start(*args: str) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ipympi.run", *args],
            env=launcher_env(tmp_path),
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()  # its ranks die with it (PR_SET_PDEATHSIG)
        proc.communicate(timeout=RUN_TIMEOUT)


# -- output ---------------------------------------------------------------------------
def test_output_of_every_rank_arrives_once(tmp_path: Path, fake: Path) -> None:
    lines = 300
    result = launch(tmp_path, "-n", "4", str(fake), f"*=print:{lines}")
    assert result.returncode == 0, result.stderr
    for stream, word, tail in ((result.stdout, "out", "tail"), (result.stderr, "err", "etail")):
        for rank in range(4):
            # a rank's last line has no newline: the next rank's line may follow it
            got = re.findall(rf"{word} {rank} (\d+)$", stream, re.MULTILINE)
            assert [int(i) for i in got] == list(range(lines))  # all, once, in order
            assert stream.count(f"{tail} {rank}") == 1  # the last line without newline
    assert len(result.stdout.splitlines()) >= 4 * lines


def test_tag_output_prefixes_every_line_of_stdout_and_stderr(tmp_path: Path, fake: Path) -> None:
    result = launch(tmp_path, "-n", "3", "--tag-output", str(fake), "*=print:20")
    assert result.returncode == 0, result.stderr
    for stream, word, tail in ((result.stdout, "out", "tail"), (result.stderr, "err", "etail")):
        lines = stream.splitlines()
        assert len(lines) == 3 * 21
        for line in lines:
            m = re.fullmatch(rf"\[(\d)\] (?:{word} (\d) \d+|{tail} (\d))", line)
            assert m, line
            assert m.group(1) == (m.group(2) or m.group(3))


# -- failures end the job ------------------------------------------------------------------
def test_first_failing_status_is_the_exit_status_and_others_are_ended(
    tmp_path: Path, fake: Path
) -> None:
    start = time.monotonic()
    result = launch(tmp_path, "-n", "4", str(fake), "0=sleep", "1=child", "2=exit:3", "3=stubborn")
    assert result.returncode == 3, result.stderr
    assert "ipympi.run: rank 2 exited with status 3; ending the other ranks" in result.stderr
    assert len(pids(result.stdout)) == 4  # ranks 0, 1, 3 and rank 1's child
    assert_all_ended(pids(result.stdout))
    assert time.monotonic() - start >= 2.0  # rank 3 ignored SIGTERM: SIGKILL after the grace


def test_death_by_signal_gives_128_plus_n(tmp_path: Path, fake: Path) -> None:
    result = launch(tmp_path, "-n", "2", str(fake), "0=sleep", "1=kill")
    assert result.returncode == 128 + signal.SIGKILL, result.stderr
    assert "rank 1 was killed by signal SIGKILL; ending the other ranks" in result.stderr
    assert_all_ended(pids(result.stdout))


@pytest.mark.parametrize(
    ("code", "reason", "status", "line"),
    [
        ("7", "MPI_Abort(COMM_WORLD, 7)", 7, "rank 1 called Abort with error code 7: "),
        ("0", "MPI_Abort(COMM_WORLD, 0)", 0, "rank 1 called Abort with error code 0: "),
        ("271", "Recv: ERR_TRUNCATE: message truncated", 15, "rank 1: Recv: ERR_TRUNCATE: "),
    ],
)
def test_abort_ends_the_job_with_its_code(
    tmp_path: Path, fake: Path, code: str, reason: str, status: int, line: str
) -> None:
    result = launch(tmp_path, "-n", "3", str(fake), f"1=abort:{code}:{reason}", "*=sleep")
    assert result.returncode == status, result.stderr
    assert f"ipympi.run: {line}" in result.stderr
    assert reason in result.stderr
    assert "exited with status" not in result.stderr  # the abort is the one report
    assert len(pids(result.stdout)) == 2
    assert_all_ended(pids(result.stdout))


def test_timeout_reports_every_rank_then_exits_124(tmp_path: Path, fake: Path) -> None:
    result = launch(
        tmp_path, "-n", "3", "--timeout", "2", str(fake), "0=blocked", "1=sleep", "2=exit:0"
    )
    assert result.returncode == 124, result.stderr
    p0, p1 = rank_pids(result.stdout)[0], rank_pids(result.stdout)[1]
    err = result.stderr
    assert "ipympi.run: timeout after 2 s; rank states:\n" in err
    assert re.search(
        rf"^  rank 0 \(pid {p0}\): blocked in Recv\(source=0, tag=7\) on COMM_WORLD"
        r" for \d+\.\d s at prog\.py:5$",
        err,
        re.MULTILINE,
    ), err
    assert f"\n  rank 1 (pid {p1}): no answer\n" in err
    assert re.search(r"^  rank 2 \(pid \d+\): exited with status 0$", err, re.MULTILINE), err
    assert_all_ended([p0, p1])


# -- signals to the launcher ----------------------------------------------------------------
def test_ctrl_c_reaches_every_rank_and_exits_130(popen_launcher, fake: Path) -> None:
    proc = popen_launcher("-n", "2", str(fake), "*=interruptible")
    out = read_until(proc, "stdout", b"PID ", 2)
    proc.send_signal(signal.SIGINT)
    rest, err = proc.communicate(timeout=RUN_TIMEOUT)
    out += rest
    assert proc.returncode == 130, err
    assert b"rank 0 interrupted" in out and b"rank 1 interrupted" in out
    assert b"ipympi.run: received SIGINT; ending the ranks" in err
    assert_all_ended(pids(out.decode()))


def test_second_ctrl_c_kills_at_once(popen_launcher, fake: Path) -> None:
    proc = popen_launcher("-n", "2", str(fake), "0=stubborn", "1=child")
    out = read_until(proc, "stdout", b"PID ", 3)
    proc.send_signal(signal.SIGINT)
    read_until(proc, "stderr", b"received SIGINT", 1)
    second = time.monotonic()
    proc.send_signal(signal.SIGINT)
    rest, err = proc.communicate(timeout=RUN_TIMEOUT)
    assert time.monotonic() - second < 1.5  # not the 2 s grace
    assert proc.returncode == 130, err
    assert_all_ended(pids((out + rest).decode()))


def test_sigterm_to_the_launcher_exits_143(popen_launcher, fake: Path) -> None:
    proc = popen_launcher("-n", "1", str(fake), "*=interruptible")
    out = read_until(proc, "stdout", b"PID ", 1)
    proc.send_signal(signal.SIGTERM)
    rest, err = proc.communicate(timeout=RUN_TIMEOUT)
    assert proc.returncode == 143, err
    assert b"rank 0 interrupted" in rest  # SIGINT first, so the rank can clean up
    assert_all_ended(pids(out.decode()))


def test_a_killed_launcher_takes_its_ranks_along(popen_launcher, fake: Path) -> None:
    proc = popen_launcher("-n", "2", str(fake), "*=sleep")
    out = read_until(proc, "stdout", b"PID ", 2)
    proc.kill()
    proc.communicate(timeout=RUN_TIMEOUT)
    assert_all_ended(pids(out.decode()))


# -- environment and session ------------------------------------------------------------------
def test_ranks_get_their_environment_and_a_private_session(tmp_path: Path, fake: Path) -> None:
    result = launch(tmp_path, "-n", "2", str(fake), "*=env")
    assert result.returncode == 0, result.stderr
    reports = [json.loads(line) for line in result.stdout.splitlines()]
    envs = sorted((r["env"] for r in reports), key=lambda env: env["IPYMPI_RANK"])
    assert [env["IPYMPI_RANK"] for env in envs] == ["0", "1"]
    session = envs[0]["IPYMPI_SESSION_DIR"]
    for env in envs:
        assert env["IPYMPI_SIZE"] == "2"
        assert env["IPYMPI_SESSION_DIR"] == session
        assert env["IPYMPI_CTL"] == f"ipc://{session}/ctl"
        assert re.fullmatch(r"[0-9a-f]{32}", env["IPYMPI_KEY"])
        assert env["IPYMPI_KEY"] == envs[0]["IPYMPI_KEY"]
        assert env["PYTHONUNBUFFERED"] == "1"
    assert [r["mode"] for r in reports] == [0o700, 0o700]
    assert os.path.basename(session).startswith("ipympi-")
    assert not os.path.exists(session)  # removed at exit


def test_thread_pools_default_to_one_thread_when_ranks_fill_the_cores() -> None:
    base = {"OMP_NUM_THREADS": "3", "PATH": "/bin"}
    env = rank_environment(base, 1, 4, "/s", "k" * 32, cpus=4)
    assert env["OPENBLAS_NUM_THREADS"] == env["MKL_NUM_THREADS"] == "1"
    assert env["OMP_NUM_THREADS"] == "3"  # the user's choice stays
    assert (env["IPYMPI_RANK"], env["IPYMPI_SIZE"], env["PATH"]) == ("1", "4", "/bin")
    spare = rank_environment(base, 1, 4, "/s", "k" * 32, cpus=8)
    assert "OPENBLAS_NUM_THREADS" not in spare and "MKL_NUM_THREADS" not in spare


# -- command line ---------------------------------------------------------------------------------
def test_program_forms(tmp_path: Path) -> None:
    (tmp_path / "prog.py").write_text("import sys; print('py', sys.executable, sys.argv[1:])\n")
    (tmp_path / "fakemod.py").write_text("import sys; print('mod', sys.argv[1:])\n")
    py = launch(tmp_path, "-n", "2", "prog.py", "a", "-b")
    assert py.stdout.splitlines() == [f"py {sys.executable} ['a', '-b']"] * 2, py.stderr
    mod = launch(tmp_path, "-n", "2", "-m", "fakemod", "--x")
    assert mod.stdout.splitlines() == ["mod ['--x']"] * 2, mod.stderr
    code = launch(tmp_path, "-np", "2", "-c", "import sys; print('c', sys.argv[1:])", "-n", "5")
    assert code.stdout.splitlines() == ["c ['-n', '5']"] * 2, code.stderr
    exe = launch(tmp_path, "--np=2", "--", sys.executable, "prog.py", "z")
    assert exe.stdout.splitlines() == [f"py {sys.executable} ['z']"] * 2, exe.stderr
    echo = launch(tmp_path, "-n", "3", "/bin/echo", "hi", "there")
    assert echo.stdout.splitlines() == ["hi there"] * 3, echo.stderr


def test_split_and_program_argv() -> None:
    assert _split(["-n", "2", "--tag-output", "x.py", "-n", "3"]) == (
        ["-n", "2", "--tag-output"],
        ["x.py", "-n", "3"],
    )
    assert _split(["-n4", "-m", "pkg", "-c"]) == (["-n4"], ["-m", "pkg", "-c"])
    assert _split(["--timeout", "5", "--", "-weird"]) == (["--timeout", "5"], ["-weird"])
    assert program_argv(["x.py", "1"]) == [sys.executable, "x.py", "1"]
    assert program_argv(["-c", "pass"]) == [sys.executable, "-c", "pass"]
    assert program_argv(["/bin/true"]) == ["/bin/true"]
    for bad in ([], ["-m"], ["-c"]):
        with pytest.raises(ValueError):
            program_argv(bad)


def test_bad_command_lines(tmp_path: Path) -> None:
    missing = launch(tmp_path, "-n", "2", "no-such-program-here")
    assert missing.returncode == 127
    assert "ipympi.run: cannot run 'no-such-program-here'" in missing.stderr
    for args in (["-n", "2"], ["-n", "0", "x.py"], ["--timeout", "-1", "x.py"], ["-m"]):
        usage = launch(tmp_path, *args)
        assert usage.returncode == 2, args
        assert "usage: ipympi.run" in usage.stderr


def test_ipympi_run_is_python_m_ipympi_run(tmp_path: Path) -> None:
    args = ("-n", "2", "--tag-output", "-c", "import sys; print('x'); sys.exit(5)")
    one = launch(tmp_path, *args, module="ipympi run")
    two = launch(tmp_path, *args, module="ipympi.run")
    assert one.returncode == two.returncode == 5
    assert sorted(one.stdout.splitlines()) == sorted(two.stdout.splitlines()) == ["[0] x", "[1] x"]
    helped = launch(tmp_path, "run", "--help", module="ipympi")
    assert helped.returncode == 0 and "usage: ipympi run" in helped.stdout


def test_ipympi_lists_subcommands_and_version(tmp_path: Path) -> None:
    helped = launch(tmp_path, "--help", module="ipympi")
    assert helped.returncode == 0
    assert re.search(r"^  run\s+run an MPI program", helped.stdout, re.MULTILINE)
    version = launch(tmp_path, "--version", module="ipympi")
    assert version.returncode == 0 and version.stdout.startswith("ipympi ")
    unknown = launch(tmp_path, "frobnicate", module="ipympi")
    assert unknown.returncode == 2 and "unknown subcommand" in unknown.stderr


# -- the Job API, in process ---------------------------------------------------------------------
def wait_for_output(job: Job, out: io.BytesIO, needle: bytes, count: int) -> None:
    deadline = time.monotonic() + 10
    while out.getvalue().count(needle) < count:
        assert time.monotonic() < deadline, out.getvalue()
        with pytest.raises(subprocess.TimeoutExpired):
            job.wait(timeout=0.05)


def test_job_api_queries_states_and_ends_on_failure(tmp_path: Path, fake: Path) -> None:
    out, err = io.BytesIO(), io.BytesIO()
    argv = [sys.executable, str(fake), "0=blocked", "1=sleep"]
    with Job(argv, 2, env=launcher_env(tmp_path), stdout=out, stderr=err) as job:
        job.start()
        assert job.session_dir and oct(os.stat(job.session_dir).st_mode & 0o777) == "0o700"
        wait_for_output(job, out, b"PID ", 2)
        states = job.query_states(timeout=0.5)
        assert [s["rank"] for s in states] == [0, 1]
        assert states[0]["state"] == "blocked" and states[0]["call"] == "Recv"
        assert states[1]["state"] == "no answer"
        assert job.poll() is None
        rank1 = job.ranks[1]
        assert rank1.poll() is None
        rank1.kill()
        assert job.wait(timeout=10) == 128 + signal.SIGKILL
        assert b"rank 1 was killed by signal SIGKILL" in err.getvalue()
        assert all(rank.poll() is not None for rank in job.ranks)
        assert job.query_states(0.1)[0]["state"] == "exited"
    assert not os.path.exists(job.session_dir)
    assert_all_ended(pids(out.getvalue().decode()))


def test_job_stop_request_interrupts_the_ranks(tmp_path: Path, fake: Path) -> None:
    out, err = io.BytesIO(), io.BytesIO()
    argv = [sys.executable, str(fake), "*=interruptible"]
    with Job(argv, 2, env=launcher_env(tmp_path), stdout=out, stderr=err) as job:
        job.start()
        wait_for_output(job, out, b"PID ", 2)
        job.request_stop(signal.SIGINT)
        assert job.wait(timeout=10) == 130
    assert out.getvalue().count(b"interrupted") == 2
    assert_all_ended(pids(out.getvalue().decode()))


def test_job_wait_after_terminate_gives_the_ranks_status(tmp_path: Path, fake: Path) -> None:
    out, err = io.BytesIO(), io.BytesIO()
    argv = [sys.executable, str(fake), "*=sleep"]
    with Job(argv, 2, env=launcher_env(tmp_path), stdout=out, stderr=err) as job:
        job.start()
        wait_for_output(job, out, b"PID ", 2)
        job.terminate()
        assert [rank.returncode for rank in job.ranks] == [-signal.SIGTERM] * 2
        assert job.wait(timeout=1) == 128 + signal.SIGTERM
        assert err.getvalue() == b""
    assert_all_ended(pids(out.getvalue().decode()))
