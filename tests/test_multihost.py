"""Jobs on several hosts: ranks on loopback addresses stand for separate machines.

``--hosts 127.0.0.2:2,127.0.0.3:2`` gives two "hosts" on this machine: each
gets its own agent, session directory and tcp address, and ranks on different
hosts talk over signed tcp frames, exactly as across machines. ssh and srun
are replaced by stand-ins (``tests/fakes``) that run the agent here.
"""

from __future__ import annotations

import contextlib
import json
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import MPI_PRELUDE, ROOT, _env, assert_ok, mpi_program, wait_gone

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux loopback")

HOSTS = ("--hosts", "127.0.0.2:2,127.0.0.3:2")
FAKES = Path(__file__).resolve().parent / "fakes"

REPORT_PIDS = """
import os
print(f"PID {os.getpid()} rank {rank}", flush=True)
"""


def _pids(stdout: str) -> list[int]:
    return [int(line.split()[1]) for line in stdout.splitlines() if line.startswith("PID ")]


def test_ranks_on_two_hosts_compute_together(run_mpi) -> None:
    """Point-to-point, large messages and collectives across hosts; five ranks on four
    slots wrap around to the first host; each host's ranks share a COMM_TYPE_SHARED."""
    body = """
    import os
    from ipympi.mpi.process import PROCESS
    host = PROCESS.host_name()
    assert host == ("127.0.0.3" if rank in (2, 3) else "127.0.0.2"), (rank, host)
    transport = PROCESS.engine.transport
    assert transport.tcp.endpoint.startswith(f"tcp://{host}:"), transport.tcp.endpoint
    assert transport.remote == {r for r in range(size) if r not in (
        (2, 3) if rank in (2, 3) else (0, 1, 4))}
    # small and large messages around the ring, across hosts
    got = comm.sendrecv(("hello", rank), dest=nxt, source=prv)
    assert got == ("hello", prv)
    big = np.arange(300_000, dtype=np.float64) * (rank + 1)
    back = np.empty_like(big)
    comm.Sendrecv(big, dest=nxt, recvbuf=back, source=prv)
    assert np.array_equal(back, np.arange(300_000, dtype=np.float64) * (prv + 1))
    # collectives mixing both paths
    assert comm.allreduce(rank) == sum(range(size))
    data = np.arange(100_000.0) if rank == 0 else np.empty(100_000)
    comm.Bcast(data, root=0)
    assert data[-1] == 99_999.0
    # blocking collectives on their straight path, large messages in chunks over tcp
    pair = comm.Split(0 if rank in (0, 2) else 1, rank)
    if rank in (0, 2):
        big = np.arange(100_000.0) if rank == 0 else np.empty(100_000)
        pair.Bcast(big, root=0)
        assert big[-1] == 99_999.0
        total = np.empty(100_000)
        pair.Allreduce(np.full(100_000, rank + 1.0), total)
        assert total[0] == total[-1] == 4.0
    pair.Free()
    assert comm.allgather(host) == ["127.0.0.2"] * 2 + ["127.0.0.3"] * 2 + ["127.0.0.2"]
    assert comm.alltoall([rank * 10 + r for r in range(size)]) == [
        r * 10 + rank for r in range(size)]
    shared = comm.Split_type(MPI.COMM_TYPE_SHARED)
    assert shared.size == (2 if rank in (2, 3) else 3), shared.size
    # a synchronous send must wait for a receiver on another host
    if rank == 0:
        comm.ssend("sync", dest=2, tag=4)
    elif rank == 2:
        time.sleep(0.2)
        assert comm.recv(source=0, tag=4) == "sync"
    comm.Barrier()
    """
    proc = run_mpi(5, mpi_program(MPI_PRELUDE, body), launcher_args=HOSTS)
    assert_ok(proc, 5)


