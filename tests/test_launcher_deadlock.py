"""``ipympi.run`` ends a job where no rank can progress, and only such a job.

Real MPI programs on real ranks: a deadlock is reported (the wait-for graph and
every rank's state) and ended with status 125 within a few seconds; a rank
that computes or sleeps, a long transfer, a loop of short waits and a rank that
starts its MPI runtime late keep the job running to its normal end.
``--no-deadlock-check`` leaves a deadlock to ``--timeout``.
"""

from __future__ import annotations

import re
import subprocess
import time

import pytest
from conftest import MPI_PRELUDE, alive, assert_ok, mpi_program

from ipympi.launch.launcher import DEADLOCK_STATUS, TIMEOUT_STATUS
from ipympi.launch.watch import describe_stuck_job

# The launcher's own --timeout: a safety net far beyond the detection time.
SAFETY = 30
# How long detection may take on a loaded machine (it takes about a second).
DETECT_WITHIN = 10


def program(body: str, ok: bool = True) -> str:
    return mpi_program(MPI_PRELUDE, body, ok)


def assert_not_reported(proc: subprocess.CompletedProcess) -> None:
    assert "deadlock" not in proc.stderr and "can progress" not in proc.stderr, proc.stderr


# -- deadlocks are reported and ended ----------------------------------------------------
@pytest.mark.timeout(60)
def test_recv_from_each_other_is_reported_and_ended(run_mpi) -> None:
    source = program(
        """
        import os
        print(f"PID {os.getpid()}", flush=True)
        comm.recv(source=1 - rank, tag=7)
        """,
        ok=False,
    )
    start = time.monotonic()
    proc = run_mpi(2, source, timeout=SAFETY)
    elapsed = time.monotonic() - start
    err = proc.stderr
    assert proc.returncode == DEADLOCK_STATUS, err
    assert elapsed < DETECT_WITHIN, elapsed
    assert (
        "ipympi.run: deadlock: rank 0 waits in recv(source=1, tag=7) on MPI_COMM_WORLD; "
        "rank 1 waits in recv(source=0, tag=7) on MPI_COMM_WORLD\n"
    ) in err
    for rank in (0, 1):
        line = (
            rf"^  rank {rank} \(pid \d+\): blocked in recv\(source={1 - rank}, tag=7\) "
            rf"on MPI_COMM_WORLD for \d+\.\d s at prog0\.py:\d+$"
        )
        assert re.search(line, err, re.MULTILINE), err
    assert "timeout after" not in err
    pids = [int(pid) for pid in re.findall(r"^PID (\d+)$", proc.stdout, re.MULTILINE)]
    assert len(pids) == 2 and not any(alive(pid) for pid in pids), proc.stdout


@pytest.mark.timeout(60)
def test_a_rank_that_skips_a_barrier_and_exits_is_named(run_mpi) -> None:
    source = program(
        """
        import os
        if rank == 2:
            os._exit(0)
        comm.Barrier()
        """
    )
    start = time.monotonic()
    proc = run_mpi(3, source, timeout=SAFETY)
    elapsed = time.monotonic() - start
    err = proc.stderr
    assert proc.returncode == DEADLOCK_STATUS, err
    assert elapsed < DETECT_WITHIN, elapsed
    graph = re.search(r"^ipympi\.run: no rank can progress: (.*)$", err, re.MULTILINE)
    assert graph, err
    assert re.fullmatch(
        r"rank 0 waits in Barrier.* on MPI_COMM_WORLD; rank 1 waits in Barrier.* "
        r"on MPI_COMM_WORLD; rank 2 has exited \(status 0\)",
        graph.group(1),
    ), graph.group(1)
    assert re.search(r"^  rank 2 \(pid \d+\): exited with status 0$", err, re.MULTILINE), err
    assert re.search(r"^  rank 0 \(pid \d+\): blocked in Barrier", err, re.MULTILINE), err


@pytest.mark.timeout(60)
def test_a_rank_that_skips_a_barrier_and_ends_its_program_is_named(run_mpi) -> None:
    # The rank ends its program normally: it waits for the others at the end
    # (in Finalize) or has exited; either way the report names it.
    source = program("if rank != 2:\n    comm.Barrier()\n", ok=False)
    proc = run_mpi(3, source, timeout=SAFETY)
    assert proc.returncode == DEADLOCK_STATUS, proc.stderr
    assert re.search(
        r"^ipympi\.run: (deadlock|no rank can progress): rank 0 waits in Barrier.*"
        r"; rank 2 (waits in Finalize|has exited \(status 0\))",
        proc.stderr,
        re.MULTILINE,
    ), proc.stderr


@pytest.mark.timeout(60)
def test_a_rank_that_waits_for_itself_is_a_deadlock(run_mpi) -> None:
    proc = run_mpi(1, program("comm.recv(source=0, tag=3)", ok=False), timeout=SAFETY)
    assert proc.returncode == DEADLOCK_STATUS, proc.stderr
    assert "ipympi.run: deadlock: rank 0 waits in recv(source=0, tag=3) on MPI_COMM_WORLD\n" in (
        proc.stderr
    )


