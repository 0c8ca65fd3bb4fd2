"""Reduction collectives on real ranks, checked against their definitions.

Reduce, Allreduce, Reduce_scatter_block, Reduce_scatter, Scan and Exscan with every
predefined operation on representative datatypes of each group it allows (C and
Fortran-style integers, floating point, complex, logical, byte) and MAXLOC/MINLOC on
every (value, index) pair type; user operations from ``Op.Create`` with
``commute=False`` (left-concatenation of digits proves ascending rank order) and
``commute=True``; bit-identical Allreduce results on every rank; large messages that
select the ring and scatter-allgather algorithms. Each rank computes the expected
result from every rank's operands (generated from seeds), so the programs run at
1..5 ranks. Rules: INVENTORY §4.2, §4.3 C-19..C-22, C-24..C-28.
"""

from __future__ import annotations

import textwrap

import pytest
from conftest import assert_ok

NPROCS = [1, 2, 3, 4, 5]

PRELUDE = '''
import functools
import numpy as np
from ipympi import MPI

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()


def seed(*parts):
    """A seed every rank derives the same way (no hash(): it differs between processes)."""
    return sum((i + 1) * 7919 * (ord(c) if isinstance(c, str) else c)
               for i, c in enumerate("".join(map(str, parts))))


def eq(a, b):
    """Same dtype and values (field by field for pairs, so padding bytes do not count)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.names:
        return all(np.array_equal(a[f], b[f]) for f in a.dtype.names)
    return np.array_equal(a, b)


def fold(combine, xs):
    """x0 o x1 o ... in ascending rank order (combine(left, right))."""
    return functools.reduce(combine, xs[1:], xs[0])


def blocks_of(counts):
    offsets = np.concatenate(([0], np.cumsum(counts))).astype(int)
    return [slice(offsets[i], offsets[i + 1]) for i in range(len(counts))]
'''


def program(body: str) -> str:
    """The prelude, the test body and the final ``OK <rank>`` line."""
    return PRELUDE + textwrap.dedent(body) + '\nprint(f"OK {rank}", flush=True)\n'


