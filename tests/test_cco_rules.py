"""Rules of collective use on real ranks: IN_PLACE, roots, bad input, isolation, mismatches.

* ``MPI.IN_PLACE`` exactly where each collective allows it (blocking, nonblocking and
  persistent forms give the defined result); where it is not allowed it raises.
* Bad input raises ``MPI.Exception`` on every rank without a hang: root out of range
  (ERR_ROOT), invalid op (ERR_OP), op not defined for the datatype (ERR_OP), counts
  that cannot match (ERR_COUNT); the communicator keeps working afterwards.
* Collective traffic never matches point-to-point receives, not even a pending
  ``Irecv(ANY_SOURCE, ANY_TAG)`` posted before the collectives.
* Ranks that call different collectives (another kind, another root, another size,
  blocking against nonblocking) each get ERR_NOT_SAME naming both calls, either from
  the mismatched call or from their next collective; point-to-point still works.
* Nonblocking-collective requests complete with an empty status; ``Cancel`` and
  ``Free`` on them do not break the collective.

Rules: INVENTORY §4.3 C-2, C-3, C-6, C-7, C-10..C-28 (IN_PLACE), C-33, C-34, C-36,
C-40, C-41; §4.2 (op/datatype groups).
"""

from __future__ import annotations

import textwrap

import pytest
from conftest import assert_ok

NPROCS = [1, 2, 3, 4, 5]

PRELUDE = '''
import time
import numpy as np
from ipympi import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
nxt, prv = (rank + 1) % size, (rank - 1) % size
Request = MPI.Request


def block(r, k, salt=0, dtype="f8"):
    """Rank r's distinctive block of k elements."""
    return ((np.arange(k) * 7 + r * 31 + salt * 11) % 101 + 1).astype(dtype)


def concat(blocks, dtype="f8"):
    return np.concatenate([np.asarray(b, dtype) for b in blocks] + [np.empty(0, dtype)])


def same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def raises(cls, fn, *args, **kwargs):
    """fn(*args) raises MPI.Exception of class cls (any class if cls is None)."""
    try:
        fn(*args, **kwargs)
    except MPI.Exception as exc:
        assert cls is None or exc.Get_error_class() == cls, (fn, args, exc, cls)
        assert str(exc)
        return exc
    raise AssertionError(f"{fn.__name__}{args} did not raise MPI.Exception")


def value_error(fn, *args):
    """fn(*args) raises ValueError: mpi4py's error for buffer forms that cannot hold
    (buffers that disagree, counts of the wrong length, blocks outside the buffer)."""
    try:
        fn(*args)
    except ValueError as exc:
        assert str(exc)
        return
    raise AssertionError(f"{fn.__name__}{args} did not raise ValueError")


def works():
    """The communicator still works: a collective after the errors gives the right sum."""
    out = np.zeros(1)
    comm.Allreduce(np.array([rank + 1.0]), out)
    assert out[0] == size * (size + 1) / 2, out
'''


def program(body: str) -> str:
    """The prelude, the test body and the final ``OK <rank>`` line."""
    return PRELUDE + textwrap.dedent(body) + '\nprint(f"OK {rank}", flush=True)\n'


