"""Ports between two separately started jobs of one user on one host: a launched server job
publishes a port, a client job (launched, or a plain ``python client.py``) looks it up and
connects; they talk over the intercommunicator (point-to-point, small and large, both ways;
collectives; ``Merge``) and ``Disconnect``. ``Comm.Join`` over a socket between two jobs; a
job that ends while the other holds the intercommunicator is a dead peer, not a hang; a port
of a job that has ended is refused with ``ERR_PORT``; the ranks of a notebook session
accept a launched job.

Each job is a real ``python -m ipympi.run`` (or plain ``python``) process with a timeout;
both share the test's private temp folder (the name service and the session directories
live there), and a server still running when the test ends is ended.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import _env
from kernel_helpers import (
    KernelSession,
    error_text,
    kernel_env,
    kernel_specs_installed,
    outputs,
    stream_text,
)

SERVICE = "ipympi-test-jobs"
TIMEOUT = 40  # seconds a job may run

# The client side's wait for the server's name, prepended to the programs that look it up.
LOOKUP = f"""
import time
from ipympi import MPI
def lookup():
    \"\"\"The port the server job published under SERVICE, once it has (30 s at most).\"\"\"
    deadline = time.monotonic() + 30
    while True:
        try:
            return MPI.Lookup_name({SERVICE!r})
        except MPI.Exception:
            assert time.monotonic() < deadline, "the server never published its port"
            time.sleep(0.05)
"""

SERVER = f"""
import os, stat, sys, tempfile
import numpy as np
from ipympi import MPI
comm = MPI.COMM_WORLD
clients = int(sys.argv[1])
port = MPI.Open_port() if comm.rank == 0 else None
if comm.rank == 0:
    MPI.Publish_name({SERVICE!r}, port)
    names = os.path.join(tempfile.gettempdir(), f"ipympi-names-{{os.getuid()}}")
    assert stat.S_IMODE(os.stat(names).st_mode) == 0o700
    for entry in os.listdir(names):
        assert stat.S_IMODE(os.stat(os.path.join(names, entry)).st_mode) == 0o600
    print("published", flush=True)
inter = comm.Accept(port)
assert inter.Is_inter() and inter.remote_size == clients and inter.size == comm.size
if comm.rank == 0:
    inter.send(("hello", comm.size), dest=0)
    assert inter.recv(source=clients - 1) == "hi from the last client"
    big = np.arange(100_000, dtype="f8")  # 800 kB: a large message, both ways
    inter.Send(big, dest=0, tag=5)
    back = np.empty_like(big)
    inter.Recv(back, source=0, tag=6)
    assert (back == 2 * big).all()
    inter.ssend("synchronous", dest=0)
total = inter.allreduce(comm.rank + 100)
assert total == sum(range(clients)), total
got = inter.bcast("from the server" if comm.rank == 0 else None,
                  root=MPI.ROOT if comm.rank == 0 else MPI.PROC_NULL)
merged = inter.Merge(high=False)
assert merged.size == comm.size + clients and merged.rank == comm.rank
assert merged.allgather(merged.rank) == list(range(merged.size))
merged.Free()
inter.Disconnect()
assert inter == MPI.COMM_NULL
if comm.rank == 0:
    MPI.Unpublish_name({SERVICE!r}, port)
    MPI.Close_port(port)
print("server done", comm.rank, flush=True)
"""

CLIENT = f"""{LOOKUP}
import numpy as np
comm = MPI.COMM_WORLD
port = lookup() if comm.rank == 0 else None
inter = comm.Connect(port)
servers = inter.remote_size
if comm.rank == 0:
    assert inter.recv(source=0) == ("hello", servers)
if comm.rank == comm.size - 1:
    inter.send("hi from the last client", dest=0)
if comm.rank == 0:
    big = np.empty(100_000, dtype="f8")
    inter.Recv(big, source=0, tag=5)
    assert (big == np.arange(100_000)).all()
    inter.Send(2 * big, dest=0, tag=6)
    assert inter.recv(source=0) == "synchronous"