PREDEFINED = program(
    """
    LOGICAL = {"LAND": np.logical_and, "LOR": np.logical_or, "LXOR": np.logical_xor}
    UFUNC = {"MAX": np.maximum, "MIN": np.minimum, "SUM": np.add, "PROD": np.multiply,
             "BAND": np.bitwise_and, "BOR": np.bitwise_or, "BXOR": np.bitwise_xor}
    INTS = ["i4", "i8", "i2", "u1", "u4", "u8", "i1"]
    CASES = (
        [("MAX", t) for t in INTS + ["f4", "f8"]]
        + [("MIN", t) for t in INTS + ["f4", "f8"]]
        + [("SUM", t) for t in INTS + ["f4", "f8", "c8", "c16"]]
        + [("PROD", t) for t in ["i4", "i8", "u2", "f4", "f8", "c8", "c16"]]
        + [(op, t) for op in LOGICAL for t in ["i4", "u1", "i8", "?"]]
        + [(op, t) for op in ("BAND", "BOR", "BXOR") for t in INTS + ["byte"]]
    )


    def operand(r, k, dtype, name):
        # rank r's k operands for op `name`; every rank can compute every rank's
        rng = np.random.default_rng(seed(name, dtype, r, k))
        dt = np.dtype("u1" if dtype == "byte" else dtype)
        if name in LOGICAL:
            vals = rng.integers(0, 3, k) * rng.integers(0, 2, k)   # zero or some non-zero
        elif name.startswith("B"):
            info = np.iinfo(dt)
            return rng.integers(info.min, info.max, k, dtype=dt, endpoint=True)
        elif name == "PROD":
            vals = rng.choice([1, 2, 3, -1] if dt.kind in "ifc" else [1, 2, 3], k)
        else:
            vals = rng.integers(-20, 21, k) if dt.kind in "ifc" else rng.integers(0, 41, k)
        if dt.kind == "c":
            return (vals + 1j * rng.integers(-3, 4, k)).astype(dt)
        return vals.astype(dt)


    def combine_for(name, dtype):
        dt = np.dtype("u1" if dtype == "byte" else dtype)
        if name in LOGICAL:
            return lambda a, b: LOGICAL[name](a, b).astype(dt)
        ufunc = UFUNC[name]
        return lambda a, b: ufunc(a, b).astype(dt)


    def spec(arr, dtype):
        return [arr, MPI.BYTE] if dtype == "byte" else arr


    K = 7
    for idx, (name, dtype) in enumerate(CASES):
        op = getattr(MPI, name)
        dt = np.dtype("u1" if dtype == "byte" else dtype)
        combine = combine_for(name, dtype)
        what = (name, dtype)
        root = idx % size

        # Reduce (C-19), at a rotating root; the receive buffer is ignored elsewhere
        xs = [operand(r, K, dtype, name) for r in range(size)]
        want = fold(combine, xs)
        recv = np.zeros(K, dt) if rank == root else None
        comm.Reduce(spec(xs[rank], dtype), spec(recv, dtype) if recv is not None else None,
                    op=op, root=root)
        assert rank != root or eq(recv, want), (what, recv, want)
        assert eq(xs[rank], operand(rank, K, dtype, name)), "send buffer unchanged"

        # Allreduce (C-24)
        recv = np.zeros(K, dt)
        comm.Allreduce(spec(xs[rank], dtype), spec(recv, dtype), op)
        assert eq(recv, want), (what, recv, want)

        # Reduce_scatter_block (C-25): block i of the n*k reduction to rank i
        kb = 2
        ys = [operand(r, size * kb, dtype, name + "rsb") for r in range(size)]
        full = fold(combine, ys)
        recv = np.zeros(kb, dt)
        comm.Reduce_scatter_block(spec(ys[rank], dtype), spec(recv, dtype), op)
        assert eq(recv, full[rank * kb:(rank + 1) * kb]), (what, recv)

        # Reduce_scatter (C-26): recvcounts[i] elements at offset sum(counts[:i])
        counts = [(r + idx) % 3 for r in range(size)]
        zs = [operand(r, sum(counts), dtype, name + "rs") for r in range(size)]
        full = fold(combine, zs)
        recv = np.zeros(counts[rank], dt)
        comm.Reduce_scatter(spec(zs[rank], dtype), spec(recv, dtype), counts, op)
        assert eq(recv, full[blocks_of(counts)[rank]]), (what, recv)

        # Scan (C-27) and Exscan (C-28): prefixes in rank order
        recv = np.zeros(K, dt)
        comm.Scan(spec(xs[rank], dtype), spec(recv, dtype), op)
        assert eq(recv, fold(combine, xs[:rank + 1])), (what, recv)
        recv = np.zeros(K, dt)
        comm.Exscan(spec(xs[rank], dtype), spec(recv, dtype), op)
        assert rank == 0 or eq(recv, fold(combine, xs[:rank])), (what, recv)

    # MAXLOC / MINLOC (C-22) on every pair type: ties go to the smaller index
    PAIRS = [("f8", MPI.DOUBLE_INT), ("f4", MPI.FLOAT_INT), ("i4", MPI.INT_INT),
             ("l", MPI.LONG_INT), ("i2", MPI.SHORT_INT)]


    def pairs(r, k, vt, tag):
        rng = np.random.default_rng(seed("loc", vt, r, k, tag))
        arr = np.zeros(k, np.dtype([("v", vt), ("i", "i4")], align=True))
        arr["v"] = rng.integers(-2, 2, k)     # many ties between ranks
        arr["i"] = rng.integers(0, 40, k)     # indices in no rank order
        return arr


    def loc(better):
        def combine(a, b):
            out = b.copy()
            take = better(a["v"], b["v"]) | ((a["v"] == b["v"]) & (a["i"] < b["i"]))
            out[take] = a[take]
            return out
        return combine


    for name, better in (("MAXLOC", np.greater), ("MINLOC", np.less)):
        op, combine = getattr(MPI, name), loc(better)
        for idx, (vt, mtype) in enumerate(PAIRS):
            what = (name, vt)
            xs = [pairs(r, 6, vt, idx) for r in range(size)]
            want = fold(combine, xs)
            dtype = xs[0].dtype
            root = (idx + 1) % size
            recv = np.zeros(6, dtype)
            comm.Reduce([xs[rank], mtype], [recv, mtype], op, root)
            assert rank != root or eq(recv, want), (what, recv, want)
            recv = np.zeros(6, dtype)
            comm.Allreduce([xs[rank], mtype], [recv, mtype], op)
            assert eq(recv, want), (what, recv, want)
            recv = np.zeros(6, dtype)
            comm.Scan([xs[rank], mtype], [recv, mtype], op)
            assert eq(recv, fold(combine, xs[:rank + 1])), what
            recv = np.zeros(6, dtype)
            comm.Exscan([xs[rank], mtype], [recv, mtype], op)
            assert rank == 0 or eq(recv, fold(combine, xs[:rank])), what
            ys = [pairs(r, 2 * size, vt, idx + 10) for r in range(size)]
            recv = np.zeros(2, dtype)
            comm.Reduce_scatter_block([ys[rank], mtype], [recv, mtype], op)
            assert eq(recv, fold(combine, ys)[2 * rank:2 * rank + 2]), what
    # the lowest rank holding the maximum wins (C-22)
    pair = np.zeros(1, np.dtype([("v", "f8"), ("i", "i4")], align=True))
    pair["v"], pair["i"] = (rank % 2), rank
    out = np.zeros_like(pair)
    comm.Allreduce([pair, MPI.DOUBLE_INT], [out, MPI.DOUBLE_INT], MPI.MAXLOC)
    assert (out["v"][0], out["i"][0]) == ((1.0, 1) if size > 1 else (0.0, 0)), out
    """
)

