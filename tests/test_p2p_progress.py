"""Progress, interruption, ordering and message sizes on real ranks.

* progress: a posted receive is satisfied, and a synchronous or large send
  completes, while the receiving rank computes in pure Python without calling MPI;
* Ctrl-C: SIGINT to the launcher raises KeyboardInterrupt in ranks blocked in Recv;
* non-overtaking with many messages of mixed sizes (eager and rendezvous
  interleaved), ANY_SOURCE from three senders, zero-length messages, self-sends,
  truncation of large messages, the eager/rendezvous boundary (64 KiB, 64 KiB + 1);
* the same with ``process_vm_readv`` disabled (``IPYMPI_NO_VM_READV=1``).

Rules: INVENTORY §2.3 P-5, P-6, P-7, P-21, P-24, P-25; DESIGN "every blocking wait
is interruptible". Times are compared on ``time.monotonic()``, one clock for every
process of the host, with wide margins: the machine is noisy.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import MPI_PRELUDE, ROOT, assert_ok, mpi_program

NO_VM = {"IPYMPI_NO_VM_READV": "1"}
EAGER = 64 * 1024

PRELUDE = (
    MPI_PRELUDE
    + '''
import os
import sys
EAGER = 64 * 1024


def pattern(nbytes, seed):
    """Bytes that tell messages apart: every byte depends on seed and position."""
    return ((np.arange(nbytes, dtype=np.int64) * 7 + seed * 13) % 251).astype(np.uint8)
'''
)


def program(body: str) -> str:
    return mpi_program(PRELUDE, body)


@pytest.mark.parametrize("env", [None, NO_VM], ids=["vm_readv", "no_vm_readv"])
def test_progress_while_the_receiver_computes(run_mpi, env: dict[str, str] | None) -> None:
    body = """
    COMPUTE = 1.2  # seconds of pure-Python work on rank 1, no MPI calls
    small = np.arange(4, dtype="i")
    big = np.arange(1 << 20, dtype="d")  # 8 MiB, far above the eager size
    if rank == 1:
        rsmall = np.zeros(4, "i")
        rbig = np.zeros(1 << 20)
        reqs = [comm.Irecv(rsmall, 0, 1), comm.Irecv(rbig, 0, 2), comm.Irecv(rbig[:8], 0, 3)]
        comm.send(None, 0, 0)  # my receives are posted: go
        start = time.monotonic()
        x, n = 0, 0
        while time.monotonic() - start < COMPUTE:
            for _ in range(1000):
                x = (x * 31 + 7) % 1000003
            n += 1
        end = time.monotonic()
        MPI.Request.Waitall(reqs)
        assert (rsmall == small).all() and (rbig == big).all()
        times = comm.recv(source=0, tag=9)
        # every wait on rank 0 returned well before rank 1 stopped computing
        for what, t in times.items():
            assert t - start < COMPUTE / 2 and t < end, (what, t - start, times, start, end)
        print(f"rank 1: waits done after {max(times.values()) - start:.3f} s", flush=True)
    elif rank == 0:
        comm.recv(source=1, tag=0)
        times = {}
        comm.Issend(small, 1, 1).Wait()  # needs rank 1 to match: its progress does
        times["issend"] = time.monotonic()
        comm.Isend(big, 1, 2).Wait()  # rendezvous: rank 1 must move the data
        times["isend_8MiB"] = time.monotonic()
        comm.Ssend(big[:8], 1, 3)
        times["ssend"] = time.monotonic()
        comm.send(times, 1, 9)
    """
    proc = run_mpi(2, program(body), env=env)
    assert_ok(proc, 2)


def test_ctrl_c_interrupts_ranks_blocked_in_recv(tmp_path: Path) -> None:
    """SIGINT to the launcher reaches every rank; a blocked Recv raises KeyboardInterrupt."""
    source = PRELUDE + textwrap.dedent(
        """
        try:
            print(f"READY {rank} {os.getpid()}", flush=True)
            comm.Recv(np.zeros(4), MPI.ANY_SOURCE, 77)
            print(f"RECEIVED {rank}", flush=True)
        except KeyboardInterrupt:
            print(f"INTERRUPTED {rank}", flush=True)
            sys.exit(0)
        """
    )
    path = tmp_path / "ctrl_c.py"
    path.write_text(source)
    env = {k: v for k, v in os.environ.items() if not k.startswith("IPYMPI_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    n = 3
    cmd = [sys.executable, "-m", "ipympi.run", "-n", str(n), "--timeout", "30"]
    cmd += ["--no-deadlock-check", str(path)]  # the ranks block on purpose
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path
    )
    try:
        assert proc.stdout is not None
        pids = {}
        deadline = time.monotonic() + 20
        while len(pids) < n:
            line = proc.stdout.readline()
            assert line and time.monotonic() < deadline, "the ranks never got ready"
            if line.startswith("READY"):
                _, r, pid = line.split()
                pids[int(r)] = int(pid)
        time.sleep(0.5)  # every rank is inside Recv now
        t0 = time.monotonic()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
        elapsed = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    interrupted = sorted(int(x.split()[1]) for x in out.splitlines() if x.startswith("INTER"))
    assert interrupted == list(range(n)), (out, err)
    assert "RECEIVED" not in out
    assert proc.returncode == 130, (proc.returncode, err)
    assert elapsed < 10, elapsed
    for pid in pids.values():  # no rank process is left behind
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        with open(f"/proc/{pid}/stat") as f:
            assert f.read().split()[2] == "Z", f"rank pid {pid} still running"


def test_interrupted_receive_is_withdrawn_and_the_rank_goes_on(run_mpi) -> None:
    """KeyboardInterrupt in a blocked Recv/Wait/Probe; the rank then receives normally."""
    body = """
    import signal
    import threading

    def interrupt_me_soon():
        threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGINT)).start()

    if rank == 1:
        for what in ("Recv", "recv", "Probe", "Wait"):
            interrupt_me_soon()
            t0 = time.monotonic()
            req = None
            try:
                if what == "Recv":
                    comm.Recv(np.zeros(4, "i"), 0, 5)
                elif what == "recv":
                    comm.recv(source=0, tag=5)
                elif what == "Probe":
                    comm.Probe(0, 5)
                else:
                    req = comm.Irecv(got := np.zeros(4, "i"), 0, 5)
                    req.Wait()
                raise AssertionError(f"{what} returned with nothing to receive")
            except KeyboardInterrupt:
                assert time.monotonic() - t0 < 5
            comm.send(what, 0, 6)  # now rank 0 sends the message
            if req is not None:  # the user's own request is still posted: wait again
                req.Wait()
                assert (got == np.arange(4)).all()
            else:  # the interrupted receive took nothing: this one gets the message
                got = np.zeros(4, "i")
                comm.Recv(got, 0, 5)
                assert (got == np.arange(4)).all()
            assert not comm.Iprobe(0, 5)
    elif rank == 0:
        for _ in range(4):
            comm.recv(source=1, tag=6)
            comm.Send(np.arange(4, dtype="i"), 1, 5)
    """
    assert_ok(run_mpi(2, program(body)), 2)


SIZES_BODY = """
st = MPI.Status()
# -- non-overtaking: one sender, many messages, eager and rendezvous interleaved (P-21)
sizes = [0, 8, EAGER, EAGER + 1, 1_000_000, 100, 70_000, 3, EAGER - 1, 200_000, 1, 5]
msgs = [pattern(sizes[k % len(sizes)], k) for k in range(2 * len(sizes))]
reqs = []
for k, m in enumerate(msgs):
    send = comm.Issend if k % 3 == 0 else comm.Isend
    reqs.append(send(m, nxt, 5))
