"""The launcher's standard input reaches rank 0 of a job on several hosts.

As in ``test_multihost.py``, loopback addresses stand for separate machines:
rank 0 is started by its host's agent, which feeds it what the launcher reads
(:mod:`ipympi.launch.stdinput`). Every other rank reads /dev/null, and nothing
waits for the end of the launcher's stdin: the job ends when its ranks do.
"""

from __future__ import annotations

import base64
import hashlib
import math
import os
import pty
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import MPI_PRELUDE, ROOT, _env, assert_ok, mpi_program

from ipympi.launch.stdinput import CHUNK, WINDOW, InputSink, InputSource, forwardable

sys.path.insert(0, str(ROOT / "conformance"))
from mpi4py_suite import (
    MPI4PY_VERSION,
    default_cache,
    fetch_folder,
    launch_command,
    mpi_environment,
)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux loopback")

HOSTS = ("--hosts", "127.0.0.2:2,127.0.0.3:2")
FAKES = Path(__file__).resolve().parent / "fakes"

READ_AND_BROADCAST = """
import hashlib, sys
data = sys.stdin.buffer.read() if rank == 0 else None
data = comm.bcast(data, root=0)
own = sys.stdin.buffer.read()  # rank 0's input has ended; the others read /dev/null
print(f"GOT {rank} {len(data)} {hashlib.sha256(data).hexdigest()} {data[:8]!r} {len(own)}",
      flush=True)
"""


def _got(stdout: str) -> dict[int, tuple[int, str, str, int]]:
    got = {}
    for line in stdout.splitlines():
        if line.startswith("GOT "):
            _, rank, size, digest, head, own = line.split(" ", 5)
            got[int(rank)] = (int(size), digest, head, int(own))
    return got


def test_rank_0_reads_what_the_launcher_gets_and_broadcasts_it(run_mpi) -> None:
    """``echo 100 | ipympi.run --hosts ... -n 4 prog``: rank 0 on the first host reads it."""
    proc = run_mpi(
        4, mpi_program(MPI_PRELUDE, READ_AND_BROADCAST), launcher_args=HOSTS, input="100\n"
    )
    assert_ok(proc, 4)
    digest = hashlib.sha256(b"100\n").hexdigest()
    assert _got(proc.stdout) == {r: (4, digest, "b'100\\n'", 0) for r in range(4)}, proc.stdout


def test_a_megabyte_of_input_arrives_whole_through_ssh(run_mpi) -> None:
    """Many chunks, in order, through an agent started by the ssh stand-in."""
    data = base64.b64encode(os.urandom(750_000)).decode()  # 1 MB of text
    proc = run_mpi(
        4,
        mpi_program(MPI_PRELUDE, READ_AND_BROADCAST),
        launcher_args=(*HOSTS, "--launcher", "ssh", "--launcher-exec", str(FAKES / "ssh")),
        input=data,
    )
    assert_ok(proc, 4)
    digest = hashlib.sha256(data.encode()).hexdigest()
    got = _got(proc.stdout)
    assert {r: got[r][:2] for r in got} == {r: (1_000_000, digest) for r in range(4)}


def test_stdin_from_dev_null_ends_at_once(run_mpi) -> None:
    proc = run_mpi(
        4,
        mpi_program(MPI_PRELUDE, READ_AND_BROADCAST),
        launcher_args=HOSTS,
        stdin=subprocess.DEVNULL,
    )
    assert_ok(proc, 4)
    empty = hashlib.sha256(b"").hexdigest()
    assert _got(proc.stdout) == {r: (0, empty, "b''", 0) for r in range(4)}, proc.stdout


def test_a_rank_0_that_never_reads_does_not_hold_up_the_job(run_mpi) -> None:
    """8 MB offered to a rank 0 that only prints: its output all arrives, the job ends."""
    body = """
    for i in range(3000):
        print(f"line {rank} {i}", flush=True)
    time.sleep(0.5)
    assert comm.allreduce(rank) == 6
    """
    started = time.monotonic()
    proc = run_mpi(4, mpi_program(MPI_PRELUDE, body), launcher_args=HOSTS, input="y\n" * 4_000_000)
    took = time.monotonic() - started
    assert_ok(proc, 4)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("line ")]
    assert len(lines) == 4 * 3000 and len(set(lines)) == 4 * 3000
    assert took < 20, took


def test_the_launcher_reads_only_what_rank_0_can_take(run_mpi, tmp_path: Path) -> None:
    """stdin a 16 MB file, rank 0 reads 100 bytes of it: the launcher has read no more
    than rank 0's pipe and the window hold (the file's offset, shared, says how much)."""
    body = """
    import sys
    if rank == 0:
        head = sys.stdin.buffer.read(100)
        assert head == b"z" * 100, head
    time.sleep(1.0)  # meanwhile the launcher would read on, if nothing held it
    comm.Barrier()
    """
    path = tmp_path / "input"
    path.write_bytes(b"z" * (16 << 20))
    with open(path, "rb") as stdin:
        proc = run_mpi(4, mpi_program(MPI_PRELUDE, body), launcher_args=HOSTS, stdin=stdin.fileno())
        offset = os.lseek(stdin.fileno(), 0, os.SEEK_CUR)
    assert_ok(proc, 4)
    assert 100 <= offset <= (1 << 20) + WINDOW, offset  # a pipe holds at most 1 MiB