USER_OPS = program(
    """
    def ndigits(y):
        d = np.ones_like(y)
        t = y // 10
        while (t > 0).any():
            d += t > 0
            t //= 10
        return d


    def concat_digits(invec, inoutvec, datatype):
        # inoutvec[i] = invec[i] o inoutvec[i]: the left operand's digits come first
        left = np.frombuffer(invec, dtype="i8")
        right = np.frombuffer(inoutvec, dtype="i8")
        right[:] = left * 10 ** ndigits(right) + right


    calls = []


    def biggest(invec, inoutvec, datatype):
        calls.append(1)
        left = np.frombuffer(invec, dtype="f8")
        right = np.frombuffer(inoutvec, dtype="f8")
        np.maximum(left, right, out=right)


    CAT = MPI.Op.Create(concat_digits, commute=False)
    BIG = MPI.Op.Create(biggest, commute=True)
    assert not CAT.Is_commutative() and BIG.Is_commutative()
    assert not CAT.is_predefined and MPI.SUM.Is_commutative()


    def digits(r, k, salt=0):
        return ((np.arange(k) * 5 + r * 3 + salt) % 9 + 1).astype("i8")   # 1..9, no zeros


    def cat(xs):
        # the concatenation x0 x1 ... x(m-1) of digit arrays, computed as text
        return np.array([int("".join(str(x[i]) for x in xs)) for i in range(len(xs[0]))], "i8")


    K = 11
    xs = [digits(r, K) for r in range(size)]
    for root in range(size):
        recv = np.zeros(K, "i8") if rank == root else None
        comm.Reduce(xs[rank], recv, CAT, root)
        assert rank != root or eq(recv, cat(xs)), (root, recv, cat(xs))
    recv = np.zeros(K, "i8")
    comm.Allreduce(xs[rank], recv, CAT)
    assert eq(recv, cat(xs)), recv
    recv = np.zeros(K, "i8")
    comm.Scan(xs[rank], recv, CAT)
    assert eq(recv, cat(xs[:rank + 1])), recv
    recv = np.zeros(K, "i8")
    comm.Exscan(xs[rank], recv, CAT)
    assert rank == 0 or eq(recv, cat(xs[:rank])), recv
    ys = [digits(r, 3 * size, salt=4) for r in range(size)]
    recv = np.zeros(3, "i8")
    comm.Reduce_scatter_block(ys[rank], recv, CAT)
    assert eq(recv, cat(ys)[3 * rank:3 * rank + 3]), recv
    counts = [(2 * r + 1) % 4 for r in range(size)]
    zs = [digits(r, sum(counts), salt=7) for r in range(size)]
    recv = np.zeros(counts[rank], "i8")
    comm.Reduce_scatter(zs[rank], recv, counts, CAT)
    assert eq(recv, cat(zs)[blocks_of(counts)[rank]]), recv
    # in place, Allreduce keeps the order too
    buf = digits(rank, K, salt=2)
    comm.Allreduce(MPI.IN_PLACE, buf, CAT)
    assert eq(buf, cat([digits(r, K, salt=2) for r in range(size)]))

    # a commutative user op gives the defined result and is called on every rank > 1
    vals = [np.random.default_rng(seed("big", r)).normal(size=9) for r in range(size)]
    recv = np.zeros(9)
    comm.Allreduce(vals[rank], recv, BIG)
    assert eq(recv, fold(np.maximum, vals))
    recv = np.zeros(9)
    comm.Reduce(vals[rank], recv, BIG, root=size - 1)
    assert rank != size - 1 or eq(recv, fold(np.maximum, vals))
    flags = np.zeros(size, "i4")
    comm.Allgather(np.array([len(calls) > 0], "i4"), flags)
    assert size == 1 or flags.sum() > 0, "the user function ran somewhere"

    # bit-identical Allreduce results on every rank (C-24), small and ring-sized
    for k in (1000, 40001):
        data = np.random.default_rng(seed("bits", rank, k)).normal(size=k) * 10.0 ** rank
        recv = np.empty(k)
        comm.Allreduce(data, recv, MPI.SUM)
        every = np.empty((size, k)) if rank == 0 else None
        comm.Gather(recv, every, root=0)
        if rank == 0:
            first = every[0].tobytes()
            assert all(every[r].tobytes() == first for r in range(size)), k
            want = sum(np.random.default_rng(seed("bits", r, k)).normal(size=k) * 10.0 ** r
                       for r in range(size))
            assert np.allclose(recv, want, rtol=1e-12, atol=1e-9)

    CAT.Free()
    BIG.Free()
    assert CAT == MPI.OP_NULL and BIG == MPI.OP_NULL
    """
)

