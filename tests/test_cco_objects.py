"""Lower-case (pickled object) collectives on real ranks.

barrier, bcast, gather, scatter, allgather, alltoall, reduce, allreduce, scan and
exscan with dicts, numpy arrays, None, objects of different sizes per rank and
multi-megabyte pickles; predefined ops on Python numbers and arrays; MAXLOC/MINLOC on
(value, index) tuples (ties go to the smaller index); a non-commutative user op
(2x2 integer matrix product) combining in ascending rank order; exscan returns None
on rank 0. Programs are rank-agnostic and run at 1..5 ranks. Rules: INVENTORY §4.1
(lower-case forms), §4.3 C-9..C-16, C-19..C-22, C-24, C-27, C-28.
"""

from __future__ import annotations

import textwrap

import pytest
from conftest import assert_ok

NPROCS = [1, 2, 3, 4, 5]

PRELUDE = '''
import functools
import time
import numpy as np
from ipympi import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()


def obj(r, salt=0):
    """Rank r's object: nested containers, an array, None, a rank-dependent length."""
    return {"rank": r, "salt": salt, "name": "r" * (r * 50 + 1), "none": None,
            "arr": np.arange(r + 3, dtype="f8") * (salt + 1), "t": (r, [salt, {r: salt}])}


def same(a, b):
    """Deep equality that understands numpy arrays."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (type(a) is type(b) and a.dtype == b.dtype and a.shape == b.shape
                and np.array_equal(a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return (type(a) is type(b) and len(a) == len(b)
                and all(same(x, y) for x, y in zip(a, b)))
    return type(a) is type(b) and a == b


def fold(combine, xs):
    return functools.reduce(combine, xs[1:], xs[0])
'''


def program(body: str) -> str:
    """The prelude, the test body and the final ``OK <rank>`` line."""
    return PRELUDE + textwrap.dedent(body) + '\nprint(f"OK {rank}", flush=True)\n'


MOVEMENT = program(
    """
    # barrier: nobody leaves before the last rank entered
    comm.barrier()
    if rank == size - 1:
        time.sleep(0.2)
    entered = time.time()
    comm.barrier()
    left = time.time()
    stamps = comm.allgather((entered, left))
    assert min(s[1] for s in stamps) >= stamps[size - 1][0], stamps

    # bcast from every root: the root's object everywhere (a copy elsewhere)
    for root in range(size):
        for value in (obj(root, 1), None, 7, "text", np.eye(3, dtype="i4"), [None, (1, 2)]):
            got = comm.bcast(value if rank == root else "junk", root=root)
            assert same(got, value), (root, got, value)
    assert comm.bcast(obj(0)) is not None and same(comm.bcast(obj(0) if rank == 0 else None),
                                                   obj(0))
    # large pickles (> 1 MiB) travel too
    huge = {"a": np.arange(400_000, dtype="f8"), "s": "x" * 1_500_000}
    got = comm.bcast(huge if rank == size - 1 else None, root=size - 1)
    assert same(got, huge)

    # gather: the root gets the list in rank order, the others None
    for root in range(size):
        got = comm.gather(obj(rank, root), root=root)
        if rank == root:
            assert isinstance(got, list) and len(got) == size
            assert all(same(got[r], obj(r, root)) for r in range(size)), got
        else:
            assert got is None
    got = comm.gather(None, root=0)
    assert got is None if rank else got == [None] * size
    got = comm.gather(np.full(200_000, rank, "i8"), root=0)
    assert rank != 0 or all(same(got[r], np.full(200_000, r, "i8")) for r in range(size))

    # scatter: item i of the root's sequence to rank i; the others' argument is ignored
    for root in range(size):
        items = [obj(r, 10 + root) for r in range(size)]
        got = comm.scatter(items if rank == root else None, root=root)
        assert same(got, obj(rank, 10 + root)), got
    got = comm.scatter(tuple(range(size)) if rank == 0 else "ignored", root=0)
    assert got == rank
    got = comm.scatter([None] * size if rank == 0 else None)
    assert got is None
    big = [np.full(150_000, r, "f8") for r in range(size)]
    got = comm.scatter(big if rank == 0 else None)
    assert same(got, big[rank])

    # allgather and alltoall
    got = comm.allgather(obj(rank, 3))
    assert len(got) == size and all(same(got[r], obj(r, 3)) for r in range(size))
    assert comm.allgather(None) == [None] * size
    got = comm.allgather(np.full(100_000 + rank, rank, "i4"))
    assert all(same(got[r], np.full(100_000 + r, r, "i4")) for r in range(size))
    got = comm.alltoall([(rank, j, obj(j, rank)) for j in range(size)])
    assert all(same(got[i], (i, rank, obj(rank, i))) for i in range(size)), got
    got = comm.alltoall([None if (rank + j) % 2 else np.full(60_000, j) for j in range(size)])
    for i in range(size):
        assert same(got[i], None if (rank + i) % 2 else np.full(60_000, rank)), i
    """
)

