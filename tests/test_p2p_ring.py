"""Frames between two ranks of one host through a shared ring (``progress.shmring``).

The ring's logic in one process (its two ends mapped twice): records in order across
many wrap-arounds, no room, the writer held back until the reader mapped the ring and
took every flagged socket frame, the reader's "looking" word. Then real ranks whose
rings are made at their first frame (``IPYMPI_SHM_P2P_AFTER=1``): the order of one
pair's messages when a full ring sends some of them by socket, wildcard receives from
several rings, a synchronous send answered by the progress thread while the receiver
computes, threads that receive at once, when a ring is made (after ``RING_AFTER``
frames to a peer; never with ``IPYMPI_SHM_P2P=0``), and nothing left in ``/dev/shm``.
"""

from __future__ import annotations

import os
import random

import pytest
from conftest import MPI_PRELUDE, assert_ok, mpi_program

from ipympi.core.wire import EAGER, FOREIGN_BASE, RING, WAKE, pack
from ipympi.progress import shmring
from ipympi.progress.shm import total_store_order
from ipympi.progress.shmring import CAPACITY, RING_AFTER, RingIn, RingOut
from ipympi.progress.transport import MAX_FRAME, Transport

pytestmark = pytest.mark.skipif(not total_store_order(), reason="rings need Linux on x86-64")


@pytest.fixture
def run_mpi(run_mpi):
    """Jobs whose ranks make a ring to a peer with their first frame to it."""

    def run(*args, env=None, **kwargs):
        return run_mpi(*args, env={"IPYMPI_SHM_P2P_AFTER": "1", **(env or {})}, **kwargs)

    return run


# -- the ring, in one process ----------------------------------------------------------
@pytest.fixture
def ends():
    out = RingOut.create(None)
    name = out.name
    inn = RingIn.open(name, CAPACITY)
    yield out, inn
    out.close()
    inn.close()
    assert not os.path.exists(name)


def test_records_come_out_in_order_across_many_wrap_arounds(ends) -> None:
    out, inn = ends
    rng = random.Random(7)
    sent: list[bytes] = []
    received: list[bytes] = []
    total = 0
    while total < 5 * CAPACITY:
        frame = bytes(rng.getrandbits(8) for _ in range(rng.choice([0, 1, 7, 8, 40, 999, 5000])))
        while not out.put(frame):  # no room: the reader takes some
            taken = inn.take()
            assert taken is not None
            received.append(taken)
        sent.append(frame)
        total += len(frame) + 8
        if rng.random() < 0.3:
            while (taken := inn.take()) is not None:
                received.append(taken)
    while (taken := inn.take()) is not None:
        received.append(taken)
    assert received == sent
    assert not inn.holds()


def test_a_full_ring_takes_nothing_until_the_reader_makes_room(ends) -> None:
    out, inn = ends
    frame = b"x" * 60000
    count = 0
    while out.put(frame):
        count += 1
    assert count == CAPACITY // 60008  # a length word each, padded to 8 bytes
    assert inn.take() == frame
    assert out.put(frame)  # after a skip to the start
    assert not out.put(b"y" * (CAPACITY + 1))  # larger than the ring: never fits


def test_two_frames_of_the_largest_size_fit_at_once(ends) -> None:
    out, inn = ends
    frames = [bytes([i]) * MAX_FRAME for i in (1, 2)]
    assert all(out.put(frame) for frame in frames)
    assert [inn.take(), inn.take(), inn.take()] == [*frames, None]


def test_the_writer_waits_until_the_reader_mapped_the_ring() -> None:
    out = RingOut.create(None)
    try:
        assert not out.put(b"early")  # nobody reads yet: it goes by socket
        inn = RingIn.open(out.name, CAPACITY)
        try:
            assert not os.path.exists(out.name)  # the reader removed the name
            assert out.put(b"now")
            assert inn.take() == b"now"
        finally:
            inn.close()
    finally:
        out.close()