LARGE = program(
    """
    # Allreduce >= 256 KiB: the ring on 2+ ranks (commutative), recursive doubling else
    for k in (40000, 40001, 33000 + size):
        xs = [np.arange(k, dtype="f8") % 1000 + r for r in range(size)]   # exact sums
        recv = np.zeros(k)
        comm.Allreduce(xs[rank], recv, MPI.SUM)
        assert eq(recv, fold(np.add, xs)), k
    ints = [(np.arange(70000, dtype="i4") * (r + 3)) % 1013 for r in range(size)]
    recv = np.zeros(70000, "i4")
    comm.Allreduce(ints[rank], recv, MPI.MAX)
    assert eq(recv, fold(np.maximum, ints))
    buf = ints[rank].copy()
    comm.Allreduce(MPI.IN_PLACE, buf, MPI.BXOR)
    assert eq(buf, fold(np.bitwise_xor, ints))
    # the ring works in the receive buffer: each start reads the send buffer anew, which
    # stays as it was
    send, recv = np.zeros(40000), np.full(40000, -1.0)
    req = comm.Allreduce_init(send, recv, MPI.SUM)
    for step in range(3):
        send[:] = rank + step
        req.Start()
        req.Wait()
        assert eq(recv, np.full(40000, float(sum(r + step for r in range(size)))))
        assert eq(send, np.full(40000, float(rank + step)))
    req.Free()
    recv = np.full(40000, -1.0)
    comm.Iallreduce(send, recv, MPI.MAX).Wait()
    assert eq(recv, np.full(40000, float(size + 1))) and eq(send, np.full(40000, rank + 2.0))
    send.flags.writeable = False  # read-only memory is fine to send from
    comm.Allreduce(send, recv, MPI.SUM)
    assert eq(recv, np.full(40000, float(sum(r + 2 for r in range(size)))))
    recv = np.zeros(70000, "i4")
    comm.Reduce(ints[rank], recv, MPI.SUM, root=size // 2)
    assert rank != size // 2 or eq(recv, fold(np.add, ints))
    recv = np.zeros(9000, "i4")
    ys = [(np.arange(9000 * size, dtype="i4") * (r + 1)) % 977 for r in range(size)]
    comm.Reduce_scatter_block(ys[rank], recv, MPI.SUM)
    assert eq(recv, fold(np.add, ys)[9000 * rank:9000 * (rank + 1)])

    # a large non-commutative Allreduce keeps rank order (no ring for it)
    def shift_concat(invec, inoutvec, datatype):
        left = np.frombuffer(invec, dtype="i8")
        right = np.frombuffer(inoutvec, dtype="i8")
        width = np.ones_like(right)
        t = right // 10
        while (t > 0).any():
            width += t > 0
            t //= 10
        right[:] = left * 10 ** width + right


    CAT = MPI.Op.Create(shift_concat, commute=False)
    k = 40000
    ds = [(np.arange(k, dtype="i8") + 2 * r) % 9 + 1 for r in range(size)]
    recv = np.zeros(k, "i8")
    comm.Allreduce(ds[rank], recv, CAT)
    want = fold(lambda a, b: a * 10 + b, ds)
    assert eq(recv, want)
    CAT.Free()

    # Bcast >= 256 KiB from every root: scatter + allgather on 3+ ranks
    for root in range(size):
        n = 300 * 1024 + root
        want = np.frombuffer(np.random.default_rng(seed("bc", root)).bytes(n), "u1")
        buf = want.copy() if rank == root else np.zeros(n, "u1")
        comm.Bcast(buf, root=root)
        assert eq(buf, want), root
    big = np.arange(40000, dtype="f8") * 3 if rank == 0 else np.zeros(40000)
    comm.Bcast(big, 0)
    assert eq(big, np.arange(40000, dtype="f8") * 3)

    # Allgather with blocks >= 64 KiB: ring; Allgatherv of large blocks too
    k = 9000
    mine = np.full(k, rank, "f8") + np.arange(k)
    recv = np.zeros(size * k)
    comm.Allgather(mine, recv)
    assert eq(recv, np.concatenate([np.full(k, r, "f8") + np.arange(k) for r in range(size)]))
    counts = [8500 + 700 * r for r in range(size)]
    recv = np.zeros(sum(counts), "i8")
    comm.Allgatherv(np.full(counts[rank], rank + 1, "i8"), [recv, counts])
    assert eq(recv, np.concatenate([np.full(c, r + 1, "i8") for r, c in enumerate(counts)]))

    # large Gather / Scatter / Alltoall
    recv = np.zeros(size * k) if rank == size - 1 else None
    comm.Gather(mine, recv, size - 1)
    if rank == size - 1:
        assert eq(recv, np.concatenate([np.full(k, r, "f8") + np.arange(k) for r in range(size)]))
    src = np.arange(size * k, dtype="f8") if rank == 0 else None
    part = np.zeros(k)
    comm.Scatter(src, part, 0)
    assert eq(part, np.arange(rank * k, (rank + 1) * k, dtype="f8"))
    send = np.concatenate([np.full(k, 100 * rank + j, "f8") for j in range(size)])
    recv = np.zeros(size * k)
    comm.Alltoall(send, recv)
    assert eq(recv, np.concatenate([np.full(k, 100 * i + rank, "f8") for i in range(size)]))
    """
)


