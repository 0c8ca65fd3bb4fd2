"""Communicator calls of MPI 4 and 4.1, and mpi4py's extras, on real ranks.

Create_from_group / Create_from_groups (no parent communicator), Clone, hints
kept by a communicator, Get_parent, Disconnect, Split_type on an
intercommunicator, buffers attached to one communicator (Attach_buffer,
Flush_buffer, Iflush_buffer, BUFFER_AUTOMATIC), Isendrecv / Isendrecv_replace,
Message.Probe / Message.Iprobe, and recv into a given buffer.
"""

from __future__ import annotations

import sys

import pytest
from conftest import MPI_PRELUDE, assert_ok, mpi_program

NPROCS = [1, 2, 4]


def run(run_mpi, n: int, body: str) -> None:
    assert_ok(run_mpi(n, mpi_program(MPI_PRELUDE, body), timeout=60), n)


@pytest.mark.parametrize("n", NPROCS)
def test_communicators_from_groups(run_mpi, n: int) -> None:
    body = """
    world = comm.Get_group()
    # every rank: the whole world, congruent with COMM_WORLD
    c = MPI.Intracomm.Create_from_group(world)
    assert MPI.Comm.Compare(comm, c) == MPI.CONGRUENT
    assert c.Get_errhandler() == MPI.ERRORS_RETURN and c.Get_name() == ""
    assert c.allreduce(rank) == size * (size - 1) // 2
    c.Free()
    # two string tags at once, over different groups: evens and odds, then all
    mine = world.Incl(list(range(rank % 2, size, 2)))
    half = MPI.Intracomm.Create_from_group(mine, "half")
    assert half.size == mine.size and half.rank == rank // 2
    assert half.allgather(rank) == list(range(rank % 2, size, 2))
    again = MPI.Intracomm.Create_from_group(world, stringtag="all")
    assert again.allreduce(1) == size
    # outside the group: COMM_NULL, with no communication
    assert MPI.Intracomm.Create_from_group(MPI.GROUP_EMPTY) == MPI.COMM_NULL
    raises(MPI.ERR_GROUP, MPI.Intracomm.Create_from_group, MPI.GROUP_NULL)
    try:
        MPI.Intracomm.Create_from_group(world, stringtag=5)
        raise AssertionError("a non-str string tag was taken")
    except TypeError:
        pass
    half.Free()
    again.Free()
    if size > 1:
        # an intercommunicator between the lower and the upper half, no parent
        low = world.Range_incl([(0, size // 2 - 1, 1)])
        high = world.Range_incl([(size // 2, size - 1, 1)])
        local, remote = (low, high) if rank < size // 2 else (high, low)
        local_leader = 0 if local is low else local.size - 1
        remote_leader = remote.size - 1 if local is low else 0
        inter = MPI.Intercomm.Create_from_groups(local, local_leader, remote, remote_leader)
        assert inter.Is_inter() and inter.rank == local.rank
        assert (inter.size, inter.remote_size) == (local.size, remote.size)
        assert MPI.Group.Compare(inter.Get_remote_group(), remote) == MPI.IDENT
        got = inter.allgather(rank)
        assert got == [world.Translate_ranks([r], world)[0] for r in
                       MPI.Group.Translate_ranks(remote, list(range(remote.size)), world)]
        merged = inter.Merge(local is high)
        assert merged.size == size and merged.allreduce(1) == size
        merged.Free()
        inter.Free()
        raises(MPI.ERR_RANK, MPI.Intercomm.Create_from_groups, local, local.size, remote, 0)
        raises(MPI.ERR_GROUP, MPI.Intercomm.Create_from_groups, world, 0, world, 0)
    """
    run(run_mpi, n, body)