IN_PLACE = program(
    """
    IP = MPI.IN_PLACE
    k = 3

    def ints(r, n, salt=0):
        return (np.arange(n, dtype="i8") * (r + 2) + salt) % 1000

    # Gather / Gatherv: IN_PLACE as sendbuf at the root; its block is already in place
    for root in range(size):
        if rank == root:
            recv = np.full(size * k, -1.0)
            recv[root * k:(root + 1) * k] = block(root, k)
            comm.Gather(IP, recv, root)
            assert same(recv, concat([block(r, k) for r in range(size)]))
        else:
            comm.Gather(block(rank, k), None, root)
    counts = [r % 3 + 1 for r in range(size)]
    displs = [sum(counts[r + 1:]) + size - 1 - r for r in range(size)]
    total = sum(counts) + size
    if rank == 0:
        recv = np.full(total, -1.0)
        recv[displs[0]:displs[0] + counts[0]] = block(0, counts[0], 1)
        comm.Gatherv(IP, [recv, counts, displs, MPI.DOUBLE], 0)
        want = np.full(total, -1.0)
        for r in range(size):
            want[displs[r]:displs[r] + counts[r]] = block(r, counts[r], 1)
        assert same(recv, want)
    else:
        comm.Gatherv(block(rank, counts[rank], 1), None, 0)

    # Scatterv: IN_PLACE as recvbuf at the root; its segment is not moved
    if rank == size - 1:
        send = np.full(total, -1.0)
        for r in range(size):
            send[displs[r]:displs[r] + counts[r]] = block(r, counts[r], 3)
        comm.Scatterv([send, counts, displs, MPI.DOUBLE], IP, size - 1)
    else:
        recv = np.zeros(counts[rank])
        comm.Scatterv(None, recv, size - 1)
        assert same(recv, block(rank, counts[rank], 3))

    # Allgather / Allgatherv: IN_PLACE on all; the input is the own slot of recvbuf
    recv = np.full(size * k, -1.0)
    recv[rank * k:(rank + 1) * k] = block(rank, k, 4)
    comm.Allgather(IP, recv)
    assert same(recv, concat([block(r, k, 4) for r in range(size)]))
    recv = np.full(total, -1.0)
    recv[displs[rank]:displs[rank] + counts[rank]] = block(rank, counts[rank], 5)
    comm.Allgatherv(IP, [recv, counts, displs, MPI.DOUBLE])
    want = np.full(total, -1.0)
    for r in range(size):
        want[displs[r]:displs[r] + counts[r]] = block(r, counts[r], 5)
    assert same(recv, want)

    # Alltoall(v,w): IN_PLACE on all; data taken from recvbuf and replaced
    buf = concat([block(rank, k, 10 + j) for j in range(size)])
    comm.Alltoall(IP, buf)
    assert same(buf, concat([block(i, k, 10 + rank) for i in range(size)]))
    sym = [[(i + j) % 3 + 1 for j in range(size)] for i in range(size)]   # symmetric
    rc = sym[rank]
    rd = [sum(rc[:j]) + 2 * j for j in range(size)]                       # with gaps
    buf = np.full(sum(rc) + 2 * size, -1.0)
    for j in range(size):
        buf[rd[j]:rd[j] + rc[j]] = block(rank, rc[j], 20 + j)
    comm.Alltoallv(IP, [buf, rc, rd, MPI.DOUBLE])
    for i in range(size):
        assert same(buf[rd[i]:rd[i] + rc[i]], block(i, rc[i], 20 + rank)), i
    assert (buf[[rd[j] + rc[j] for j in range(size)]] == -1).all(), "gaps untouched"
    wbuf = np.full(sum(rc) + 2 * size, -1, "i4")
    for j in range(size):
        wbuf[rd[j]:rd[j] + rc[j]] = block(rank, rc[j], 30 + j, "i4")
    comm.Alltoallw(IP, [wbuf, rc, [4 * d for d in rd], [MPI.INT] * size])
    for i in range(size):
        assert same(wbuf[rd[i]:rd[i] + rc[i]], block(i, rc[i], 30 + rank, "i4")), i

    # Reduce: IN_PLACE at the root, whose input comes from recvbuf
    for root in range(size):
        if rank == root:
            buf = ints(rank, k)
            comm.Reduce(IP, buf, MPI.SUM, root)
            assert same(buf, sum(ints(r, k) for r in range(size)))
        else:
            comm.Reduce(ints(rank, k), None, MPI.SUM, root)
    # Allreduce: IN_PLACE on all
    buf = ints(rank, k, 1)
    comm.Allreduce(IP, buf, MPI.MAX)
    assert same(buf, np.max([ints(r, k, 1) for r in range(size)], axis=0))
    # Reduce_scatter_block / Reduce_scatter: input n*k (sum of counts) from recvbuf,
    # the own block of the result lands at its start
    buf = ints(rank, size * k, 2)
    comm.Reduce_scatter_block(IP, buf, MPI.SUM)
    full = sum(ints(r, size * k, 2) for r in range(size))
    assert same(buf[:k], full[rank * k:(rank + 1) * k])
    buf = ints(rank, sum(counts), 3)
    comm.Reduce_scatter(IP, buf, counts, MPI.SUM)
    full = sum(ints(r, sum(counts), 3) for r in range(size))
    off = sum(counts[:rank])
    assert same(buf[:counts[rank]], full[off:off + counts[rank]])
    # Reduce_scatter: IN_PLACE need not be given on all ranks (C-26)
    mixed = [0 if r == size - 1 and size > 1 else r % 2 + 1 for r in range(size)]
    full = sum(ints(r, sum(mixed), 6) for r in range(size))
    off = sum(mixed[:rank])
    if rank % 2 == 0:
        buf = ints(rank, sum(mixed), 6)
        comm.Reduce_scatter(IP, buf, mixed, MPI.SUM)
        assert same(buf[:mixed[rank]], full[off:off + mixed[rank]])
    else:
        out = np.full(mixed[rank], -1, "i8")
        comm.Reduce_scatter(ints(rank, sum(mixed), 6), out, mixed, MPI.SUM)
        assert same(out, full[off:off + mixed[rank]])
    # Scan: IN_PLACE; Exscan: IN_PLACE, and rank 0's buffer is not changed (C-28)
    buf = ints(rank, k, 4)
    comm.Scan(IP, buf, MPI.SUM)
    assert same(buf, sum(ints(r, k, 4) for r in range(rank + 1)))
    buf = ints(rank, k, 5)
    comm.Exscan(IP, buf, MPI.SUM)
    assert same(buf, sum(ints(r, k, 5) for r in range(rank)) if rank else ints(0, k, 5))

    # nonblocking and persistent forms take IN_PLACE the same way (C-40)
    buf = ints(rank, k, 6)
    comm.Iallreduce(IP, buf, MPI.SUM).Wait()
    assert same(buf, sum(ints(r, k, 6) for r in range(size)))
    recv = np.full(size * k, -1.0)
    recv[rank * k:(rank + 1) * k] = block(rank, k, 7)
    comm.Iallgather(IP, recv).Wait()
    assert same(recv, concat([block(r, k, 7) for r in range(size)]))
    if rank == 0:
        recv = np.full(size * k, -1.0)
        recv[:k] = block(0, k, 8)
        comm.Igather(IP, recv, 0).Wait()
        assert same(recv, concat([block(r, k, 8) for r in range(size)]))
    else:
        comm.Igather(block(rank, k, 8), None, 0).Wait()
    buf = np.zeros(k, "i8")
    req = comm.Allreduce_init(IP, buf, MPI.SUM)
    for salt in range(3):
        buf[:] = ints(rank, k, salt)
        req.Start()
        req.Wait()
        assert same(buf, sum(ints(r, k, salt) for r in range(size)))
    req.Free()
    buf = ints(rank, k, 9)
    req = comm.Iscan(IP, buf, MPI.SUM)
    req.Wait()
    assert same(buf, sum(ints(r, k, 9) for r in range(rank + 1)))
    """
)