def test_floods_wildcards_and_background_progress_across_hosts(run_mpi) -> None:
    """Many messages before any receive, ANY_SOURCE mixing both paths in per-source
    order, and a synchronous send that completes while its receiver computes."""
    body = """
    N = 300
    reqs = [comm.isend((rank, i), dest=d, tag=3) for d in range(size) if d != rank
            for i in range(N)]
    seen = {s: [] for s in range(size) if s != rank}
    for _ in range(N * (size - 1)):
        source, i = comm.recv(source=MPI.ANY_SOURCE, tag=3)
        seen[source].append(i)
    MPI.Request.Waitall(reqs)
    assert all(got == list(range(N)) for got in seen.values()), seen
    comm.Barrier()
    if rank == 3:
        req = comm.irecv(source=0, tag=8)
        end = time.monotonic() + 1.5
        while time.monotonic() < end:  # pure Python: only the progress thread answers
            sum(range(1000))
        assert req.wait() == "while you compute"
    elif rank == 0:
        time.sleep(0.2)
        started = time.monotonic()
        comm.ssend("while you compute", dest=3, tag=8)
        took = time.monotonic() - started
        assert took < 1.0, f"the synchronous send waited {took:.2f} s for the computing rank"
    comm.Barrier()
    """
    proc = run_mpi(4, mpi_program(MPI_PRELUDE, body), launcher_args=HOSTS)
    assert_ok(proc, 4)


def test_a_failure_on_one_host_ends_every_host(run_mpi) -> None:
    body = REPORT_PIDS + textwrap.dedent(
        """
        comm.Barrier()
        if rank == 3:
            raise ValueError("boom on rank 3")
        comm.Barrier()
        """
    )
    started = time.monotonic()
    proc = run_mpi(4, mpi_program(MPI_PRELUDE, body, ok=False), launcher_args=HOSTS)
    assert proc.returncode == 1, proc.stderr
    assert "ValueError: boom on rank 3" in proc.stderr
    assert "rank 3 exited with status 1 on host 127.0.0.3" in proc.stderr
    assert time.monotonic() - started < 15
    assert len(_pids(proc.stdout)) == 4
    assert wait_gone(_pids(proc.stdout)) == []


def test_abort_on_one_host_ends_the_job_with_its_code(run_mpi) -> None:
    body = """
    comm.Barrier()
    if rank == 2:
        comm.Abort(7)
    comm.Barrier()
    """
    proc = run_mpi(4, mpi_program(MPI_PRELUDE, body, ok=False), launcher_args=HOSTS)
    assert proc.returncode == 7, proc.stderr
    assert "rank 2 called Abort with error code 7" in proc.stderr


def test_a_deadlock_across_hosts_is_reported(run_mpi) -> None:
    body = """
    if rank == 0:
        comm.recv(source=3, tag=1)
    elif rank == 3:
        comm.recv(source=0, tag=2)
    """
    proc = run_mpi(4, mpi_program(MPI_PRELUDE, body, ok=False), launcher_args=HOSTS)
    assert proc.returncode == 125, proc.stderr
    assert "rank 0 waits in recv(source=3, tag=1) on MPI_COMM_WORLD" in proc.stderr
    assert "rank 3 waits in recv(source=0, tag=2) on MPI_COMM_WORLD" in proc.stderr


def test_a_timeout_reports_every_host_s_ranks(run_mpi) -> None:
    body = """
    if rank == 2:
        comm.recv(source=1, tag=9)
    else:
        time.sleep(60)
    """
    proc = run_mpi(4, mpi_program(MPI_PRELUDE, body, ok=False), timeout=3, launcher_args=HOSTS)
    assert proc.returncode == 124, proc.stderr
    assert "blocked in recv(source=1, tag=9) on MPI_COMM_WORLD" in proc.stderr
    assert proc.stderr.count(": running at prog") == 3, proc.stderr


@contextlib.contextmanager
def _running_job(tmp_path: Path, body: str, *options: str) -> Iterator[tuple[Any, list[int]]]:
    """A 4-rank job on two hosts, started in the background; yields the launcher and the
    ranks' pids once every rank has printed its ``PID`` line. The launcher is killed at
    the end if still running, and its pipes are closed."""
    prog = tmp_path / "prog.py"
    prog.write_text(mpi_program(MPI_PRELUDE, REPORT_PIDS + textwrap.dedent(body), ok=False))
    cmd = [sys.executable, "-m", "ipympi.run", "-n", "4", *HOSTS, *options, str(prog)]
    launcher = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env(), cwd=tmp_path
    )
    try:
        assert launcher.stdout is not None
        pids: list[int] = []
        while len(pids) < 4:
            line = launcher.stdout.readline()
            assert line, "the job ended before every rank started"
            pids += _pids(line)
        yield launcher, pids
    finally:
        if launcher.poll() is None:
            launcher.kill()
        launcher.communicate()