@pytest.mark.parametrize("n", NPROCS)
def test_clone_parent_disconnect_and_hints(run_mpi, n: int) -> None:
    body = """
    cart = comm.Create_cart([size], [True])
    clone = cart.Clone()
    assert type(clone) is MPI.Cartcomm and clone.is_topo and clone.dims == [size]
    assert MPI.Comm.Compare(cart, clone) == MPI.CONGRUENT
    assert not comm.is_topo
    clone.Free()
    parent = MPI.Comm.Get_parent()
    assert isinstance(parent, MPI.Intercomm) and parent == MPI.COMM_NULL
    # Disconnect waits for what is in progress on the communicator, then frees it
    d = comm.Dup()
    req = d.Isend(np.array([rank], "i"), nxt, 7)
    got = np.zeros(1, "i")
    d.Recv(got, prv, 7)
    d.Disconnect()
    assert d == MPI.COMM_NULL and req.Test() and got[0] == prv
    raises(MPI.ERR_COMM, comm.Disconnect)
    raises(MPI.ERR_COMM, MPI.COMM_NULL.Disconnect)
    # hints: none by default; Dup(info) with INFO_NULL; Set_info(INFO_NULL) is refused
    e = comm.Dup(MPI.INFO_NULL)
    e2 = e.Dup_with_info(MPI.INFO_NULL)
    raises(MPI.ERR_ARG, e.Set_info, MPI.INFO_NULL)
    e.Free()
    e2.Free()
    assert MPI.COMM_NULL.Get_name() == "MPI_COMM_NULL"
    """
    run(run_mpi, n, body)


@pytest.mark.parametrize("n", [2, 4])
def test_split_type_on_an_intercommunicator(run_mpi, n: int) -> None:
    body = """
    low = rank < size // 2
    intra = comm.Split(0 if low else 1, rank)
    inter = intra.Create_intercomm(0, comm, size // 2 if low else 0)
    shared = inter.Split_type(MPI.COMM_TYPE_SHARED)  # one host: both groups whole
    assert shared.Is_inter()
    assert (shared.size, shared.remote_size) == (inter.size, inter.remote_size)
    assert shared.allreduce(1) == inter.remote_size
    assert inter.Split_type(MPI.UNDEFINED) == MPI.COMM_NULL
    assert inter.Split_type(MPI.COMM_TYPE_HW_GUIDED) == MPI.COMM_NULL  # no resource named
    assert inter.Split_type(MPI.COMM_TYPE_HW_UNGUIDED) == MPI.COMM_NULL  # no smaller level
    alone = comm.Split_type(MPI.COMM_TYPE_SHARED if rank == 0 else MPI.UNDEFINED)
    assert (alone != MPI.COMM_NULL) == (rank == 0)
    raises(MPI.ERR_ARG, comm.Split_type, 12345)
    shared.Free()
    inter.Free()
    intra.Free()
    """
    run(run_mpi, n, body)


@pytest.mark.parametrize("n", NPROCS)
def test_buffers_of_a_communicator(run_mpi, n: int) -> None:
    body = """
    c = comm.Dup()
    raises(MPI.ERR_BUFFER, c.bsend, "x", nxt)  # no buffer anywhere
    buf = bytearray(4 * (1000 + MPI.BSEND_OVERHEAD))
    c.Attach_buffer(buf)
    raises(MPI.ERR_BUFFER, c.Attach_buffer, buf)
    raises(MPI.ERR_BUFFER, comm.bsend, "x", nxt)  # the buffer is c's only
    for tag in range(4):
        c.Bsend(np.zeros(125), nxt, tag)  # 1000 bytes each
    raises(MPI.ERR_BUFFER, c.Bsend, np.zeros(1000), nxt, 9)  # more than the buffer holds
    flush = c.Iflush_buffer()
    for tag in range(4):
        c.Recv(np.zeros(125), prv, tag)
    flush.Wait()
    c.Flush_buffer()
    assert c.Detach_buffer() is buf and c.Detach_buffer() is None
    # an automatic buffer has no limit
    c.Attach_buffer(MPI.BUFFER_AUTOMATIC)
    req = c.Ibsend(np.zeros(100000), nxt, 1)
    c.Recv(np.zeros(100000), prv, 1)
    req.Wait()
    assert c.Detach_buffer() is MPI.BUFFER_AUTOMATIC
    # the process's buffer serves communicators without one
    MPI.Attach_buffer(MPI.BUFFER_AUTOMATIC)
    c.bsend("y" * 1000, nxt, 2)
    assert c.recv(None, prv, 2) == "y" * 1000
    MPI.Iflush_buffer().Wait()
    MPI.Flush_buffer()
    assert MPI.Detach_buffer() is MPI.BUFFER_AUTOMATIC
    c.Free()
    """
    run(run_mpi, n, body)