def test_a_rank_0_that_reads_a_line_then_closes_stdin_stops_the_reading(run_mpi) -> None:
    """Endless input: rank 0 takes one line and closes its stdin; the job still ends."""
    body = """
    import sys
    line = sys.stdin.readline() if rank == 0 else None
    if rank == 0:
        sys.stdin.close()
        time.sleep(0.5)  # the agent finds the pipe closed and says so
    assert comm.bcast(line) == "y\\n"
    """
    yes = subprocess.Popen(["yes"], stdout=subprocess.PIPE)  # never ends by itself
    try:
        assert yes.stdout is not None
        proc = run_mpi(
            4, mpi_program(MPI_PRELUDE, body), launcher_args=HOSTS, stdin=yes.stdout.fileno()
        )
    finally:
        yes.kill()
        yes.wait(10)
        assert yes.stdout is not None
        yes.stdout.close()
    assert_ok(proc, 4)


@pytest.mark.timeout(60)
def test_a_terminal_that_stays_open_is_forwarded_and_does_not_block_the_end(
    tmp_path: Path,
) -> None:
    """stdin a terminal (not the launcher's controlling one): what is typed reaches rank 0,
    and the job ends with its ranks although the terminal never says end of file."""
    program = tmp_path / "prog.py"
    program.write_text(
        mpi_program(
            MPI_PRELUDE,
            """
            import sys
            line = sys.stdin.readline() if rank == 0 else None
            print(f"TYPED {rank} {comm.bcast(line)!r}", flush=True)
            """,
        )
    )
    master, slave = pty.openpty()
    try:
        cmd = [sys.executable, "-m", "ipympi.run", "-n", "4", "--timeout", "30", *HOSTS]
        launcher = subprocess.Popen(
            [*cmd, str(program)],
            stdin=slave,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=_env(),
            cwd=str(tmp_path),
            start_new_session=True,
        )
        try:
            os.write(master, b"typed 42\n")
            out, err = launcher.communicate(timeout=40)
        finally:
            if launcher.poll() is None:
                launcher.kill()
                launcher.communicate()
    finally:
        os.close(slave)
        os.close(master)
    assert launcher.returncode == 0, out + err
    typed = sorted(line for line in out.splitlines() if line.startswith("TYPED"))
    assert typed == [f"TYPED {r} 'typed 42\\n'" for r in range(4)], out + err


@pytest.mark.timeout(90)
def test_mpi4py_s_cpi_demo_reads_its_intervals_across_hosts() -> None:
    """mpi4py's ``compute-pi/cpi-cco.py``, unchanged: rank 0 reads the number of
    intervals from stdin (then end of input, which quits), on a job of two hosts."""
    folder = Path(fetch_folder(MPI4PY_VERSION, default_cache(), "demo")) / "compute-pi"
    env = mpi_environment("ipympi")
    env["PYTHONPATH"] = _env()["PYTHONPATH"]
    proc = subprocess.run(
        [*launch_command("ipympi", 5, 60, HOSTS), sys.executable, "cpi-cco.py"],
        cwd=folder,
        env=env,
        input="100\n",
        capture_output=True,
        text=True,
        timeout=75,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    prompt = "Enter the number of intervals: (0 quits) "
    assert proc.stdout.count(prompt) == 2, proc.stdout  # 100, then end of input
    pi = float(proc.stdout.split("pi is approximately ")[1].split(",")[0])
    assert abs(pi - math.pi) < 1e-4, proc.stdout


FOREGROUND = """
import os, pty, subprocess, sys, time
master, slave = pty.openpty()
pid = os.fork()
if pid == 0:
    os.setsid()
    fd = os.open(os.ttyname(slave), os.O_RDWR)  # the new session's controlling terminal
    launcher = subprocess.Popen(sys.argv[1:], stdin=fd, stdout=subprocess.PIPE,
                                process_group=0)  # a background job, as after ``&``
    try:
        os.write(master, b"typed 42\\n")
        time.sleep(2.0)
        waited = launcher.poll() is None  # rank 0 waits for its input
        os.tcsetpgrp(fd, launcher.pid)  # ``fg``
        out, _ = launcher.communicate(timeout=40)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
    sys.stdout.write(out.decode())
    print(f"WAITED {waited} STATUS {launcher.returncode}", flush=True)
    os._exit(0)
os.waitpid(pid, 0)
"""


@pytest.mark.timeout(90)
def test_a_background_job_reads_its_terminal_once_in_the_foreground(tmp_path: Path) -> None:
    """Started with ``&`` from a terminal: the launcher is not stopped by the terminal,
    rank 0's input waits, and what was typed arrives once the job is brought back."""
    program = tmp_path / "prog.py"
    program.write_text(
        mpi_program(
            MPI_PRELUDE,
            """
            import sys
            line = sys.stdin.readline() if rank == 0 else None
            print(f"TYPED {rank} {comm.bcast(line)!r}", flush=True)
            """,
        )
    )
    cmd = [sys.executable, "-m", "ipympi.run", "-n", "4", "--timeout", "30", *HOSTS]
    proc = subprocess.run(
        [sys.executable, "-c", FOREGROUND, *cmd, str(program)],
        capture_output=True,
        text=True,
        env=_env(),
        cwd=str(tmp_path),
        timeout=75,
    )
    assert "WAITED True STATUS 0" in proc.stdout, proc.stdout + proc.stderr
    typed = sorted(line for line in proc.stdout.splitlines() if line.startswith("TYPED"))
    assert typed == [f"TYPED {r} 'typed 42\\n'" for r in range(4)], proc.stdout


# -- the two sides, without processes ---------------------------------------------------
def test_the_launcher_reads_no_more_than_the_window_allows() -> None:
    sent: list[dict] = []
    r, w = os.pipe()
    try:
        os.write(w, b"x" * (3 * CHUNK))
        source = InputSource(r, 0, sent.append)
        while source.wants_input():
            source.read()
        assert source.unwritten == WINDOW and len(sent) == WINDOW // CHUNK
        source.on_event({"type": "input", "rank": 0, "taken": CHUNK})
        assert source.wants_input()
        source.read()
        os.close(w)
        w = -1
        source.on_event({"type": "input", "rank": 0, "taken": WINDOW})
        source.read()  # end of file
        assert sent[-1] == {"type": "input", "rank": 0, "eof": True}
        assert source.done and not source.wants_input()
        received = b"".join(base64.b64decode(c["data"]) for c in sent if "data" in c)
        assert received == b"x" * (3 * CHUNK)
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)