@pytest.mark.timeout(60)
def test_ctrl_c_reaches_the_ranks_on_every_host(tmp_path: Path) -> None:
    body = """
    try:
        if rank == 2:
            comm.recv(source=1, tag=5)
        else:
            time.sleep(60)
    except KeyboardInterrupt:
        print(f"rank {rank} interrupted", flush=True)
        raise
    """
    with _running_job(tmp_path, body, "--no-deadlock-check") as (launcher, pids):
        time.sleep(0.3)  # every rank is in its wait now
        launcher.send_signal(signal.SIGINT)
        out, err = launcher.communicate(timeout=30)
    assert launcher.returncode == 130, err
    assert sorted(line for line in out.splitlines() if "interrupted" in line) == [
        f"rank {r} interrupted" for r in range(4)
    ], out + err
    assert wait_gone(pids) == []


def test_agents_start_through_ssh(run_mpi, tmp_path: Path) -> None:
    log = tmp_path / "ssh.log"
    body = """
    import os
    assert os.environ.get("MY_SETTING") == "forwarded"  # the launcher's environment travels
    assert os.environ.get("SSH_CONNECTION"), "the rank was not started through the ssh stand-in"
    assert comm.allreduce(1) == size
    """
    proc = run_mpi(
        4,
        mpi_program(MPI_PRELUDE, body),
        launcher_args=(*HOSTS, "--launcher", "ssh", "--launcher-exec", str(FAKES / "ssh")),
        env={"FAKE_SSH_LOG": str(log), "MY_SETTING": "forwarded"},
    )
    assert_ok(proc, 4)
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert sorted(call["host"] for call in calls) == ["127.0.0.2", "127.0.0.3"]
    for call in calls:
        assert call["options"][:3] == ["-o", "BatchMode=yes", "-x"]
        assert call["command"].endswith(f"exec {sys.executable} -m ipympi.launch.node")
        assert "IPYMPI_KEY" not in call["command"]  # the key travels on stdin only


def test_an_unreachable_host_is_reported_at_once(run_mpi) -> None:
    started = time.monotonic()
    proc = run_mpi(
        4,
        mpi_program(MPI_PRELUDE, "comm.Barrier()"),
        launcher_args=(*HOSTS, "--launcher", "ssh", "--launcher-exec", str(FAKES / "ssh")),
        env={"FAKE_SSH_FAIL": "1"},
    )
    assert proc.returncode == 255, proc.stderr
    assert "host 127.0.0.2: ssh: connect to host 127.0.0.2 port 22: Connection refused" in (
        proc.stderr
    )
    assert "host 127.0.0.2: lost the connection to its agent (exit status 255)" in proc.stderr
    assert time.monotonic() - started < 10


def test_a_host_that_never_answers_ends_the_job(run_mpi) -> None:
    started = time.monotonic()
    proc = run_mpi(
        4,
        mpi_program(MPI_PRELUDE, "comm.Barrier()"),
        launcher_args=(*HOSTS, "--launcher", "ssh", "--launcher-exec", str(FAKES / "ssh")),
        env={"FAKE_SSH_HANG": "1", "IPYMPI_START_TIMEOUT": "1.5"},
    )
    assert proc.returncode == 255, proc.stderr
    assert "host 127.0.0.2: its agent did not answer within 1.5 s" in proc.stderr
    assert "rank 0 on host 127.0.0.2: its host 127.0.0.2 did not start it" in proc.stderr
    assert time.monotonic() - started < 15