# -- slow is not stuck -----------------------------------------------------------------
@pytest.mark.timeout(60)
def test_a_late_send_is_not_a_deadlock(run_mpi) -> None:
    source = program(
        """
        if rank == 1:
            time.sleep(2)
            comm.send("late", dest=0, tag=5)
        else:
            assert comm.recv(source=1, tag=5) == "late"
        """
    )
    proc = run_mpi(2, source, timeout=SAFETY)
    assert_ok(proc, 2)
    assert_not_reported(proc)


@pytest.mark.timeout(60)
def test_a_computing_rank_is_not_a_deadlock(run_mpi) -> None:
    source = program(
        """
        if rank == 0:
            end, n = time.monotonic() + 2, 0
            while time.monotonic() < end:
                n += 1
        comm.Barrier()
        """
    )
    proc = run_mpi(3, source, timeout=SAFETY)
    assert_ok(proc, 3)
    assert_not_reported(proc)


@pytest.mark.timeout(60)
def test_a_large_transfer_to_a_late_receiver_is_not_a_deadlock(run_mpi) -> None:
    source = program(
        """
        n = 8 << 20
        if rank == 0:
            comm.Send(np.arange(n, dtype=np.uint8), dest=1, tag=1)
        else:
            time.sleep(1.5)
            buf = np.empty(n, dtype=np.uint8)
            comm.Recv(buf, source=0, tag=1)
            assert (buf == np.arange(n, dtype=np.uint8)).all()
        """
    )
    proc = run_mpi(2, source, timeout=SAFETY)
    assert_ok(proc, 2)
    assert_not_reported(proc)


@pytest.mark.timeout(90)
def test_a_long_loop_of_short_waits_is_not_a_deadlock(run_mpi) -> None:
    # At least 5000 round trips, and for at least 2 s so that several looks see
    # the ranks in the same call: rank 0 tells rank 1 when to stop.
    source = program(
        """
        go, count, until = True, 0, time.monotonic() + 2
        while go:
            mine = count < 5000 or time.monotonic() < until if rank == 0 else None
            got = comm.sendrecv(mine, dest=nxt, sendtag=2, source=prv, recvtag=2)
            go = mine if rank == 0 else got
            count += 1
        print(f"COUNT {count}", flush=True)
        """
    )
    proc = run_mpi(2, source, timeout=60)
    assert_ok(proc, 2)
    assert_not_reported(proc)
    counts = re.findall(r"^COUNT (\d+)$", proc.stdout, re.MULTILINE)
    assert len(counts) == 2 and counts[0] == counts[1] and int(counts[0]) > 5000, proc.stdout


@pytest.mark.timeout(60)
def test_a_rank_that_starts_mpi_late_is_not_a_deadlock(run_mpi) -> None:
    # Rank 1 has not said hello for two seconds: it cannot answer, so it is not stuck.
    source = """
        import os, time
        if os.environ["IPYMPI_RANK"] == "1":
            time.sleep(2)
        from ipympi import MPI
        comm = MPI.COMM_WORLD
        if comm.Get_rank() == 0:
            assert comm.recv(source=1, tag=4) == "hello"
        else:
            comm.send("hello", dest=0, tag=4)
        print(f"OK {comm.Get_rank()}", flush=True)
        """
    proc = run_mpi(2, source, timeout=SAFETY)
    assert_ok(proc, 2)
    assert_not_reported(proc)


# -- turning the check off ---------------------------------------------------------------
@pytest.mark.timeout(60)
def test_no_deadlock_check_leaves_a_deadlock_to_the_timeout(run_mpi) -> None:
    source = program("comm.recv(source=1 - rank, tag=7)", ok=False)
    proc = run_mpi(2, source, timeout=2, launcher_args=("--no-deadlock-check",))
    err = proc.stderr
    assert proc.returncode == TIMEOUT_STATUS, err
    assert "ipympi.run: timeout after 2 s; rank states:\n" in err
    assert "deadlock" not in err
    assert re.search(r"^  rank 1 \(pid \d+\): blocked in recv\(source=0, tag=7\)", err, re.M)


# -- the report ------------------------------------------------------------------------
def test_the_report_groups_exited_ranks_by_status() -> None:
    call = "Barrier (collective #0, round 1)"
    waiting = {"state": "blocked", "call": call, "comm": "MPI_COMM_WORLD"}
    states = [
        {"rank": 0, **waiting},
        {"rank": 1, "state": "exited", "status": 0},
        {"rank": 2, "state": "exited", "status": 0},
        {"rank": 3, **waiting},
    ]
    assert describe_stuck_job(states, [0, 3]) == (
        f"no rank can progress: rank 0 waits in {call} on MPI_COMM_WORLD; "
        f"rank 3 waits in {call} on MPI_COMM_WORLD; ranks 1,2 have exited (status 0)"
    )
    assert (
        describe_stuck_job(states[:1], [0]) == f"deadlock: rank 0 waits in {call} on MPI_COMM_WORLD"
    )