SCATTER_IN_PLACE = program(
    """
    # Scatter: IN_PLACE as recvbuf at the root; its segment is not moved (C-12)
    k = 3
    for root in range(size):
        if rank == root:
            send = concat([block(r, k, 2) for r in range(size)])
            comm.Scatter(send, MPI.IN_PLACE, root)
            assert same(send, concat([block(r, k, 2) for r in range(size)])), "unchanged"
        else:
            recv = np.zeros(k)
            comm.Scatter(None, recv, root)
            assert same(recv, block(rank, k, 2))
    """
)

# Where IN_PLACE is not allowed, the call raises before it starts, so the other ranks'
# matching call is completed by a corrected retry on the failing rank.
IN_PLACE_ERRORS = program(
    """
    IP = MPI.IN_PLACE
    k = 2
    # Bcast: "not meaningful" (C-9), on every rank
    raises(None, comm.Bcast, IP, 0)
    raises(None, comm.Ibcast, IP, 0)
    works()
    # in the receive-buffer position anywhere
    raises(None, comm.Allreduce, np.zeros(k), IP)
    raises(None, comm.Allgather, np.zeros(k), IP)
    raises(None, comm.Alltoall, np.zeros(k * size), IP)
    works()
    # Gather: IN_PLACE as sendbuf at a non-root is an error (C-10)
    recv = np.zeros(size * k)
    if rank != 0:
        raises(None, comm.Gather, IP, None, 0)
        raises(None, comm.Igather, IP, None, 0)
        comm.Gather(block(rank, k), None, 0)
    else:
        comm.Gather(block(0, k), recv, 0)
        assert same(recv, concat([block(r, k) for r in range(size)]))
    # Gatherv likewise; Scatter / Scatterv: IN_PLACE as recvbuf at a non-root (C-12)
    if rank != 0:
        raises(None, comm.Gatherv, IP, None, 0)
        comm.Gatherv(block(rank, k), None, 0)
        raises(None, comm.Scatter, None, IP, 0)
        got = np.zeros(k)
        comm.Scatter(None, got, 0)
        assert same(got, block(rank, k, 1))
        raises(None, comm.Scatterv, None, IP, 0)
        comm.Scatterv(None, got, 0)
        assert same(got, block(rank, k, 2))
    else:
        comm.Gatherv(block(0, k), [recv, [k] * size], 0)
        assert same(recv, concat([block(r, k) for r in range(size)]))
        got = np.zeros(k)
        comm.Scatter(concat([block(r, k, 1) for r in range(size)]), got, 0)
        comm.Scatterv([concat([block(r, k, 2) for r in range(size)]), [k] * size], got, 0)
    # Reduce: IN_PLACE as sendbuf at a non-root (C-19)
    out = np.zeros(k)
    if rank != 0:
        raises(None, comm.Reduce, IP, None, MPI.SUM, 0)
        raises(None, comm.Ireduce, IP, None, MPI.SUM, 0)
        comm.Reduce(np.ones(k), None, MPI.SUM, 0)
    else:
        comm.Reduce(np.ones(k), out, MPI.SUM, 0)
        assert same(out, np.full(k, float(size)))
    works()
    """
)