def test_the_agent_writes_without_blocking_and_says_when_the_rank_takes_no_more() -> None:
    events: list[dict] = []
    r, w = os.pipe()
    sink = InputSink(0, w, events.append)
    big = os.urandom(1 << 20)  # more than a pipe holds
    sink.feed({"type": "input", "rank": 0, "data": base64.b64encode(big).decode()})
    assert sink.wants_write()  # the rest waits, the agent goes on
    first = sum(e["taken"] for e in events)
    assert 0 < first < len(big)
    assert os.read(r, first) == big[:first]
    sink.flush()
    assert sum(e["taken"] for e in events) > first
    os.close(r)  # the rank closes its stdin
    sink.flush()
    assert events[-1]["closed"] is True
    assert sum(e["taken"] for e in events) == len(big)  # what waited counts as taken
    assert sink.fd is None and not sink.wants_write()
    sink.feed({"type": "input", "rank": 0, "data": "eA=="})  # later input is dropped
    assert events[-1]["closed"] is True


def test_end_of_input_closes_the_pipe_after_the_last_byte() -> None:
    events: list[dict] = []
    r, w = os.pipe()
    try:
        sink = InputSink(0, w, events.append)
        sink.feed({"type": "input", "rank": 0, "data": base64.b64encode(b"100\n").decode()})
        sink.feed({"type": "input", "rank": 0, "eof": True})
        assert os.read(r, 100) == b"100\n" and os.read(r, 100) == b""
        assert events == [{"type": "input", "rank": 0, "taken": 4}]
        sink.gone()  # the rank exits later: its input had ended, nothing more to say
        assert len(events) == 1
    finally:
        os.close(r)


def test_what_the_launcher_forwards() -> None:
    assert forwardable(None) is None
    r, w = os.pipe()
    os.close(w)
    assert forwardable(r) == r
    os.close(r)
    assert forwardable(r) is None  # closed


BACKGROUND = """
import os, pty
from ipympi.launch.stdinput import InputSource
master, slave = pty.openpty()
pid = os.fork()
if pid == 0:
    os.setsid()
    fd = os.open(os.ttyname(slave), os.O_RDWR)  # the new session's controlling terminal
    source = InputSource(fd, 0, print)
    foreground = source.wants_input() and not source.paused()
    child = os.fork()
    if child == 0:
        os.setpgid(0, 0)  # a background job of that session, as after ``&``
        os._exit(0 if source.paused() and not source.wants_input() else 1)
    background = os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]) == 0
    os._exit(0 if foreground and background else 1)
print("ok" if os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0 else "wrong")
"""


def test_a_controlling_terminal_is_read_only_in_the_foreground() -> None:
    """Reading it from a background job would stop the launcher (SIGTTIN): its input
    waits (the launcher checks again on its ticks) until the job is in the foreground."""
    proc = subprocess.run(
        [sys.executable, "-c", BACKGROUND], capture_output=True, text=True, env=_env(), timeout=30
    )
    assert proc.stdout.strip() == "ok", proc.stdout + proc.stderr