def test_the_writer_waits_until_the_reader_took_its_flagged_frames(ends) -> None:
    out, inn = ends
    out.sent += 2  # two frames went by socket, flagged
    assert not out.put(b"a")
    inn.took_flagged()
    assert not out.put(b"a")
    inn.took_flagged()
    assert out.put(b"a")
    assert inn.take() == b"a"


def test_the_reader_says_whether_writers_must_wake_it(ends) -> None:
    out, inn = ends
    assert out.must_wake()  # a new ring: the reader may sleep
    assert out.must_wake()  # a wake-up per record
    inn.look(True)  # the reader looks at its rings before any sleep
    assert not out.must_wake()
    inn.look(False)
    assert out.must_wake()


def test_the_number_of_frames_before_a_ring(monkeypatch) -> None:
    monkeypatch.delenv("IPYMPI_SHM_P2P_AFTER", raising=False)
    monkeypatch.delenv("IPYMPI_SHM_P2P", raising=False)
    assert shmring.ring_after() == RING_AFTER
    monkeypatch.setenv("IPYMPI_SHM_P2P_AFTER", "3")
    assert shmring.ring_after() == 3
    monkeypatch.setenv("IPYMPI_SHM_P2P", "0")
    assert shmring.ring_after() == 0


# -- two transports in one process -----------------------------------------------------
@pytest.fixture
def transports(tmp_path):
    """Two ranks' transports; the sender makes its ring with its first frame. The
    reader maps it when it reads the announcement, as its engine does."""
    ranks = [Transport(rank, str(tmp_path), None) for rank in range(2)]
    ranks[0].ring_after = 1
    yield ranks
    for transport in ranks:
        transport.close(linger_ms=0)


def _read(receiver: Transport, sender: Transport) -> bytes:
    """The receiver's next frame (the sender's queued frames go meanwhile: one process)."""
    while True:
        sender.flush()
        frame = receiver.recv_nowait()
        if frame is None:
            continue
        assert type(frame) is bytes
        if frame[0] == RING:
            receiver.attach(frame)
        elif frame[0] != WAKE:
            return frame


def _frame(i: int, nbytes: int) -> bytes:
    return pack(EAGER, 0, 0, 0, 0, i, 0, 0, 0, nbytes) + bytes([i % 256]) * nbytes


def test_frames_by_ring_and_by_socket_arrive_in_order(transports) -> None:
    sender, receiver = transports
    frames = [_frame(i, n) for i, n in enumerate([0, 10, 60000, 60000, 60000, 5, 65536] * 8)]
    sender.send(1, frames[0])  # by socket, then the ring's announcement
    assert _read(receiver, sender) == frames[0]
    assert 1 in sender.rings_out
    for frame in frames[1:]:  # the ring fills up: the rest by socket, flagged
        sender.send(1, frame)
    got = [_read(receiver, sender) for _ in frames[1:]]
    assert got == frames[1:]  # in order, every flag taken off
    assert sender.rings_out[1].sent > 0  # some went by socket
    assert 1 not in receiver.pending


def test_a_sleeping_reader_is_woken_by_a_write(transports) -> None:
    sender, receiver = transports
    sender.send(1, _frame(0, 1))
    assert _read(receiver, sender) == _frame(0, 1)
    sender.send(1, _frame(1, 1))
    assert _read(receiver, sender) == _frame(1, 1)  # from the ring now
    assert receiver.may_sleep()  # nothing waits: the reader may sleep
    sender.send(1, _frame(2, 1))  # ... so the writer sends a WAKE with the record
    assert receiver.readable(5000)  # a sleep on the socket ends at once
    assert receiver.has_input() and not receiver.may_sleep()
    assert _read(receiver, sender) == _frame(2, 1)