BAD_INPUT = program(
    """
    a, out = np.arange(4.0), np.zeros(4)
    big = np.zeros(4 * size)
    # root out of range on every rank -> ERR_ROOT (C-6); MPI.ROOT/PROC_NULL are for
    # intercommunicators only
    for root in (size, size + 7, -1, MPI.ROOT, MPI.PROC_NULL):
        raises(MPI.ERR_ROOT, comm.Bcast, a, root)
        raises(MPI.ERR_ROOT, comm.Ibcast, a, root)
        raises(MPI.ERR_ROOT, comm.Bcast_init, a, root)
        raises(MPI.ERR_ROOT, comm.Gather, a, big, root)
        raises(MPI.ERR_ROOT, comm.Gatherv, a, [big, [4] * size], root)
        raises(MPI.ERR_ROOT, comm.Igather, a, big, root)
        raises(MPI.ERR_ROOT, comm.Scatter, big, a, root)
        raises(MPI.ERR_ROOT, comm.Scatterv, [big, [4] * size], a, root)
        raises(MPI.ERR_ROOT, comm.Iscatter, big, a, root)
        raises(MPI.ERR_ROOT, comm.Reduce, a, out, MPI.SUM, root)
        raises(MPI.ERR_ROOT, comm.Ireduce, a, out, MPI.SUM, root)
        raises(MPI.ERR_ROOT, comm.Reduce_init, a, out, MPI.SUM, root)
        raises(MPI.ERR_ROOT, comm.bcast, "x", root)
        raises(MPI.ERR_ROOT, comm.gather, "x", root)
        raises(MPI.ERR_ROOT, comm.scatter, ["x"] * size, root)
        raises(MPI.ERR_ROOT, comm.reduce, 1, MPI.SUM, root)
    works()

    # invalid op -> ERR_OP: OP_NULL, a freed user op, a non-op, one-sided-only ops
    freed = MPI.Op.Create(lambda x, y, t: None, commute=True)
    freed.Free()
    for op in (MPI.OP_NULL, freed, "sum", None, MPI.REPLACE, MPI.NO_OP):
        raises(MPI.ERR_OP, comm.Allreduce, a, out, op)
        raises(MPI.ERR_OP, comm.Reduce, a, out, op, 0)
        raises(MPI.ERR_OP, comm.Iallreduce, a, out, op)
        raises(MPI.ERR_OP, comm.Allreduce_init, a, out, op)
        raises(MPI.ERR_OP, comm.Scan, a, out, op)
        raises(MPI.ERR_OP, comm.Exscan, a, out, op)
        raises(MPI.ERR_OP, comm.Reduce_scatter_block, big, a, op)
        raises(MPI.ERR_OP, comm.Reduce_scatter, big, a, [4] * size, op)
    for op in (MPI.OP_NULL, freed):
        raises(MPI.ERR_OP, comm.allreduce, 1, op)
        raises(MPI.ERR_OP, comm.reduce, 1, op, 0)
        raises(MPI.ERR_OP, comm.scan, 1, op)
        raises(MPI.ERR_OP, comm.exscan, 1, op)
    works()

    # op not defined for the datatype -> ERR_OP (§4.2)
    pair = np.zeros(4, np.dtype([("v", "f8"), ("i", "i4")], align=True))
    pout = np.zeros_like(pair)
    bad = [
        (MPI.BAND, a, out), (MPI.BOR, a.astype("f4"), out.astype("f4")),
        (MPI.BXOR, a, out), (MPI.LAND, a, out), (MPI.LOR, a, out),
        (MPI.MAX, a.astype("c16"), out.astype("c16")), (MPI.MIN, a.astype("c8"),
                                                        out.astype("c8")),
        (MPI.MAXLOC, a, out), (MPI.MINLOC, a.astype("i4"), out.astype("i4")),
        (MPI.SUM, [pair, MPI.DOUBLE_INT], [pout, MPI.DOUBLE_INT]),
        (MPI.SUM, [bytearray(4), MPI.CHAR], [bytearray(4), MPI.CHAR]),
        (MPI.BAND, a.astype("?"), out.astype("?")), (MPI.SUM, a.astype("?"), out.astype("?")),
        (MPI.LAND, [bytearray(4), MPI.BYTE], [bytearray(4), MPI.BYTE]),
        (MPI.MAX, [bytearray(4), MPI.BYTE], [bytearray(4), MPI.BYTE]),
    ]
    for op, s, r in bad:
        raises(MPI.ERR_OP, comm.Allreduce, s, r, op)
        raises(MPI.ERR_OP, comm.Reduce, s, r, op, size - 1)
        raises(MPI.ERR_OP, comm.Ireduce, s, r, op, 0)
        raises(MPI.ERR_OP, comm.Scan, s, r, op)
        raises(MPI.ERR_OP, comm.Exscan, s, r, op)
        raises(MPI.ERR_OP, comm.Reduce_init, s, r, op, 0)
    raises(MPI.ERR_OP, comm.Reduce_scatter_block, big, out, MPI.BAND)
    raises(MPI.ERR_OP, comm.Reduce_scatter, big, out, [4] * size, MPI.LAND)
    works()

    # counts that cannot match, detected by every rank -> an error, no hang
    raises(None, comm.Allgather, np.zeros(3), np.zeros(2 * size))
    raises(None, comm.Alltoall, np.zeros(3 * size), np.zeros(2 * size))
    # (send and receive buffers of a reduction that disagree: ValueError, as in mpi4py)
    value_error(comm.Reduce_scatter_block, np.zeros(size + 1), np.zeros(1))
    value_error(comm.Reduce_scatter, np.zeros(size), np.zeros(1), [2] * size)
    raises(None, comm.Reduce_scatter, np.zeros(2 * size), np.zeros(2), [2] * (size + 1))
    value_error(comm.Allgatherv, np.zeros(1), [np.zeros(size), [1] * (size + 1)])
    raises(None, comm.Alltoallv, [np.zeros(size), [1] * size], [np.zeros(size), [-1] * size])
    value_error(comm.Allgatherv, np.zeros(1), [np.zeros(size), [1] * size, [size] * size,
                                                MPI.DOUBLE])
    if rank == 0:  # a sequence of the wrong length: ValueError, as in mpi4py
        value_error(comm.scatter, [1] * (size + 1), 0)
        assert comm.scatter(list(range(size)), 0) == 0   # the corrected call completes
    else:
        assert comm.scatter(None, 0) == rank
    works()
    """
)