def test_agents_start_as_srun_steps_inside_an_allocation(run_mpi, tmp_path: Path) -> None:
    log = tmp_path / "srun.log"
    allocation = {
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NODELIST": "127.0.0.[2-3]",
        "SLURM_TASKS_PER_NODE": "2(x2)",
        "FAKE_SRUN_LOG": str(log),
    }
    body = """
    import os
    assert os.environ["SLURMD_NODENAME"] == ("127.0.0.3" if rank >= 2 else "127.0.0.2")
    assert comm.allreduce(rank) == 6
    """
    path = tmp_path / "slurm_prog.py"
    path.write_text(mpi_program(MPI_PRELUDE, body))
    cmd = [sys.executable, "-m", "ipympi.run", "--timeout", "30", "--launcher", "srun"]
    cmd += ["--launcher-exec", str(FAKES / "srun"), str(path)]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=60, env={**_env(), **allocation}, cwd=tmp_path
    )
    assert_ok(proc, 4)  # no -n: every slot of the allocation
    steps = [json.loads(line) for line in log.read_text().splitlines()]
    assert sorted(step["options"]["nodelist"] for step in steps) == ["127.0.0.2", "127.0.0.3"]
    assert all(step["options"]["cpus-per-task"] == "2" for step in steps)
    assert all(step["command"][-2:] == ["-m", "ipympi.launch.node"] for step in steps)


def test_srun_outside_an_allocation_says_so(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ipympi.run", "--launcher", "srun", "-c", "pass"],
        capture_output=True,
        text=True,
        timeout=30,
        env=_env(),
        cwd=tmp_path,
    )
    assert proc.returncode == 2
    assert "--launcher srun needs a Slurm allocation: run inside salloc or sbatch" in proc.stderr


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (("--hosts", "a:0"), "the slot count must be a positive number"),
        (("--hosts", "a", "--hostfile", "f"), "give --hosts or --hostfile, not both"),
        (("--iface", "eth0"), "need --hosts or --hostfile"),
        (("--hosts", "127.0.0.2", "--launcher", "rsh"), "invalid choice: 'rsh'"),
    ],
)
def test_bad_host_options_get_a_usage_error(args: tuple[str, ...], why: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ipympi.run", *args, "-c", "pass"],
        capture_output=True,
        text=True,
        timeout=30,
        env=_env(),
        cwd=ROOT,
    )
    assert proc.returncode == 2, proc.stderr
    assert why in proc.stderr


def test_an_interface_binds_every_tcp_socket(run_mpi) -> None:
    """--iface lo: the launcher and every rank listen on 127.0.0.1 only."""
    body = """
    from ipympi.mpi.process import PROCESS
    assert PROCESS.engine.transport.tcp.endpoint.startswith("tcp://127.0.0.1:")
    assert comm.allreduce(1) == size
    """
    proc = run_mpi(4, mpi_program(MPI_PRELUDE, body), launcher_args=(*HOSTS, "--iface", "lo"))
    assert_ok(proc, 4)


def test_no_agent_or_rank_outlives_a_killed_launcher(tmp_path: Path) -> None:
    with _running_job(tmp_path, "time.sleep(60)\n") as (launcher, pids):
        agents = subprocess.run(
            ["pgrep", "-f", "ipympi.launch.node", "-P", str(launcher.pid)],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.split()
        assert len(agents) == 2
        launcher.kill()
        launcher.wait(10)
    assert wait_gone(pids + [int(pid) for pid in agents]) == []


def test_windows_span_hosts_but_shared_windows_stay_within_one(run_mpi) -> None:
    """Windows across hosts are ``tests/test_win_hosts.py``'s; a shared window must keep
    to one host (``ERR_RMA_SHARED``, as MPICH says too), and works there."""
    body = """
    MPI.Win.Allocate(8, 1, MPI.INFO_NULL, comm).Free()
    raises(MPI.ERR_RMA_SHARED, MPI.Win.Allocate_shared, 8, 1, MPI.INFO_NULL, comm)
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    win = MPI.Win.Allocate_shared(8, 8, MPI.INFO_NULL, node)
    win.Fence()
    win.Put(np.array([rank], 'i8'), (node.rank + 1) % node.size)
    win.Fence()
    peers = node.allgather(rank)
    got = np.frombuffer(win.tomemory(), 'i8')[0]
    assert got == peers[(node.rank - 1) % node.size], (got, peers)
    win.Free()
    node.Free()
    """
    proc = run_mpi(4, mpi_program(MPI_PRELUDE, body), launcher_args=HOSTS)
    assert_ok(proc, 4)