ONE_ELEMENT = program(
    """
    # One-element buffers are combined as Python numbers (ScalarValues). Each result
    # must be bit for bit what the array kernel gives on a two-element buffer holding
    # the same value twice (same algorithm, same order of combining): floats keep NaN,
    # -0.0 and inf; integers wrap, and also match numpy's fold in rank order.
    from ipympi.mpi.coll.reduce import _one_element, _Reduction

    UFUNC = {"MAX": np.maximum, "MIN": np.minimum, "SUM": np.add, "PROD": np.multiply}
    TYPES = ["f8", "i1", "i2", "i4", "i8", "u1", "u8", "f4"]  # f4 keeps numpy's way
    AS_NUMBERS = set(TYPES) - {"f4"}
    FLOATS = [0.0, -0.0, 1.5, -3.25, 1e308, -1e308, np.inf, -np.inf, np.nan]


    def value(r, name, t, k=0):
        rng = np.random.default_rng(seed(name, t, r, k))
        dt = np.dtype(t)
        if dt.kind == "f":
            return np.array([FLOATS[rng.integers(0, len(FLOATS))]], dt)
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, 1, dtype=dt, endpoint=True)


    def twice(one):
        return np.repeat(one, 2)


    def same(one, two):
        # a one-element result and a two-element one agree (both elements, bitwise)
        return one.dtype == two.dtype and two.tobytes() == one.tobytes() * 2


    def check(what, call, one_args, two_args, out1, out2, cond=True):
        call(*one_args)
        call(*two_args)
        assert not cond or same(out1, out2), (what, out1, out2)


    for name, ufunc in UFUNC.items():
        op = getattr(MPI, name)
        for t in TYPES:
            dt = np.dtype(t)
            x = value(rank, name, t)
            what = (name, t)
            r1, r2 = np.zeros(1, dt), np.zeros(2, dt)
            parsed = _Reduction("Allreduce", x, r1, op, True, True, one_element=True)
            assert parsed.scalar == (t in AS_NUMBERS), what  # the path this program is about
            # blocking Allreduce skips the parse on that path
            assert (_one_element(x, r1, op) is not None) == (t in AS_NUMBERS), what
            check(what + ("Allreduce",), comm.Allreduce, (x, r1, op), (twice(x), r2, op), r1, r2)
            if dt.kind in "iu":
                with np.errstate(all="ignore"):
                    want = fold(ufunc, [value(r, name, t) for r in range(size)])
                assert r1.tobytes() == want.tobytes(), (what, r1, want)

            r1, r2 = x.copy(), twice(x)
            check(what + ("IN_PLACE",), comm.Allreduce, (MPI.IN_PLACE, r1, op),
                  (MPI.IN_PLACE, r2, op), r1, r2)

            r1, r2 = np.zeros(1, dt), np.zeros(2, dt)
            check(what + ("Iallreduce",), lambda *a: comm.Iallreduce(*a).Wait(),
                  (x, r1, op), (twice(x), r2, op), r1, r2)

            root = size - 1
            r1, r2 = np.zeros(1, dt), np.zeros(2, dt)
            check(what + ("Reduce",), comm.Reduce, (x, r1, op, root), (twice(x), r2, op, root),
                  r1, r2, cond=rank == root)
            # the receive buffer matters at the root only: None elsewhere, the same result
            out = np.zeros(1, dt) if rank == root else None
            comm.Reduce(x, out, op, root)
            assert rank != root or out.tobytes() == r1.tobytes(), (what, out, r1)

            for call in (comm.Scan, comm.Exscan):
                r1, r2 = np.full(1, 7, dt), np.full(2, 7, dt)
                check(what + (call.__name__,), call, (x, r1, op), (twice(x), r2, op), r1, r2)

            # persistent: each Start reads the send buffer anew
            s1, r1, s2, r2 = x.copy(), np.zeros(1, dt), twice(x), np.zeros(2, dt)
            req1 = comm.Allreduce_init(s1, r1, op)
            req2 = comm.Allreduce_init(s2, r2, op)
            for k in range(2):
                s1[:] = value(rank, name, t, k)
                s2[:] = s1[0]
                req1.Start()
                req1.Wait()
                req2.Start()
                req2.Wait()
                assert same(r1, r2), (what, "persistent", k, r1, r2)
            req1.Free()
            req2.Free()

    # what the general parse refuses is refused: float64 in the other byte order (its
    # type character is native float64's, whose path is known by now) ...
    swapped = np.ones(1, np.dtype("f8").newbyteorder())
    frozen = np.zeros(1)  # ... and a receive buffer that cannot be written
    frozen.flags.writeable = False
    for args, error in [((swapped, np.zeros(1, swapped.dtype)), "non-native byte order"),
                        ((np.ones(1), frozen), "not writable")]:
        try:
            comm.Allreduce(*args)
        except BufferError as exc:  # as mpi4py raises it
            assert error in str(exc), (exc, error)
        else:
            raise AssertionError(f"no error from Allreduce{args}")
    # and the one-element path takes what the general one takes
    out = np.zeros(1, "i8")
    comm.Allreduce(np.array([rank], "i8"), out, MPI.Op(MPI.SUM))  # another handle of SUM
    assert out[0] == size * (size - 1) // 2, out
    """
)


@pytest.mark.parametrize("n", NPROCS)
def test_predefined_ops(run_mpi, n: int) -> None:
    """Every predefined op on its datatype groups, through all six reductions."""
    assert_ok(run_mpi(n, PREDEFINED), n)


@pytest.mark.parametrize("n", NPROCS)
def test_user_ops_and_bitwise_identical(run_mpi, n: int) -> None:
    """Non-commutative user ops combine in ascending rank order; Allreduce agrees bitwise."""
    assert_ok(run_mpi(n, USER_OPS), n)


@pytest.mark.parametrize("n", NPROCS)
def test_large_messages(run_mpi, n: int) -> None:
    """Messages large enough for the ring / scatter-allgather algorithms."""
    assert_ok(run_mpi(n, LARGE, timeout=45), n)


@pytest.mark.parametrize("n", NPROCS)
def test_one_element_reductions_match_numpy_bit_for_bit(run_mpi, n: int) -> None:
    """One-element SUM/PROD/MAX/MIN: wrapped integers, NaN and -0.0 exactly as numpy."""
    assert_ok(run_mpi(n, ONE_ELEMENT), n)