ISOLATION = program(
    """
    # C-3: a wildcard receive posted before the collectives is never matched by them
    got = np.zeros(3, "i4")
    st = MPI.Status()
    wild = comm.Irecv(got, MPI.ANY_SOURCE, MPI.ANY_TAG)
    wild_obj = comm.irecv(source=MPI.ANY_SOURCE, tag=MPI.ANY_TAG)
    # point-to-point messages sent before the collectives, with the tags a collective
    # sequence number would use, stay queued for the point-to-point receives
    comm.Send(np.array([rank, 0, 1], "i4"), nxt, 100)
    comm.send([rank, 1, 1], nxt, 101)
    comm.Send(np.array([rank, 2, 1], "i4"), nxt, 102)
    k = 4
    buf = np.zeros(k)
    for root in range(size):
        comm.Bcast(buf, root)
        comm.Gather(buf, np.zeros(size * k) if rank == root else None, root)
        comm.Scatter(np.zeros(size * k), buf, root)
        comm.Reduce(buf, np.zeros(k), MPI.SUM, root)
        comm.bcast({"r": root}, root)
        comm.gather(rank, root)
        comm.scatter(list(range(size)), root)
        comm.reduce(rank, root=root)
    comm.Barrier()
    # collectives on another communicator (COMM_SELF), a different number on each rank,
    # neither match COMM_WORLD's collectives nor its point-to-point receives (C-2)
    me = MPI.COMM_SELF
    for i in range(rank + 1):
        one = np.array([float(i)])
        me.Bcast(one, 0)
        me.Allreduce(MPI.IN_PLACE, one)
        assert me.allgather(i) == [i] and one[0] == i
        me.Ibarrier().Wait()
    comm.Allgather(buf, np.zeros(size * k))
    comm.Allgatherv(buf, [np.zeros(size * k), [k] * size])
    comm.Alltoall(np.zeros(size * k), np.zeros(size * k))
    comm.Alltoallv([np.zeros(size), [1] * size], [np.zeros(size), [1] * size])
    comm.Alltoallw([np.zeros(size, "i4"), [1] * size, [4 * j for j in range(size)],
                    [MPI.INT] * size],
                   [np.zeros(size, "i4"), [1] * size, [4 * j for j in range(size)],
                    [MPI.INT] * size])
    comm.Allreduce(buf, np.zeros(k))
    comm.Reduce_scatter_block(np.zeros(size), np.zeros(1))
    comm.Reduce_scatter(np.zeros(size), np.zeros(1), [1] * size)
    comm.Scan(buf, np.zeros(k))
    comm.Exscan(buf, np.zeros(k))
    comm.allgather(rank)
    comm.alltoall(list(range(size)))
    comm.allreduce(rank)
    comm.scan(rank)
    comm.exscan(rank)
    comm.barrier()
    reqs = [comm.Ibarrier(), comm.Ibcast(buf, 0), comm.Iallreduce(buf, np.zeros(k))]
    Request.Waitall(reqs)
    preq = comm.Allreduce_init(buf, np.zeros(k))
    for _ in range(2):
        preq.Start()
        preq.Wait()
    preq.Free()
    comm.Barrier()
    # the wildcard receives matched the point-to-point messages sent before, nothing else
    wild.Wait(st)
    assert (st.source, st.tag) == (prv, 100) and list(got) == [prv, 0, 1], (st.source, got)
    assert list(wild_obj.wait()) == [prv, 1, 1]
    comm.Recv(got, MPI.ANY_SOURCE, MPI.ANY_TAG, st)
    assert (st.source, st.tag, list(got)) == (prv, 102, [prv, 2, 1])
    # now a wildcard receive posted before collectives stays pending through them
    wild = comm.Irecv(got, MPI.ANY_SOURCE, MPI.ANY_TAG)
    for _ in range(3):
        comm.Barrier()
        comm.Allreduce(buf, np.zeros(k))
        comm.Bcast(buf, size - 1)
        comm.allgather(None)
        Request.Waitall([comm.Ibarrier(), comm.Ialltoall(np.zeros(size), np.zeros(size))])
        assert not wild.Test(), "a collective message matched a point-to-point receive"
        assert not comm.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG), "a collective message is visible"
    comm.Barrier()   # every rank has checked; then satisfy it
    comm.Send(np.array([rank, 7, 7], "i4"), nxt, 55)
    wild.Wait(st)
    assert (st.source, st.tag, list(got)) == (prv, 55, [prv, 7, 7])
    """
)