buf = np.zeros(1_000_000, np.uint8)
for k, m in enumerate(msgs):
    comm.Recv(buf, prv, MPI.ANY_TAG, st)
    assert st.Get_count() == m.size, (k, st.Get_count(), m.size)
    assert (buf[: m.size] == pattern(m.size, k)).all(), k
MPI.Request.Waitall(reqs)
# the same with lower-case objects of mixed sizes
objs = [{"k": k, "data": bytes([k % 256]) * sizes[k % len(sizes)]} for k in range(12)]
reqs = [comm.isend(o, nxt, 6) for o in objs]
for k in range(12):
    got = comm.recv(source=prv, tag=6)
    assert got["k"] == k and got["data"] == bytes([k % 256]) * sizes[k % len(sizes)]
MPI.Request.Waitall(reqs)

# -- the eager/rendezvous boundary: 64 KiB - 1, 64 KiB, 64 KiB + 1 bytes
for k, nbytes in enumerate((EAGER - 1, EAGER, EAGER + 1)):
    for mode in (comm.Isend, comm.Issend):
        m = pattern(nbytes, rank + k)
        got = np.zeros(nbytes + 16, np.uint8)
        req = mode(m, nxt, 7)
        comm.Recv(got, prv, 7, st)
        req.Wait()
        assert st.Get_count() == nbytes and (got[:nbytes] == pattern(nbytes, prv + k)).all()
        assert (got[nbytes:] == 0).all()
    # pickles around the boundary too
    for extra in (-40, -20, 0, 20):
        obj = bytes(max(nbytes + extra, 0))
        req = comm.isend(obj, nxt, 8)
        assert comm.recv(source=prv, tag=8) == obj
        req.wait()
