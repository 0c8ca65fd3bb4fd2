"""Data-movement collectives on real ranks, checked against their definitions.

Barrier, Bcast, Gather(v), Scatter(v), Allgather(v), Alltoall(v,w) with buffers.
Every rank computes what each call must produce from the formula for each rank's
data (``block(r, k)``), so the programs are rank-agnostic and run at 1..5 ranks
(3 and 5 take the non-power-of-two paths). Every root is tried, counts include
0, v-variants use gaps and out-of-order displacements, Alltoallw uses byte
displacements and a datatype per peer. Rules: INVENTORY §4.3 C-4, C-6, C-8..C-18.
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
DTYPES = ["f8", "i4", "u1", "c16", "i8", "f4", "i2"]
NPTYPE = {"f8": MPI.DOUBLE, "i4": MPI.INT, "u1": MPI.UNSIGNED_CHAR, "c16": MPI.C_DOUBLE_COMPLEX,
          "i8": MPI.INT64_T, "f4": MPI.FLOAT, "i2": MPI.SHORT}


def block(r, k, dtype="f8", salt=0):
    """Rank r's distinctive block of k elements (small positive values fit every dtype)."""
    return ((np.arange(k) * 7 + r * 31 + salt) % 101 + 1).astype(dtype)


def concat(blocks, dtype="f8"):
    return np.concatenate([np.asarray(b, dtype) for b in blocks] + [np.empty(0, dtype)])


def same(a, b):
    """Equal dtype, shape and bytes."""
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def spread(counts, gap=1):
    """Displacements placing the blocks in reverse rank order with a gap after each."""
    displs, pos = [0] * len(counts), 0
    for r in reversed(range(len(counts))):
        displs[r] = pos
        pos += counts[r] + gap
    return displs, pos


def placed(counts, displs, total, blocks, fill, dtype="f8"):
    """The buffer a v-variant must leave: blocks at displs, fill elsewhere."""
    out = np.full(total, fill, dtype)
    for r, (c, d) in enumerate(zip(counts, displs)):
        out[d:d + c] = blocks[r][:c]
    return out