total = inter.allreduce(comm.rank)
assert total == sum(r + 100 for r in range(servers)), total
assert inter.bcast(None, root=0) == "from the server"
merged = inter.Merge(high=True)
assert merged.rank == servers + comm.rank
assert merged.allgather(merged.rank) == list(range(merged.size))
merged.Free()
inter.Disconnect()
print("client done", comm.rank, flush=True)
"""


def _launch(tmp: Path, n: int | None, program: Path, *args: str) -> list[str]:
    """The command running ``program`` on ``n`` ranks (None: a plain ``python``)."""
    if n is None:
        return [sys.executable, str(program), *args]
    launcher = [sys.executable, "-m", "ipympi.run", "-n", str(n), "--timeout", str(TIMEOUT)]
    return [*launcher, str(program), *args]


@pytest.fixture
def jobs(tmp_path: Path) -> Iterator[Jobs]:
    started = Jobs(tmp_path)
    try:
        yield started
    finally:
        started.end()


class Jobs:
    """Separately started jobs sharing one private temp folder."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.tmp = folder / "tmp"
        self.tmp.mkdir()
        self.env = {**_env(), "TMPDIR": str(self.tmp)}
        self.procs: list[subprocess.Popen[str]] = []

    def write(self, name: str, source: str) -> Path:
        path = self.folder / name
        path.write_text(textwrap.dedent(source))
        return path

    def start(self, n: int | None, program: Path, *args: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            _launch(self.tmp, n, program, *args),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=self.env,
            cwd=str(self.folder),
        )
        self.procs.append(proc)
        return proc

    def finish(self, proc: subprocess.Popen[str]) -> tuple[int, str, str]:
        out, err = proc.communicate(timeout=TIMEOUT + 15)
        return proc.returncode, out, err

    def end(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.terminate()
            try:
                proc.communicate(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("clients", [3, None], ids=["launched", "singleton"])
def test_a_client_job_connects_to_a_server_job(jobs: Jobs, clients: int | None) -> None:
    server = jobs.start(2, jobs.write("server.py", SERVER), str(clients or 1))
    assert server.stdout is not None and server.stdout.readline() == "published\n"
    # waiting in Accept longer than the launcher's stuck-job rule looks is not a deadlock
    time.sleep(2.0)
    client = jobs.start(clients, jobs.write("client.py", CLIENT))
    code, out, err = jobs.finish(client)
    assert code == 0, out + err
    assert out.count("client done") == (clients or 1), out
    code, out, err = jobs.finish(server)
    assert code == 0, out + err
    assert out.count("server done") == 2, out  # "published" was read above
    # nothing left: no session directory, no published name
    leftovers = [p.name for p in jobs.tmp.iterdir() if not p.name.startswith("ipympi-names-")]
    assert leftovers == []
    names = jobs.tmp / f"ipympi-names-{os.getuid()}"
    assert list(names.iterdir()) == []


JOIN = """
import os, socket, sys, time
from ipympi import MPI
path = sys.argv[1]
if sys.argv[2] == "listen":
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(path)
    server.listen(1)
    sock = server.accept()[0]
    server.close()
else:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    deadline = time.monotonic() + 30
    while True:
        try:
            sock.connect(path)
            break
        except (FileNotFoundError, ConnectionRefusedError):
            assert time.monotonic() < deadline
            time.sleep(0.05)
ic = MPI.Comm.Join(sock.fileno())
sock.close()
assert ic.Is_inter() and (ic.size, ic.remote_size) == (1, 1)
me = sys.argv[2]
ic.send(me, 0)
other = ic.recv(source=0)
assert other != me, other
assert ic.allreduce(1 if me == "listen" else 10) == (10 if me == "listen" else 1)
merged = ic.Merge(me == "connect")
assert merged.allgather(me) == ["listen", "connect"]
merged.Free()
ic.Disconnect()
print("joined", me, "with", other, flush=True)
"""


@pytest.mark.timeout(120)
def test_join_connects_two_jobs_over_a_socket(jobs: Jobs) -> None:
    program = jobs.write("join.py", JOIN)
    path = str(jobs.folder / "join.sock")
    listening = jobs.start(1, program, path, "listen")
    connecting = jobs.start(None, program, path, "connect")
    for proc, word in ((connecting, "connect"), (listening, "listen")):
        code, out, err = jobs.finish(proc)
        assert code == 0, out + err
        assert f"joined {word} with" in out, out


ENDS = f"""{LOOKUP}
import os, sys, time
from ipympi import MPI
comm = MPI.COMM_WORLD
if sys.argv[1] == "server":
    port = MPI.Open_port()
    MPI.Publish_name({SERVICE!r}, port)
    inter = comm.Accept(port)
    start = time.monotonic()
    try:
        inter.recv(source=0)  # the client's job ends instead of sending
    except MPI.Exception as exc:
        assert exc.Get_error_class() == MPI.ERR_OTHER, exc
        print("server saw:", exc, flush=True)
    print("after", round(time.monotonic() - start, 1), flush=True)
    MPI.Close_port(port)
    try:
        MPI.COMM_SELF.Connect(port)
    except MPI.Exception as exc:
        assert exc.Get_error_class() == MPI.ERR_PORT, exc
else:
    port = lookup()
    inter = comm.Connect(port)
    print("client connected", flush=True)
    os._exit(0)  # the job ends, the intercommunicator still open
"""


@pytest.mark.timeout(120)
def test_a_job_that_ends_is_a_dead_peer_and_its_ports_are_gone(jobs: Jobs) -> None:
    program = jobs.write("ends.py", ENDS)
    server = jobs.start(1, program, "server")
    client = jobs.start(1, program, "client")
    code, out, err = jobs.finish(client)
    assert "client connected" in out, out + err
    code, out, err = jobs.finish(server)
    assert code == 0, out + err
    assert "server saw:" in out and "a process of another job has died" in out, out
    waited = float(out.split("after ")[1].split()[0])
    assert waited < 10, out
    # the server's job has ended: its port, still published nowhere, cannot be reached
    gone = jobs.write(
        "gone.py",
        """
        import sys
        from ipympi import MPI
        try:
            MPI.COMM_WORLD.Connect(sys.argv[1])
        except MPI.Exception as exc:
            assert exc.Get_error_class() == MPI.ERR_PORT, exc
            print("refused:", exc, flush=True)
        """,
    )
    port = f"ipympi-port:0123456789abcdef:0:0:1:{jobs.tmp / 'ipympi-gone'}"
    code, out, err = jobs.finish(jobs.start(1, gone, port))
    assert code == 0 and "refused:" in out and "not open" in out, out + err


MISMATCHED = f"""{LOOKUP}
import sys, time
from ipympi import MPI
comm = MPI.COMM_WORLD
if sys.argv[1] == "server":
    port = MPI.Open_port() if comm.rank == 0 else None
    if comm.rank == 0:
        MPI.Publish_name({SERVICE!r}, port)
    inter = comm.Accept(port)
    if comm.rank:
        inter.bcast(None, root=0)  # where all others call allreduce: a mismatch
    inter.allreduce(comm.rank)
else:
    port = lookup()
    inter = comm.Connect(port)
    inter.allreduce(comm.rank)
"""


def test_two_jobs_failing_together_end_cleanly(jobs: Jobs) -> None:
    """A collective mismatch between two connected jobs fails both, each with the
    mismatch named, and neither job's ending shows a stray thread's traceback (the
    watch of the other job's processes outliving its own socket)."""
    program = jobs.write("mismatched.py", MISMATCHED)
    for _ in range(3):  # the jobs' ends race each other: give the race a few chances
        server = jobs.start(2, program, "server")
        client = jobs.start(3, program, "client")
        for proc in (client, server):
            code, out, err = jobs.finish(proc)
            assert code != 0 and "collective mismatch" in err, out + err
            assert "Exception in thread" not in err, err


NOTEBOOK_CLIENT = f"""
import time
from ipympi import MPI
time.sleep(2.0)  # the notebook's ranks wait in Accept longer than its stuck-cell rule looks
port = MPI.Lookup_name({SERVICE!r})
inter = MPI.COMM_WORLD.Connect(port)
inter.send(("from the client job", MPI.COMM_WORLD.rank), dest=MPI.COMM_WORLD.rank)
print("client", MPI.COMM_WORLD.rank, inter.allreduce(1), flush=True)
inter.Disconnect()
"""


@pytest.mark.timeout(120)
def test_a_notebook_session_accepts_a_launched_job(jobs: Jobs) -> None:
    cell = f"""\
port = MPI.Open_port() if rank == 0 else None
if rank == 0:
    MPI.Publish_name({SERVICE!r}, port)
inter = comm.Accept(port)
print(inter.recv(source=rank), inter.allreduce(10))
inter.Disconnect()
if rank == 0:
    MPI.Unpublish_name({SERVICE!r}, port)
    MPI.Close_port(port)
"""
    with kernel_specs_installed(jobs.folder / "jupyter"):
        env = kernel_env(np=2, TMPDIR=str(jobs.tmp))
        with KernelSession("ipympi", env) as kernel:
            kernel.ok("None", timeout=60)
            client = jobs.start(2, jobs.write("client.py", NOTEBOOK_CLIENT))
            reply, messages = kernel.execute(cell, timeout=60)
            assert reply["content"]["status"] == "ok", "\n".join(error_text(reply))
            out = stream_text(outputs(messages), "stdout")
            for rank in range(2):
                assert f"[stdout:{rank}] ('from the client job', {rank}) 2\n" in out, out
    code, out, err = jobs.finish(client)
    assert code == 0, out + err
    assert sorted(out.split("\n")[:2]) == ["client 0 20", "client 1 20"], out


CLOSES = f"""{LOOKUP}
import sys, time
from ipympi import MPI
if sys.argv[1] == "server":
    port = MPI.Open_port()
    MPI.Publish_name({SERVICE!r}, port)
    time.sleep(1.5)  # the other job's Connect request arrives meanwhile
    MPI.Unpublish_name({SERVICE!r}, port)
    MPI.Close_port(port)  # refuses it
    print("server closed", flush=True)
else:
    port = lookup()
    try:
        MPI.COMM_WORLD.Connect(port)
    except MPI.Exception as exc:
        assert exc.Get_error_class() == MPI.ERR_PORT, exc
        print("refused:", exc, flush=True)
"""


@pytest.mark.timeout(120)
def test_closing_a_port_refuses_another_jobs_waiting_connect(jobs: Jobs) -> None:
    program = jobs.write("closes.py", CLOSES)
    server = jobs.start(1, program, "server")
    client = jobs.start(2, program, "client")
    code, out, err = jobs.finish(client)
    assert code == 0, out + err
    assert "refused:" in out and "was closed before accepting" in out, out
    code, out, err = jobs.finish(server)
    assert code == 0 and "server closed" in out, out + err