# exact-size receive buffers at the boundary, and one byte short -> ERR_TRUNCATE
for nbytes in (EAGER, EAGER + 1):
    req = comm.Isend(pattern(nbytes, 1), nxt, 9)
    exact = np.zeros(nbytes, np.uint8)
    comm.Recv(exact, prv, 9)
    assert (exact == pattern(nbytes, 1)).all()
    req.Wait()
    req = comm.Isend(pattern(nbytes, 2), nxt, 10)
    short = np.zeros(nbytes, np.uint8)
    raises(MPI.ERR_TRUNCATE, comm.Recv, [short, nbytes - 1, MPI.BYTE], prv, 10, st)
    assert (st.source, st.tag) == (prv, 10)
    assert (short[:-1] == pattern(nbytes, 2)[:-1]).all() and short[-1] == 0
    req.Wait()

# -- large messages with truncation: status set, nothing outside the buffer written (P-7)
for nbytes, room in ((1 << 20, 1 << 19), (3_000_000, EAGER), (EAGER + 1, 10)):
    req = comm.Isend(pattern(nbytes, 3), nxt, 11)
    dst = np.full(room + 1000, 7, np.uint8)
    st = MPI.Status()
    raises(MPI.ERR_TRUNCATE, comm.Recv, [dst, room, MPI.BYTE], MPI.ANY_SOURCE, MPI.ANY_TAG, st)
    assert (st.source, st.tag) == (prv, 11)
    assert (dst[:room] == pattern(nbytes, 3)[:room]).all() and (dst[room:] == 7).all()
    req.Wait()
    # the next message arrives intact: nothing was lost or left behind
    req = comm.Isend(pattern(100, 4), nxt, 12)
    got = np.zeros(100, np.uint8)
    comm.Recv(got, prv, MPI.ANY_TAG, st)
    assert st.tag == 12 and (got == pattern(100, 4)).all()
    req.Wait()
# a large Irecv truncated, completed by Wait
rreq = comm.Irecv([dst, 1000, MPI.BYTE], prv, 13)
req = comm.Isend(pattern(500_000, 5), nxt, 13)
raises(MPI.ERR_TRUNCATE, rreq.Wait, st)
assert st.tag == 13 and (dst[:1000] == pattern(500_000, 5)[:1000]).all()
req.Wait()

# -- zero-length messages (P-6)
for tag, (out, inp) in enumerate([
    (np.empty(0, "i"), np.empty(0, "i")), (b"", bytearray()), ([None, MPI.INT], [None, MPI.INT]),
    ([None, 0, MPI.INT], [None, 0, MPI.INT]), (np.empty(0), np.full(3, 9.0)),
], start=20):
    req = comm.Isend(out, nxt, tag)
    comm.Recv(inp, prv, tag, st)
    req.Wait()
    assert (st.source, st.tag, st.Get_count(), st.Get_count(MPI.INT)) == (prv, tag, 0, 0)
assert (inp == 9.0).all()  # an empty message leaves the buffer alone
req = comm.Issend(b"", nxt, 30)
comm.Recv([None, MPI.BYTE], prv, 30, st)
req.Wait()
assert st.Get_count() == 0
comm.Sendrecv(b"", nxt, 31, bytearray(), prv, 31, st)
assert st.Get_count() == 0 and st.source == prv
req = comm.Isend(b"", rank, 32)  # zero bytes to myself
comm.Recv(bytearray(4), rank, 32, st)
req.Wait()
assert (st.source, st.Get_count()) == (rank, 0)
req = comm.Isend(b"", nxt, 33)
comm.Probe(prv, 33, st)
assert st.Get_count() == 0
comm.Recv([None, 0, MPI.BYTE], prv, 33)
req.Wait()

# -- self-sends (P-5): nonblocking send to myself, then receive
for nbytes in (0, 10, EAGER, EAGER + 1, 2_000_000):
    m = pattern(nbytes, 6)
    req = comm.Isend(m, rank, 40)
    got = np.zeros(nbytes, np.uint8)
    comm.Recv(got, rank, 40, st)
    req.Wait()
    assert (st.source, st.Get_count()) == (rank, nbytes) and (got == m).all()
    req = comm.Issend(m, rank, 41)
    assert not req.Test()  # synchronous: not before the receive
    comm.Recv(got, MPI.ANY_SOURCE, 41)
    req.Wait()
    assert (got == m).all()