@pytest.mark.parametrize("n", NPROCS)
def test_nonblocking_sendrecv_probes_and_object_buffers(run_mpi, n: int) -> None:
    body = """
    import pickle
    import warnings

    st = MPI.Status()
    rbuf = np.full(3, -1, "i")
    req = comm.Isendrecv(np.array([rank, rank], "i"), nxt, 3, rbuf, prv, 3)
    req.Wait(st)
    assert list(rbuf) == [prv, prv, -1]
    assert (st.source, st.tag, st.Get_count(MPI.INT)) == (prv, 3, 2)
    buf = np.array([rank] * 4, "i")
    req = comm.Isendrecv_replace(buf, nxt, 4, prv, 4)
    assert not req.Test() or list(buf) == [prv] * 4
    req.Wait()
    assert list(buf) == [prv] * 4
    comm.Isendrecv(None, MPI.PROC_NULL, 0, None, MPI.PROC_NULL, 0).Wait(st)
    assert st.source == MPI.PROC_NULL
    raises(MPI.ERR_RANK, comm.Isendrecv, buf, size, 0, buf, prv, 0)
    # matched probes as Message class methods
    assert MPI.Message.Iprobe(comm, prv, 99) is None  # nobody sends tag 99
    req = comm.Isend(np.array([rank], "i"), nxt, 5)
    m = MPI.Message.Probe(comm, prv, 5)
    got = np.zeros(1, "i")
    m.Recv(got)
    assert got[0] == prv and not m
    req.Wait()
    req = comm.isend(("obj", rank), nxt, 6)
    m = None
    while m is None:
        m = MPI.Message.iprobe(comm, prv, 6)
    assert m.recv() == ("obj", prv)
    req.wait()
    # recv's deprecated buf: a UserWarning, and the message must fit
    req = comm.isend("z" * 100, nxt, 8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        raises(MPI.ERR_TRUNCATE, comm.recv, 10, prv, 8)
    assert [w.category for w in caught] == [UserWarning]
    req.wait()
    req = comm.isend("w", nxt, 9)
    assert comm.irecv(bytearray(64), prv, 9).wait() == "w"
    req.wait()
    # an empty message is None; a buffer receive's wait() gives no object
    req = comm.Isend([None, 0, MPI.BYTE], nxt, 10)
    assert comm.recv(None, prv, 10) is None
    req.Wait()
    req = comm.Isend(pickle.dumps("p"), nxt, 11)
    assert comm.Irecv(bytearray(64), prv, 11).wait() is None
    req.Wait()
    """
    run(run_mpi, n, body)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux loopback")
def test_split_types_across_two_hosts(run_mpi) -> None:
    # ranks 0, 1 on one "host" (127.0.0.2), ranks 2, 3 on the other (127.0.0.3)
    body = """
    host = rank // 2
    unguided = comm.Split_type(MPI.COMM_TYPE_HW_UNGUIDED, key=-rank)
    assert unguided.size == 2 and unguided.rank == 1 - rank % 2  # by host, then key
    assert unguided.allgather(rank) == [2 * host + 1, 2 * host]
    assert unguided.Split_type(MPI.COMM_TYPE_HW_UNGUIDED) == MPI.COMM_NULL  # no finer level
    shared = comm.Split_type(MPI.COMM_TYPE_SHARED)
    assert MPI.Comm.Compare(shared, unguided) == MPI.SIMILAR
    # an intercommunicator of evens and odds: each rank meets its host's other rank
    intra = comm.Split(rank % 2, rank)
    inter = intra.Create_intercomm(0, comm, 1 - rank % 2)
    both = inter.Split_type(MPI.COMM_TYPE_SHARED)
    assert (both.size, both.remote_size) == (1, 1)
    assert both.allgather(rank) == [rank ^ 1]
    for c in (unguided, shared, both, inter, intra):
        c.Free()
    """
    proc = run_mpi(
        4,
        mpi_program(MPI_PRELUDE, body),
        timeout=60,
        launcher_args=("--hosts", "127.0.0.2:2,127.0.0.3:2"),
    )
    assert_ok(proc, 4)