def test_a_ring_frame_that_names_no_ring_of_this_job_is_dropped(transports, tmp_path) -> None:
    _, receiver = transports
    victim = tmp_path / "victim"
    victim.write_text("kept")
    ring = RingOut.create(None)  # a real ring, announced by a process of another job
    try:
        for path, wsource in ((str(victim), 0), (ring.name, FOREIGN_BASE)):
            receiver.attach(pack(RING, 0, 0, 0, 0, 0, wsource, 0, 0, CAPACITY) + path.encode())
        assert victim.read_text() == "kept" and os.path.exists(ring.name)
        assert not receiver.rings_in
    finally:
        ring.segment.unlink()
        ring.close()


# -- real ranks ------------------------------------------------------------------------
PRELUDE = (
    MPI_PRELUDE
    + """

def rings():
    transport = comm._impl.engine.transport
    return transport.rings_out, transport.rings_in
"""
)


def test_a_full_ring_keeps_the_order_of_one_pairs_messages(run_mpi) -> None:
    # Rank 1 receives only once rank 0 has sent everything: the ring fills up and the
    # later messages go by socket (flagged); once rank 1 took them all, the ring again.
    body = """
    sizes = [8, 60000, 100, 30000, 0, 65536 - 64, 1, 4000] * 12

    def phase(first):
        if rank == 0:
            reqs = [comm.Isend(np.full(n, (first + i) % 251, dtype=np.uint8), 1, tag=5)
                    for i, n in enumerate(sizes)]
            for i in range(50):
                comm.send(("obj", first + i), 1, tag=5)
            MPI.Request.Waitall(reqs)
            comm.Barrier()
        else:
            comm.Barrier()
            for i, n in enumerate(sizes):
                buf = np.empty(n, dtype=np.uint8)
                status = MPI.Status()
                comm.Recv(buf, 0, 5, status)
                assert status.Get_count() == n and (buf == (first + i) % 251).all(), (i, n)
            got = [comm.recv(None, 0, 5) for _ in range(50)]
            assert got == [("obj", first + i) for i in range(50)]
        comm.Barrier()

    def pingpong():
        # once rank 0 has its answer, rank 1 has read every frame rank 0 sent before
        if rank == 0:
            comm.send("ping", 1)
            comm.recv(None, 1)
        else:
            comm.recv(None, 0)
            comm.send("pong", 0)

    pingpong()
    pingpong()  # rank 1 read the ring's announcement, which came before this ping
    phase(0)
    pingpong()  # the ring takes rank 0's next frames
    if rank == 0:
        out = rings()[0][1]
        flagged, written = out.sent, out.head
    phase(1)
    if rank == 0:
        print("FLAGGED", flagged, "WRITTEN", written, out.head, flush=True)
    """
    proc = run_mpi(2, mpi_program(PRELUDE, body))
    assert_ok(proc, 2)
    line = next(line for line in proc.stdout.splitlines() if line.startswith("FLAGGED"))
    _, flagged, _, before, after = line.split()
    # some went by socket; the ring took frames again once the socket's were taken
    assert int(flagged) > 0 and int(after) > int(before) > 0, line


def test_wildcard_receives_from_several_rings(run_mpi) -> None:
    body = """
    if rank == 0:
        seen = {r: [] for r in range(1, size)}
        for _ in range(100 * (size - 1)):
            status = MPI.Status()
            msg = comm.recv(None, MPI.ANY_SOURCE, MPI.ANY_TAG, status)
            assert msg[0] == status.Get_source() and msg[1] == status.Get_tag()
            seen[msg[0]].append(msg[2])
        assert all(got == list(range(100)) for got in seen.values()), seen
        assert sorted(rings()[1]) == list(range(1, size))
    else:
        for i in range(100):
            comm.send((rank, i % 3, i), 0, tag=i % 3)
    comm.Barrier()
    """
    assert_ok(run_mpi(4, mpi_program(PRELUDE, body)), 4)