big = pattern(1_500_000, 7)
got = np.zeros_like(big)
comm.Sendrecv(big, rank, 42, got, rank, 42, st)
assert (got == big).all() and st.source == rank
rep = pattern(300_000, 8)
comm.Sendrecv_replace(rep, rank, 43, rank, 43)
assert (rep == pattern(300_000, 8)).all()
req = comm.isend({"big": bytes(500_000)}, rank, 44)
assert comm.recv(source=rank, tag=44) == {"big": bytes(500_000)}
req.wait()
req = comm.Isend(pattern(EAGER + 100, 9), rank, 45)  # self-send truncated
small = np.zeros(EAGER, np.uint8)
raises(MPI.ERR_TRUNCATE, comm.Recv, small, rank, 45, st)
assert st.source == rank and (small == pattern(EAGER + 100, 9)[:EAGER]).all()
req.Wait()
assert not comm.Iprobe(rank, MPI.ANY_TAG)
"""


@pytest.mark.parametrize(
    ("n", "env"),
    [(1, None), (2, None), (4, None), (2, NO_VM), (4, NO_VM)],
    ids=["1", "2", "4", "2-no_vm_readv", "4-no_vm_readv"],
)
def test_order_sizes_zero_length_self_and_truncation(
    run_mpi, n: int, env: dict[str, str] | None
) -> None:
    assert_ok(run_mpi(n, program(SIZES_BODY), env=env), n)


@pytest.mark.parametrize("env", [None, NO_VM], ids=["vm_readv", "no_vm_readv"])
def test_any_source_from_three_senders(run_mpi, env: dict[str, str] | None) -> None:
    body = """
    K = 30
    sizes = [10, 70_000, 0, 300, EAGER, EAGER + 1, 1_000_000, 4]

    def nbytes(source, k):
        return sizes[(k + source) % len(sizes)]

    if rank == 0:
        seen = {1: 0, 2: 0, 3: 0}
        buf = np.zeros(1_000_000, np.uint8)
        st = MPI.Status()
        for _ in range(3 * K):
            comm.Recv(buf, MPI.ANY_SOURCE, MPI.ANY_TAG, st)
            source, k = st.source, st.tag
            assert source in seen and k == seen[source], (source, k, seen)  # in order
            seen[source] += 1
            n = nbytes(source, k)
            assert st.Get_count() == n and (buf[:n] == pattern(n, 10 * source + k)).all()
        assert seen == {1: K, 2: K, 3: K}
        for dest in (1, 2, 3):
            comm.send("go", dest, 101)
        # lower case with ANY_SOURCE too
        got = [comm.recv(source=MPI.ANY_SOURCE, tag=100, status=st) for _ in range(3 * K)]
        for source in (1, 2, 3):
            assert [g[1] for g in got if g[0] == source] == list(range(K))
        assert not comm.Iprobe()
    else:
        reqs = [comm.Isend(pattern(nbytes(rank, k), 10 * rank + k), 0, k) for k in range(K)]
        MPI.Request.Waitall(reqs)
        assert comm.recv(source=0, tag=101) == "go"  # ANY_TAG above must not see these:
        for k in range(K):
            comm.send((rank, k), 0, 100)
    """
    assert_ok(run_mpi(4, program(body), env=env), 4)


@pytest.mark.parametrize("case", ["written", "refused", "unread"])
def test_a_large_blocking_send_writes_half_while_its_receiver_reads_the_other(
    run_mpi, case: str
) -> None:
    # a blocking send on this host, its ranks each with a core (forced here), offers to
    # write half of a large message (PUT); its write refused, the receiver reads that
    # half too; a receiver that cannot read gets it all in DATA frames
    body = f"""
    from ipympi.core.protocol import SPLIT_MIN
    from ipympi.progress import engine as engine_module
    engine = comm._live().engine
    engine.transport.alone = True
    writes = []
    def write(*args, kept=engine_module.remote_copy):
        writes.append(args[1][0][2])
        if "{case}" == "refused":
            raise OSError("refused on purpose")
        return kept(*args)
    engine_module.remote_copy = write
    if "{case}" == "unread" and rank == 1:
        engine.vm.available = False
    sizes = [SPLIT_MIN - 1000, SPLIT_MIN, 3 * (1 << 20) + 7]
    for k, n in enumerate(sizes):
        if rank == 0:
            comm.Send(pattern(n, k), 1, k)
            comm.send(bytes(pattern(n, k + 10)), 1, 100 + k)  # a pickle, received as new bytes
        else:
            got = np.zeros(n, np.uint8)
            comm.Recv(got, 0, k)
            assert (got == pattern(n, k)).all(), n
            assert comm.recv(source=0, tag=100 + k) == bytes(pattern(n, k + 10)), n
    comm.Barrier()
    if rank == 0:  # the buffers and pickles from SPLIT_MIN on: the second half of each
        assert len(writes) == 4, writes
        assert {{n - n // 2 for n in sizes[1:]}} <= set(writes), writes
    """
    proc = run_mpi(2, program(body), timeout=60)
    assert_ok(proc, 2)