REQUESTS = program(
    """
    def is_empty(st):
        return (st.source, st.tag, st.error, st.Get_count(), st.Is_cancelled()) == (
            MPI.ANY_SOURCE, MPI.ANY_TAG, MPI.SUCCESS, 0, False)

    def dirty():
        st = MPI.Status()
        st.source, st.tag, st.error = 1234, 5678, MPI.ERR_OTHER
        return st

    # completed nonblocking collectives leave an empty status (C-33)
    st = dirty()
    comm.Ibarrier().Wait(st)
    assert is_empty(st), (st.source, st.tag, st.error)
    out = np.zeros(3)
    req = comm.Iallreduce(np.ones(3), out)
    st = dirty()
    while not req.Test(st):
        pass
    assert is_empty(st) and out[0] == size
    reqs = [comm.Ibcast(np.zeros(2), 0), comm.Iallgather(np.ones(1), np.zeros(size))]
    sts = [dirty(), dirty()]
    Request.Waitall(reqs, sts)
    assert all(is_empty(s) for s in sts)
    req = comm.Ibarrier()
    st = dirty()
    while not req.Get_status(st):
        pass
    assert is_empty(st) and req != MPI.REQUEST_NULL
    req.Wait()
    preq = comm.Barrier_init()
    preq.Start()
    st = dirty()
    preq.Wait(st)
    assert is_empty(st)
    preq.Free()

    # Cancel on a collective request (erroneous, C-34) either raises or does nothing:
    # the Ibarrier still does not complete before the last rank has called it
    last = size - 1
    if rank == 0:
        req = comm.Ibarrier()
        try:
            req.Cancel()
        except MPI.Exception:
            pass
        if size > 1:
            for _ in range(20):
                assert not req.Test(), "a cancelled Ibarrier completed alone"
            comm.send("go", dest=last, tag=3)
        st = MPI.Status()
        req.Wait(st)
        assert not st.Is_cancelled()
    elif rank == last:
        comm.recv(source=0, tag=3)
        comm.Ibarrier().Wait()
    else:
        comm.Ibarrier().Wait()
    works()

    # Free on an active collective request (erroneous, C-34) either raises or lets the
    # collective finish in the background; the other ranks are not left waiting
    data = np.full(4, rank + 1.0)
    out = np.zeros(4)
    req = comm.Iallreduce(data, out)
    if rank == 0:
        try:
            req.Free()
        except MPI.Exception:
            req.Wait()
    else:
        req.Wait()
        assert (out == size * (size + 1) / 2).all()
    works()
    comm.Barrier()
    if rank == 0:
        for _ in range(200):       # finished in the background by now, or very soon
            if (out == size * (size + 1) / 2).all():
                break
            comm.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG)
            time.sleep(0.01)
        assert (out == size * (size + 1) / 2).all()
    works()
    """
)