def test_a_synchronous_send_is_answered_while_the_receiver_computes(run_mpi, tmp_path) -> None:
    # Rank 1 posts its receive and computes until rank 0 says its Ssend completed:
    # the progress thread took the message from the ring and answered it.
    flag = tmp_path / "sent"
    body = f"""
    import os
    for i in range(3):
        comm.sendrecv(i, nxt, source=prv)  # the rings exist now
    if rank == 0:
        comm.Ssend(np.arange(4.0), 1, tag=9)
        open({str(flag)!r}, "w").close()
    else:
        buf = np.zeros(4)
        req = comm.Irecv(buf, 0, tag=9)
        deadline = time.monotonic() + 20
        x = 0
        while not os.path.exists({str(flag)!r}):
            x += 1  # pure Python: the main thread is not in MPI
            assert time.monotonic() < deadline, "the send never completed"
        req.Wait()
        assert (buf == np.arange(4.0)).all()
    comm.Barrier()
    """
    assert_ok(run_mpi(2, mpi_program(PRELUDE, body), timeout=40), 2)


def test_threads_receive_from_rings_at_once(run_mpi) -> None:
    body = """
    import threading
    assert MPI.Query_thread() == MPI.THREAD_MULTIPLE
    N = 300
    if rank == 0:
        for i in range(N):
            comm.send(i, 1, tag=1)
            comm.send(-i, 1, tag=2)
    else:
        got = {1: [], 2: []}
        def receive(tag):
            for _ in range(N):
                got[tag].append(comm.recv(None, 0, tag))
        threads = [threading.Thread(target=receive, args=(t,)) for t in (1, 2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert got == {1: list(range(N)), 2: [-i for i in range(N)]}, got
    comm.Barrier()
    """
    assert_ok(run_mpi(2, mpi_program(PRELUDE, body), timeout=40), 2)


@pytest.mark.parametrize(
    ("env", "frames", "made"),
    [
        ({}, RING_AFTER // 2, False),
        ({}, RING_AFTER, True),
        ({"IPYMPI_SHM_P2P": "0"}, 3 * RING_AFTER, False),
    ],
)
def test_when_a_ring_is_made(run_mpi, env, frames, made) -> None:
    body = f"""
    if rank == 0:
        for i in range({frames}):
            comm.send(i, 1)
    else:
        assert [comm.recv(None, 0) for i in range({frames})] == list(range({frames}))
    comm.Barrier()
    if rank == 0:
        assert (1 in rings()[0]) is {made}, rings()
    """
    # the fixture's IPYMPI_SHM_P2P_AFTER=1 is taken back: the default rule
    proc = run_mpi(2, mpi_program(PRELUDE, body), env={"IPYMPI_SHM_P2P_AFTER": "", **env})
    assert_ok(proc, 2)


def _ring_files(pids: list[int]) -> list[str]:
    names = os.listdir("/dev/shm") if os.path.isdir("/dev/shm") else []
    return [n for n in names if any(n.startswith(f"ipympi-ring-{pid}-") for pid in pids)]


def test_rings_leave_nothing_in_dev_shm(run_mpi) -> None:
    # A ring's reader removes its name as soon as it has mapped the ring.
    body = """
    import os
    print(f"PID {os.getpid()}", flush=True)
    if rank == 0:
        comm.send("hello", 1)
    else:
        assert comm.recv(None, 0) == "hello"
    comm.Barrier()
    """
    proc = run_mpi(2, mpi_program(PRELUDE, body))
    assert_ok(proc, 2)
    pids = [int(line.split()[1]) for line in proc.stdout.splitlines() if line.startswith("PID")]
    assert len(pids) == 2 and _ring_files(pids) == []


def test_a_failed_job_leaves_no_ring(run_mpi) -> None:
    # Rank 1 fails without a receive: whether or not its progress thread mapped the
    # ring meanwhile, the name goes with the job.
    body = """
    import os
    if rank == 0:
        print(f"PID {os.getpid()}", flush=True)
        comm.send("hello", 1)
        time.sleep(5)
    else:
        time.sleep(0.5)
        os._exit(3)
    """
    proc = run_mpi(2, mpi_program(PRELUDE, body, ok=False))
    assert proc.returncode != 0
    pids = [int(line.split()[1]) for line in proc.stdout.splitlines() if line.startswith("PID")]
    assert pids and _ring_files(pids) == [], proc.stdout