'''


def program(body: str) -> str:
    """The prelude, the test body and the final ``OK <rank>`` line."""
    return PRELUDE + textwrap.dedent(body) + '\nprint(f"OK {rank}", flush=True)\n'


BARRIER_BCAST = program(
    """
    # Barrier (C-8): no rank returns before the last one has entered
    for _ in range(5):
        comm.Barrier()
    late = size - 1
    if rank == late:
        time.sleep(0.25)
    entered = time.time()
    comm.Barrier()
    left = time.time()
    times = np.empty(2 * size)
    comm.Allgather(np.array([entered, left]), times)
    assert times[1::2].min() >= times[2 * late], times

    # Bcast (C-9): every root, dtypes, counts incl. 0; every buffer equals the root's
    for root in range(size):
        for dtype in DTYPES:
            for k in (0, 1, 13):
                buf = block(root, k, dtype) if rank == root else np.zeros(k, dtype)
                comm.Bcast(buf, root=root)
                assert same(buf, block(root, k, dtype)), (root, dtype, k, buf)
    # default root 0, multi-dimensional array, bytearray, [buf, datatype]
    buf = block(0, 12).reshape(3, 4) if rank == 0 else np.zeros((3, 4))
    comm.Bcast(buf)
    assert same(buf, block(0, 12).reshape(3, 4))
    raw = bytearray(b"broadcast!") if rank == size - 1 else bytearray(10)
    comm.Bcast(raw, size - 1)
    assert raw == b"broadcast!"
    buf = block(1, 6, "i4") if rank == size // 2 else np.zeros(6, "i4")
    comm.Bcast([buf, MPI.INT], root=size // 2)
    assert same(buf, block(1, 6, "i4"))
    # [buf, count, datatype]: only the first count elements travel
    buf = block(9, 8, "i2") if rank == 0 else np.full(8, -5, "i2")
    comm.Bcast([buf, 3, MPI.SHORT], root=0)
    want = block(9, 8, "i2") if rank == 0 else np.concatenate([block(9, 3, "i2"), [-5] * 5])
    assert same(buf, want.astype("i2")), buf
    # the root's buffer is only read
    src = block(2, 5)
    src.flags.writeable = rank != 0
    comm.Bcast(src, 0)
    assert same(src, block(2, 5))
    """
)

GATHER_SCATTER = program(
    """
    # Gather (C-10): block i at offset i*k at the root, in rank order
    for root in range(size):
        for dtype in DTYPES:
            for k in (0, 1, 6):
                recv = np.full(size * k, 99, dtype) if rank == root else None
                comm.Gather(block(rank, k, dtype), recv, root=root)
                if rank == root:
                    assert same(recv, concat([block(r, k, dtype) for r in range(size)], dtype))
    # the receive buffer is ignored at non-roots (a wrong-sized one stays untouched)
    junk = np.full(3, -1.0)
    recv = np.zeros(2 * size) if rank == 0 else junk
    comm.Gather(block(rank, 2), recv, 0)
    assert rank == 0 or same(junk, np.full(3, -1.0))
    if rank == 0:
        assert same(recv, concat([block(r, 2) for r in range(size)]))
    # [buf, datatype] and a 2-D receive buffer (rank r in row r)
    recv = np.zeros((size, 4), "i4") if rank == size - 1 else None
    comm.Gather([block(rank, 4, "i4"), MPI.INT], [recv, MPI.INT] if recv is not None else None,
                size - 1)
    if rank == size - 1:
        for r in range(size):
            assert same(recv[r], block(r, 4, "i4"))

    # Gatherv (C-11): counts (some 0), blocks in reverse order with gaps
    counts = [(2 * r + 1) % 4 for r in range(size)]
    displs, total = spread(counts)
    blocks = [block(r, counts[r]) for r in range(size)]
    for root in range(size):
        recv = np.full(total, -1.0) if rank == root else None
        rspec = [recv, counts, displs, MPI.DOUBLE] if rank == root else None
        comm.Gatherv(block(rank, counts[rank]), rspec, root=root)
        if rank == root:
            assert same(recv, placed(counts, displs, total, blocks, -1.0)), recv
    # shorter forms: [buf, counts] (contiguous, rank order), [buf, (counts, displs), type]
    recv = np.full(sum(counts), -1.0)
    comm.Gatherv(block(rank, counts[rank]), [recv, counts], root=0)
    if rank == 0:
        assert same(recv, concat(blocks))
    recv = np.full(total, -1.0)
    comm.Gatherv(block(rank, counts[rank]), [recv, (counts, displs), MPI.DOUBLE], root=0)
    if rank == 0:
        assert same(recv, placed(counts, displs, total, blocks, -1.0))

    # Scatter (C-12): rank i gets segment i; the send buffer is ignored at non-roots
    for root in range(size):
        for dtype in DTYPES:
            for k in (0, 1, 6):
                send = concat([block(r, k, dtype, salt=root) for r in range(size)], dtype)
                recv = np.full(k, 99, dtype)
                comm.Scatter(send if rank == root else None, recv, root=root)
                assert same(recv, block(rank, k, dtype, salt=root)), (root, dtype, k, recv)
    # the root's send buffer is only read; non-roots may pass a wrong-sized one
    send = concat([block(r, 3) for r in range(size)]) if rank == 0 else np.zeros(1)
    send.flags.writeable = False
    recv = np.zeros(3)
    comm.Scatter(send, recv, 0)
    assert same(recv, block(rank, 3))

    # Scatterv (C-13): segment i is counts[i] elements at displs[i]
    counts = [(r + 2) % 3 for r in range(size)]
    displs, total = spread(counts, gap=2)
    for root in range(size):
        send = placed(counts, displs, total, [block(r, counts[r], "i4", root)
                                              for r in range(size)], -7, "i4")
        recv = np.full(counts[rank], 99, "i4")
        sspec = [send, counts, displs, MPI.INT] if rank == root else None
        comm.Scatterv(sspec, recv, root=root)
        assert same(recv, block(rank, counts[rank], "i4", root)), recv
    send = concat([block(r, counts[r]) for r in range(size)])
    recv = np.zeros(counts[rank])
    comm.Scatterv([send, counts] if rank == 0 else None, recv, 0)
    assert same(recv, block(rank, counts[rank]))
    """
)

ALLGATHER_ALLTOALL = program(
    """
    # Allgather (C-14): block j of every receive buffer is rank j's block
    for dtype in DTYPES:
        for k in (0, 1, 9):
            recv = np.full(size * k, 99, dtype)
            comm.Allgather(block(rank, k, dtype), recv)
            assert same(recv, concat([block(r, k, dtype) for r in range(size)], dtype))
    recv = np.zeros((size, 3), "i8")
    comm.Allgather([block(rank, 3, "i8"), MPI.INT64_T], [recv, MPI.INT64_T])
    assert all(same(recv[r], block(r, 3, "i8")) for r in range(size))

    # Allgatherv (C-15)
    counts = [(3 * r + 2) % 5 for r in range(size)]
    displs, total = spread(counts, gap=3)
    blocks = [block(r, counts[r], "c16") for r in range(size)]
    recv = np.full(total, -1, "c16")
    comm.Allgatherv(block(rank, counts[rank], "c16"), [recv, counts, displs, MPI.C_DOUBLE_COMPLEX])
    assert same(recv, placed(counts, displs, total, blocks, -1, "c16")), recv
    recv = np.full(sum(counts), -1, "c16")
    comm.Allgatherv(block(rank, counts[rank], "c16"), [recv, counts])
    assert same(recv, concat(blocks, "c16"))

    # Alltoall (C-16): block j of rank i's send buffer lands in block i at rank j
    def piece(i, j, k, dtype="f8"):
        return block(i, k, dtype, salt=13 * j)

    for dtype in DTYPES:
        for k in (0, 1, 5):
            send = concat([piece(rank, j, k, dtype) for j in range(size)], dtype)
            recv = np.full(size * k, 99, dtype)
            comm.Alltoall(send, recv)
            assert same(recv, concat([piece(i, rank, k, dtype) for i in range(size)], dtype))
    send = np.stack([piece(rank, j, 2) for j in range(size)])
    recv = np.zeros((size, 2))
    comm.Alltoall([send, MPI.DOUBLE], [recv, MPI.DOUBLE])
    assert all(same(recv[i], piece(i, rank, 2)) for i in range(size))

    # Alltoallv (C-17): count(i, j) elements from i to j, displacements in extents
    def count(i, j):
        return (i + 2 * j) % 4

    scounts = [count(rank, j) for j in range(size)]
    rcounts = [count(i, rank) for i in range(size)]
    sdispls, stotal = spread(scounts, gap=1)
    rdispls, rtotal = spread(rcounts, gap=2)
    send = placed(scounts, sdispls, stotal,
                  [piece(rank, j, scounts[j], "i4") for j in range(size)], -3, "i4")
    recv = np.full(rtotal, -9, "i4")
    comm.Alltoallv([send, scounts, sdispls, MPI.INT], [recv, rcounts, rdispls, MPI.INT])
    want = placed(rcounts, rdispls, rtotal,
                  [piece(i, rank, rcounts[i], "i4") for i in range(size)], -9, "i4")
    assert same(recv, want), (recv, want)
    send = concat([piece(rank, j, scounts[j]) for j in range(size)])
    recv = np.full(sum(rcounts), -1.0)
    comm.Alltoallv([send, scounts], [recv, rcounts])
    assert same(recv, concat([piece(i, rank, rcounts[i]) for i in range(size)]))

    # Alltoallw (C-18): byte displacements, a datatype (and count) per peer
    TYPES = [("i4", MPI.INT), ("f8", MPI.DOUBLE), ("i2", MPI.SHORT), ("u1", MPI.UNSIGNED_CHAR)]

    def kind(i, j):
        return TYPES[(i + j) % len(TYPES)]

    def layout(pairs, gap):
        # byte displacements of (count, itemsize) blocks packed with a gap of bytes
        displs, pos = [], 0
        for c, itemsize in pairs:
            displs.append(pos)
            pos += c * itemsize + gap
        return displs, pos

    def wbuf(peers, sending):
        pairs = []
        for p in peers:
            i, j = (rank, p) if sending else (p, rank)
            pairs.append((count(i, j) + 1, np.dtype(kind(i, j)[0]).itemsize))
        displs, nbytes = layout(pairs, gap=3)
        return displs, nbytes

    peers = list(range(size))
    sd, sbytes = wbuf(peers, True)
    rd, rbytes = wbuf(peers, False)
    send = np.full(sbytes, 0xEE, "u1")
    for j in peers:
        data = piece(rank, j, count(rank, j) + 1, kind(rank, j)[0]).tobytes()
        send[sd[j]:sd[j] + len(data)] = np.frombuffer(data, "u1")
    recv = np.full(rbytes, 0xAA, "u1")
    want = recv.copy()
    for i in peers:
        data = piece(i, rank, count(i, rank) + 1, kind(i, rank)[0]).tobytes()
        want[rd[i]:rd[i] + len(data)] = np.frombuffer(data, "u1")
    comm.Alltoallw(
        [send, [count(rank, j) + 1 for j in peers], sd, [kind(rank, j)[1] for j in peers]],
        [recv, [count(i, rank) + 1 for i in peers], rd, [kind(i, rank)[1] for i in peers]],
    )
    assert same(recv, want), (recv, want)
    """
)

# The explicit count of [buf, count, datatype] in Gather/Scatter/Allgather/Alltoall is the
# count per process (recvcount/sendcount of the standard), not the total.
EXPLICIT_COUNTS = program(
    """
    k = 2
    big = 10 * size
    recv = np.full(big, -1.0)
    comm.Gather(block(rank, k), [recv, k, MPI.DOUBLE] if rank == 0 else None, 0)
    if rank == 0:
        assert same(recv[:size * k], concat([block(r, k) for r in range(size)]))
        assert (recv[size * k:] == -1).all()
    recv = np.full(big, -1.0)
    comm.Allgather([block(rank, 5), k, MPI.DOUBLE], [recv, k, MPI.DOUBLE])
    assert same(recv[:size * k], concat([block(r, k) for r in range(size)]))
    assert (recv[size * k:] == -1).all()
    send = np.zeros(big)
    send[:size * k] = concat([block(r, k) for r in range(size)])
    recv = np.full(4, -1.0)
    comm.Scatter([send, k, MPI.DOUBLE], [recv, k, MPI.DOUBLE], 0)
    assert same(recv[:k], block(rank, k)) and (recv[k:] == -1).all()
    send = np.zeros(big)
    send[:size * k] = concat([block(rank, k, salt=j) for j in range(size)])
    recv = np.full(big, -1.0)
    comm.Alltoall([send, k, MPI.DOUBLE], [recv, k, MPI.DOUBLE])
    assert same(recv[:size * k], concat([block(i, k, salt=rank) for i in range(size)]))
    """
)

# Type maps may differ between ranks as long as the type signatures match (C-4).
TYPEMAPS = program(
    """
    vec = MPI.INT.Create_vector(3, 1, 2).Commit()     # elements 0, 2, 4
    row = MPI.INT.Create_contiguous(4).Commit()

    # Bcast: a strided type at the root, plain INTs or the same strided type elsewhere
    if rank == 0:
        buf = np.arange(6, dtype="i4") + 40
        comm.Bcast([buf, 1, vec], root=0)
    else:
        buf = np.zeros(3, "i4")
        comm.Bcast([buf, 3, MPI.INT], root=0)
        assert list(buf) == [40, 42, 44], buf
    buf = np.arange(6, dtype="i4") + 50 if rank == size - 1 else np.full(6, -1, "i4")
    comm.Ibcast([buf, 1, vec], root=size - 1).Wait()
    if rank != size - 1:
        assert list(buf) == [50, -1, 52, -1, 54, -1], buf

    # Gather / Gatherv: the root receives one 4-int "row" per rank; senders send 4 INTs
    recv = np.full(4 * size, -1, "i4")
    comm.Gather(block(rank, 4, "i4"), [recv, 1, row] if rank == 0 else None, root=0)
    if rank == 0:
        assert same(recv, concat([block(r, 4, "i4") for r in range(size)], "i4"))
    recv = np.full(4 * size, -1, "i4")
    comm.Gatherv(block(rank, 4, "i4"), [recv, [1] * size, list(range(size)), row], root=0)
    if rank == 0:
        assert same(recv, concat([block(r, 4, "i4") for r in range(size)], "i4"))

    for t in (vec, row):
        t.Free()
    """
)

# A resized type whose extent is smaller than its span: one column of a K x size matrix.
COLUMNS = program(
    """
    K = 4
    strided = MPI.DOUBLE.Create_vector(K, 1, size)
    col = strided.Create_resized(0, 8).Commit()        # one column of a K x size matrix
    strided.Free()
    # columns of a K x size matrix: rank r's K doubles are column r
    columns = np.stack([block(r, K) for r in range(size)], axis=1)
    mat = np.full((K, size), -1.0)
    comm.Gather(block(rank, K), [mat, 1, col] if rank == size - 1 else None, size - 1)
    assert rank != size - 1 or same(mat, columns), mat
    part = np.zeros(K)
    comm.Scatter([columns, 1, col] if rank == 0 else None, part, 0)
    assert same(part, block(rank, K))
    mat = np.full((K, size), -1.0)
    comm.Allgather(block(rank, K), [mat, 1, col])
    assert same(mat, columns)
    # Alltoall of columns: column j of rank i becomes column i of rank j
    mine = np.stack([block(rank, K, salt=j) for j in range(size)], axis=1)
    mat = np.full((K, size), -1.0)
    comm.Alltoall([mine, 1, col], [mat, 1, col])
    assert same(mat, np.stack([block(i, K, salt=rank) for i in range(size)], axis=1))
    # Alltoallw: a column type to each peer, contiguous doubles from each peer
    recv = np.full(K * size, -1.0)
    comm.Alltoallw([mine, [1] * size, [8 * j for j in range(size)], [col] * size],
                   [recv, [K] * size, [8 * K * i for i in range(size)], [MPI.DOUBLE] * size])
    assert same(recv, concat([block(i, K, salt=rank) for i in range(size)]))
    # a persistent Allgather with the column type, reused with new contents
    send = np.zeros(K)
    mat = np.zeros((K, size))
    req = comm.Allgather_init(send, [mat, 1, col])
    for salt in range(3):
        send[:] = block(rank, K, salt=salt)
        mat[:] = -1
        req.Start()
        req.Wait()
        assert same(mat, np.stack([block(r, K, salt=salt) for r in range(size)], axis=1))
    req.Free()
    col.Free()
    """
)


@pytest.mark.parametrize("n", NPROCS)
def test_barrier_bcast(run_mpi, n: int) -> None:
    """Barrier synchronises; Bcast copies the root's buffer everywhere, for every root."""
    assert_ok(run_mpi(n, BARRIER_BCAST), n)


@pytest.mark.parametrize("n", NPROCS)
def test_gather_scatter(run_mpi, n: int) -> None:
    """Gather(v) and Scatter(v) against their definitions, every root, gaps and zeros."""
    assert_ok(run_mpi(n, GATHER_SCATTER), n)


@pytest.mark.parametrize("n", NPROCS)
def test_allgather_alltoall(run_mpi, n: int) -> None:
    """Allgather(v) and Alltoall(v,w) against their definitions."""
    assert_ok(run_mpi(n, ALLGATHER_ALLTOALL), n)


def test_explicit_count_is_per_process(run_mpi) -> None:
    """``[buf, count, type]`` in Gather/Scatter/Allgather/Alltoall gives the per-rank count."""
    assert_ok(run_mpi(3, EXPLICIT_COUNTS), 3)


@pytest.mark.parametrize("n", [3, 4])
def test_derived_datatypes(run_mpi, n: int) -> None:
    """Derived types in collectives; type maps may differ where the signatures match."""
    assert_ok(run_mpi(n, TYPEMAPS), n)


def test_resized_column_type(run_mpi) -> None:
    """Gather/Scatter/Allgather/Alltoall(w) of matrix columns through a resized vector type."""
    assert_ok(run_mpi(3, COLUMNS), 3)