# --- mismatched collectives -------------------------------------------------------------

MISMATCH = PRELUDE + textwrap.dedent(
    """
    import sys

    scenario = sys.argv[1]
    names = sys.argv[2].split("|")


    def mismatched():
        if scenario == "bcast_vs_reduce":
            if rank == 0:
                comm.Bcast(np.zeros(4), 0)
            else:
                comm.Reduce(np.zeros(4), None, MPI.SUM, 0)
        elif scenario == "bcast_vs_reduce_silent":
            # no message ever crosses between the two kinds of call
            if rank == size - 1:
                comm.Bcast(np.zeros(4), 0)
            else:
                comm.Reduce(np.zeros(4), np.zeros(4), MPI.SUM, 0)
        elif scenario == "ibcast_vs_ireduce_silent":
            # the same, nonblocking: the ranks wait in Request.Wait
            if rank == size - 1:
                comm.Ibcast(np.zeros(4), 0).Wait()
            else:
                comm.Ireduce(np.zeros(4), np.zeros(4), MPI.SUM, 0).Wait()
        elif scenario == "lower_bcast_vs_reduce":
            if rank == 0:
                comm.bcast("x", 0)
            else:
                comm.reduce(1, root=0)
        elif scenario == "roots":
            comm.Bcast(np.zeros(4), 0 if rank == 0 else 1)
        elif scenario == "sizes":
            comm.Bcast(np.zeros(4 if rank == 0 else 8), 0)
        elif scenario == "sizes_larger_root":
            comm.Bcast(np.zeros(8 if rank == 0 else 4), 0)
        elif scenario == "gather_counts":
            comm.Gather(np.zeros(3 if rank == 1 else 2), np.zeros(2 * size) if rank == 0 else None)
        elif scenario == "allreduce_counts":
            n = 5 if rank == 1 else 4
            comm.Allreduce(np.zeros(n), np.zeros(n))
        elif scenario == "blocking_vs_nonblocking":
            if rank == 0:
                comm.Bcast(np.zeros(4), 0)
            else:
                comm.Ibcast(np.zeros(4), 0).Wait()
        elif scenario == "nonblocking_roots":
            comm.Ibcast(np.zeros(4), 0 if rank == 0 else 1).Wait()
        elif scenario == "persistent_vs_nonblocking":
            if rank == 0:
                req = comm.Bcast_init(np.zeros(4), 0)
                req.Start()
                req.Wait()
            else:
                comm.Ibcast(np.zeros(4), 0).Wait()
        elif scenario == "neighbor_vs_allgather":
            ring = comm.Create_cart([size], periods=[True])
            if rank == 0:
                ring.Neighbor_allgather(np.zeros(1), np.zeros(2))
            else:
                ring.Allgather(np.zeros(1), np.zeros(size))
            ring.Free()
        elif scenario == "barrier_vs_allreduce":
            if rank == 1:
                comm.Barrier()
            else:
                comm.Allreduce(np.zeros(4), np.zeros(4))


    # the error comes from the mismatched call, or (ranks that had already returned
    # from it) from the next collective; a rank that got it there does not go on
    where = None
    try:
        mismatched()
    except MPI.Exception as exc:
        where = ("call", exc)
    if where is None:
        try:
            comm.Barrier()
        except MPI.Exception as exc:
            where = ("next", exc)
    assert where is not None, f"rank {rank}: no error from the mismatch"
    kind, exc = where
    assert exc.Get_error_class() == MPI.ERR_NOT_SAME, (exc.Get_error_class(), str(exc))
    text = str(exc)
    assert "mismatch" in text, text
    detail = text[text.index("mismatch"):]      # past the prefix naming the local call
    for name in names:
        assert name in detail, (name, text)
    print(f"MISMATCH {rank} {kind}: {exc}", flush=True)
    # an unrelated later point-to-point message still works
    comm.send(("after", rank), dest=nxt, tag=5)
    assert comm.recv(source=prv, tag=5) == ("after", prv)
    data = np.zeros(3)
    comm.Sendrecv(np.full(3, float(rank)), nxt, 6, data, prv, 6)
    assert (data == prv).all()
    print(f"OK {rank}", flush=True)
    """
)