REDUCTIONS = program(
    """
    # predefined ops on Python numbers: reduce at every root, allreduce, scan, exscan
    vals = [(r * 7) % 5 - 2 for r in range(size)]
    flags = [r % 3 != 1 for r in range(size)]
    cases = [(MPI.SUM, vals, lambda a, b: a + b), (MPI.PROD, [v or 3 for v in vals],
                                                  lambda a, b: a * b),
             (MPI.MAX, vals, max), (MPI.MIN, vals, min),
             (MPI.LAND, flags, lambda a, b: a and b), (MPI.LOR, flags, lambda a, b: a or b),
             (MPI.LXOR, flags, lambda a, b: a != b),
             (MPI.BAND, [v + 6 for v in vals], lambda a, b: a & b),
             (MPI.BOR, [v + 6 for v in vals], lambda a, b: a | b),
             (MPI.BXOR, [v + 6 for v in vals], lambda a, b: a ^ b)]
    for op, xs, combine in cases:
        want = fold(combine, xs)
        for root in range(size):
            got = comm.reduce(xs[rank], op=op, root=root)
            assert got == want if rank == root else got is None, (op, got, want)
        assert comm.allreduce(xs[rank], op=op) == want, op
        assert comm.scan(xs[rank], op=op) == fold(combine, xs[:rank + 1]), op
        got = comm.exscan(xs[rank], op=op)
        assert got is None if rank == 0 else got == fold(combine, xs[:rank]), (op, got)
    # default op is SUM; floats and numpy arrays (element-wise)
    assert comm.allreduce(rank) == size * (size - 1) // 2
    assert comm.allreduce(0.5 * rank) == 0.5 * size * (size - 1) / 2
    arrs = [np.arange(5, dtype="f8") * (r + 1) for r in range(size)]
    assert same(comm.allreduce(arrs[rank], op=MPI.SUM), fold(np.add, arrs))
    got = comm.reduce(arrs[rank], root=size - 1)
    assert same(got, fold(np.add, arrs)) if rank == size - 1 else got is None
    got = comm.scan(arrs[rank])
    assert same(got, fold(np.add, arrs[:rank + 1]))
    got = comm.exscan(arrs[rank])
    assert got is None if rank == 0 else same(got, fold(np.add, arrs[:rank]))
    # a large array (> 1 MiB pickle)
    big = np.full(300_000, float(rank + 1))
    assert same(comm.allreduce(big), np.full(300_000, size * (size + 1) / 2))

    # MAXLOC / MINLOC on (value, index) tuples: ties go to the smaller index (C-22)
    pairs = [((r * 3) % 4, 10 - r) for r in range(size)]
    top = max(v for v, _ in pairs)
    low = min(v for v, _ in pairs)
    want_max = (top, min(i for v, i in pairs if v == top))
    want_min = (low, min(i for v, i in pairs if v == low))
    assert tuple(comm.allreduce(pairs[rank], op=MPI.MAXLOC)) == want_max
    assert tuple(comm.allreduce(pairs[rank], op=MPI.MINLOC)) == want_min
    got = comm.reduce(pairs[rank], op=MPI.MAXLOC, root=0)
    assert rank != 0 or tuple(got) == want_max
    # (value, rank) pairs: the lowest rank with the extreme value
    assert tuple(comm.allreduce((rank % 2, rank), op=MPI.MAXLOC)) == (
        (1, 1) if size > 1 else (0, 0))
    assert tuple(comm.allreduce((rank % 2, rank), op=MPI.MINLOC)) == (0, 0)
    got = comm.scan((-(rank % 3), rank), op=MPI.MINLOC)
    prefix = [(-(r % 3), r) for r in range(rank + 1)]
    low = min(v for v, _ in prefix)
    assert tuple(got) == (low, min(i for v, i in prefix if v == low)), got

    # a non-commutative user op: 2x2 integer matrix product, in ascending rank order
    def matmul(a, b, datatype=None):
        return (a @ b) % 1_000_003

    MATMUL = MPI.Op.Create(matmul, commute=False)
    mats = [np.array([[r + 1, 2], [r % 3, 1]], dtype="i8") for r in range(size)]
    want = fold(lambda a, b: (a @ b) % 1_000_003, mats)
    for root in range(size):
        got = comm.reduce(mats[rank], op=MATMUL, root=root)
        assert same(got, want) if rank == root else got is None, (root, got, want)
    assert same(comm.allreduce(mats[rank], op=MATMUL), want)
    assert same(comm.scan(mats[rank], op=MATMUL),
                fold(lambda a, b: (a @ b) % 1_000_003, mats[:rank + 1]))
    got = comm.exscan(mats[rank], op=MATMUL)
    assert got is None if rank == 0 else same(
        got, fold(lambda a, b: (a @ b) % 1_000_003, mats[:rank]))
    # string concatenation, also non-commutative
    CAT = MPI.Op.Create(lambda a, b, datatype=None: a + b, commute=False)
    letters = "abcdefghij"
    assert comm.allreduce(letters[rank], op=CAT) == letters[:size]
    assert comm.scan(letters[rank] * 2, op=CAT) == "".join(c * 2 for c in letters[:rank + 1])
    got = comm.exscan(letters[rank], op=CAT)
    assert got is None if rank == 0 else got == letters[:rank]
    MATMUL.Free()
    CAT.Free()
    """
)


@pytest.mark.parametrize("n", NPROCS)
def test_object_movement(run_mpi, n: int) -> None:
    """barrier, bcast, gather, scatter, allgather, alltoall with Python objects."""
    assert_ok(run_mpi(n, MOVEMENT), n)


@pytest.mark.parametrize("n", NPROCS)
def test_object_reductions(run_mpi, n: int) -> None:
    """reduce, allreduce, scan, exscan: predefined ops, MAXLOC pairs, user ops in order."""
    assert_ok(run_mpi(n, REDUCTIONS), n)