SCENARIOS = [
    ("bcast_vs_reduce", "Bcast(root=0)|Reduce(root=0)", 3),
    ("bcast_vs_reduce", "Bcast(root=0)|Reduce(root=0)", 5),
    ("lower_bcast_vs_reduce", "bcast(root=0)|reduce(root=0)", 2),
    ("roots", "Bcast(root=0)|Bcast(root=1)", 3),
    ("sizes", "Bcast(root=0)", 2),
    ("sizes", "Bcast(root=0)", 4),
    ("sizes_larger_root", "Bcast(root=0)", 3),
    ("gather_counts", "Gather(root=0)", 2),
    ("gather_counts", "Gather(root=0)", 3),
    ("allreduce_counts", "Allreduce", 4),
    ("blocking_vs_nonblocking", "Bcast(root=0)|Ibcast(root=0)", 2),
    ("blocking_vs_nonblocking", "Bcast(root=0)|Ibcast(root=0)", 3),
    ("nonblocking_roots", "Ibcast(root=0)|Ibcast(root=1)", 3),
    ("persistent_vs_nonblocking", "Bcast_init|Ibcast(root=0)", 2),
    ("neighbor_vs_allgather", "Neighbor_allgather|Allgather", 3),
    ("barrier_vs_allreduce", "Barrier|Allreduce", 2),
    ("bcast_vs_reduce_silent", "Bcast(root=0)|Reduce(root=0)", 3),
    ("ibcast_vs_ireduce_silent", "Ibcast(root=0)|Ireduce(root=0)", 3),
]


@pytest.mark.parametrize("n", NPROCS)
def test_in_place(run_mpi, n: int) -> None:
    """IN_PLACE where each collective allows it gives the defined result."""
    assert_ok(run_mpi(n, IN_PLACE), n)


@pytest.mark.parametrize(
    "n",
    [
        3,
        4,
    ],
)
def test_scatter_in_place(run_mpi, n: int) -> None:
    """Scatter with IN_PLACE as the root's recvbuf, every root."""
    assert_ok(run_mpi(n, SCATTER_IN_PLACE), n)


@pytest.mark.parametrize("n", [1, 3])
def test_in_place_not_allowed(run_mpi, n: int) -> None:
    """IN_PLACE in Bcast, at non-roots of rooted calls, or as a recvbuf raises."""
    assert_ok(run_mpi(n, IN_PLACE_ERRORS), n)


@pytest.mark.parametrize("n", [1, 3])
def test_bad_input(run_mpi, n: int) -> None:
    """Bad root -> ERR_ROOT, bad op -> ERR_OP, impossible counts -> error; no hang."""
    assert_ok(run_mpi(n, BAD_INPUT), n)


@pytest.mark.parametrize("n", [2, 4])
def test_collectives_never_match_point_to_point(run_mpi, n: int) -> None:
    """A pending wildcard Irecv and queued point-to-point messages survive collectives."""
    assert_ok(run_mpi(n, ISOLATION), n)


@pytest.mark.parametrize("n", [1, 3])
def test_collective_requests(run_mpi, n: int) -> None:
    """Empty status on completion; Cancel and Free on collective requests are harmless."""
    assert_ok(run_mpi(n, REQUESTS), n)


@pytest.mark.parametrize(("scenario", "names", "n"), SCENARIOS)
def test_mismatch_detected(run_mpi, scenario: str, names: str, n: int) -> None:
    """Every rank gets ERR_NOT_SAME naming both calls exactly once; p2p still works."""
    proc = run_mpi(n, MISMATCH, scenario, names, timeout=8)
    assert_ok(proc, n)
    places = [line.split(":")[0] for line in proc.stdout.splitlines() if line.startswith("MIS")]
    assert sorted(int(p.split()[1]) for p in places) == list(range(n)), proc.stdout
