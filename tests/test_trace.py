"""Message traces recorded on each rank (``ipympi.progress.tracing``), checked on real runs.

Every point-to-point path leaves one send and one receive record that pair up
by (world source, world destination, context, tag) in non-overtaking order,
with equal sizes, peers and data; calls to PROC_NULL leave none. Every
collective call leaves one record whose rounds list exactly the messages
recorded for them; the dissemination barrier has ceil(log2 p) rounds; with
payloads, the state after a call's last round is that rank's result. Tracing
off means no records and no recorder on the engine; records pickle; ``limit``
truncates; tracing may start before ``MPI.Init``.
"""

from __future__ import annotations

import pytest
from conftest import MPI_PRELUDE, assert_ok, mpi_program

from ipympi.progress import tracing as _trace

NPROCS = [1, 2, 3, 4, 5]

# Checks run inside the MPI programs: on each rank's records, and at rank 0 on all of them.
TRACE_PRELUDE = (
    MPI_PRELUDE
    + '''
import math
import pickle
from collections import defaultdict
from ipympi.progress import tracing as _trace


def collectives(recs):
    return [r for r in recs if r["type"] == "coll"]


def messages(recs, kind):
    return [r for r in recs if r["type"] == kind]


def check_rounds(recs):
    """Each collective's rounds list exactly the messages recorded for them."""
    for c in collectives(recs):
        key = [c["context"], c["seq"]]
        assert c["error"] is None and c["t0"] <= c["t1"], c
        assert c["rank"] == rank, c
        assert [rnd["index"] for rnd in c["rounds"]] == list(range(1, len(c["rounds"]) + 1))
        mine = [r for r in recs if r["type"] in ("send", "recv") and r["coll"] == key]
        assert all(r["call"] == c["call"] for r in mine), (c, mine)
        assert all(1 <= r["round"] <= len(c["rounds"]) for r in mine), (c, mine)
        for rnd in c["rounds"]:
            for kind, field in (("send", "sends"), ("recv", "recvs")):
                got = sorted(
                    [r["cpeer"], r["bytes"]]
                    for r in mine
                    if r["type"] == kind and r["round"] == rnd["index"]
                )
                assert sorted(rnd[field]) == got, (c["call"], rnd, got)
            assert rnd["t0"] <= rnd["t1"], rnd
    # every collective message belongs to a recorded call
    keys = {(c["context"], c["seq"]) for c in collectives(recs)}
    for r in recs:
        if r["type"] in ("send", "recv") and r["coll"] is not None:
            assert tuple(r["coll"]) in keys, r


def pair(per_rank, payloads):
    """Pair every send with its receive (k-th send s->d with (context, tag) to the k-th
    receive at d from s with it); check both sides agree. Returns the pairs."""
    sends, recvs = defaultdict(list), defaultdict(list)
    for world_rank, recs in enumerate(per_rank):
        for r in recs:
            if r["type"] == "send":
                assert r["rank"] == world_rank
                sends[(r["rank"], r["peer"], r["context"], r["tag"])].append(r)
            elif r["type"] == "recv":
                assert r["rank"] == world_rank
                recvs[(r["peer"], r["rank"], r["context"], r["tag"])].append(r)
    assert set(sends) == set(recvs), set(sends) ^ set(recvs)
    pairs = []
    for key, out in sends.items():
        back = recvs[key]
        assert len(out) == len(back), (key, out, back)
        for s, r in zip(out, back):
            assert s["bytes"] == r["bytes"], (s, r)
            assert (s["crank"], s["cpeer"]) == (r["cpeer"], r["crank"]), (s, r)
            assert (s["comm"], s["coll"]) == (r["comm"], r["coll"]), (s, r)
            assert r["arrived"] is None or r["arrived"] <= r["t"], r
            if payloads:
                assert s["data"] == r["data"] and len(s["data"]) == s["bytes"], (s, r)
            pairs.append((s, r))
    return pairs


def check_everyone(recs, payloads):
    """At rank 0, on every rank's records: the messages pair up, and the ranks agree on
    each collective's call, algorithm, size and root. Returns the pairs (rank 0)."""
    everyone = comm.gather(recs, root=0)
    if rank != 0:
        return None
    calls = defaultdict(set)
    for recs in everyone:
        for c in collectives(recs):
            calls[(c["context"], c["seq"])].add((c["call"], c["algorithm"], c["size"], c["root"]))
    assert all(len(v) == 1 for v in calls.values()), calls
    return pair(everyone, payloads)
'''
)


def run(run_mpi, n, body, timeout=60, env=None):
    proc = run_mpi(n, mpi_program(TRACE_PRELUDE, body), timeout=timeout, env=env)
    assert_ok(proc, n)
    return proc


# -- the API on one process --------------------------------------------------------------------
def test_api_without_messages() -> None:
    assert not _trace.active() and _trace.stop() == []
    with pytest.raises(RuntimeError, match="not recording"):
        _trace.records()
    _trace.start()
    assert _trace.active() and _trace.records() == []
    _trace.start(payloads=True)  # starting again starts over
    assert _trace.stop() == [] and not _trace.active()
    with _trace.recording() as recs:
        assert _trace.active() and recs == []
    assert recs == [] and not _trace.active()


BAD = [({"limit": 0}, ValueError), ({"limit": -3}, ValueError), ({"limit": 2.5}, ValueError)]
BAD += [({"limit": True}, ValueError), ({"payloads": "yes"}, TypeError)]


@pytest.mark.parametrize(("kwargs", "error"), BAD)
def test_bad_arguments_are_clear_errors(kwargs, error) -> None:
    with pytest.raises(error, match=r"limit|payloads"):
        _trace.start(**kwargs)
    assert not _trace.active()


SNAPSHOTS = [(memoryview(b"abc"), b"abc"), (bytearray(b"xy"), b"xy"), (b"q", b"q"), (None, None)]
SNAPSHOTS += [([memoryview(b"a"), (1, b"b")], [b"a", [1, b"b"]]), ({"k": [1]}, {"k": [1]})]


@pytest.mark.parametrize(("value", "expected"), SNAPSHOTS)
def test_snapshot_rule(value, expected) -> None:
    assert _trace.snapshot(value) == expected


def test_snapshot_copies() -> None:
    import numpy as np

    arr = np.arange(3)
    buf = bytearray(b"ab")
    objs = [{"x": 1}]
    snaps = [_trace.snapshot(arr), _trace.snapshot(memoryview(buf)), _trace.snapshot(objs)]
    arr[0], buf[0], objs[0]["x"] = 9, 0, 2
    assert snaps[0].tolist() == [0, 1, 2] and snaps[1] == b"ab" and snaps[2] == [{"x": 1}]
    unpicklable = _trace.snapshot(lambda: 0)
    assert isinstance(unpicklable, str) and "lambda" in unpicklable


# -- point to point ----------------------------------------------------------------------------
P2P_BODY = """
MPI.Attach_buffer(bytearray(8 << 20))
small = np.arange(4, dtype=np.float64) + rank
big = np.arange(200_000, dtype=np.float64) + rank  # above the eager limit
r_small, r_big = np.empty_like(small), np.empty_like(big)
obj = {"rank": rank, "items": list(range(rank + 3))}

_trace.start(payloads=True)
comm.Send(small, nxt, 1)                               # eager (the blocking fast path)
comm.Recv(r_small, prv, 1)
req = comm.Isend(big, nxt, 2)                          # rendezvous
comm.Recv(r_big, prv, 2)
req.Wait()
assert np.array_equal(r_big, big - rank + prv)
req = comm.Issend(small, nxt, 3)                       # synchronous
comm.Recv(r_small, prv, 3)
req.Wait()
req = comm.Irecv(r_small, prv, 4)                      # ready: the receive is posted first
handshake()
comm.Rsend(small, nxt, 4)
req.Wait()
comm.Bsend(small, nxt, 5)                              # buffered, small and large
comm.Bsend(big, nxt, 6)
comm.Recv(r_small, prv, 5)
comm.Recv(r_big, prv, 6)
comm.send(obj, nxt, 7)                                 # objects
assert comm.recv(source=prv, tag=7)["rank"] == prv
req = comm.isend(obj, nxt, 8)
assert comm.irecv(source=prv, tag=8).wait()["rank"] == prv
req.wait()
comm.Sendrecv(small, nxt, 9, r_small, prv, 9)
copy = small.copy()
comm.Sendrecv_replace(copy, nxt, 10, prv, 10)
req = comm.Isend(small, rank, 11)                      # to self, small and large
comm.Recv(r_small, rank, 11)
req.Wait()
comm.Send(big, rank, 12)
comm.Recv(r_big, rank, 12)
comm.Send(small, nxt, 13)                              # matched probes
comm.Mprobe(prv, 13).Recv(r_small)
req = comm.Isend(big, nxt, 14)
comm.Mprobe(prv, 14).Recv(r_big)
req.Wait()
comm.send(obj, nxt, 15)
assert comm.mprobe(prv, 15).recv()["rank"] == prv
preqs = [comm.Send_init(small, nxt, 16), comm.Recv_init(r_small, prv, 16)]
for _ in range(2):                                     # persistent, started twice
    MPI.Prequest.Startall(preqs)
    MPI.Request.Waitall(preqs)
comm.Send(small, MPI.PROC_NULL, 17)                    # PROC_NULL: no records
comm.Recv(r_small, MPI.PROC_NULL, 17)
comm.send(obj, MPI.PROC_NULL, 17)
comm.Isend(small, MPI.PROC_NULL, 17).Wait()
comm.Send(small, nxt, 18)                              # arrives before its receive is posted
comm.Barrier()
comm.Recv(r_small, prv, 18)
recs = _trace.stop()
MPI.Detach_buffer()

p2p = [r for r in recs if r["type"] in ("send", "recv") and r["coll"] is None]
assert all(r["context"] == 0 and r["comm"] == "MPI_COMM_WORLD" for r in p2p)
assert all(r["peer"] in range(size) and r["tag"] != 17 for r in p2p), "PROC_NULL recorded"
user = [r for r in p2p if r["tag"] < 900]  # without the handshake's own messages
table = [(1, "Send", "Recv"), (2, "Isend", "Recv"), (3, "Issend", "Recv"), (4, "Rsend", "Irecv"),
         (5, "Bsend", "Recv"), (6, "Bsend", "Recv"), (7, "send", "recv"), (8, "isend", "irecv"),
         (9, "Sendrecv", "Sendrecv"), (10, "Sendrecv_replace", "Sendrecv_replace"),
         (11, "Isend", "Recv"), (12, "Send", "Recv"), (13, "Send", "Mrecv"),
         (14, "Isend", "Mrecv"), (15, "send", "mrecv"), (16, "Send_init", "Recv_init"),
         (16, "Send_init", "Recv_init"), (18, "Send", "Recv")]
expected_sends = [(t, s, rank if t in (11, 12) else nxt) for t, s, _ in table]
expected_recvs = [(t, r, rank if t in (11, 12) else prv) for t, _, r in table]
got_sends = [(r["tag"], r["call"], r["peer"]) for r in messages(user, "send")]
got_recvs = [(r["tag"], r["call"], r["peer"]) for r in messages(user, "recv")]
assert sorted(got_sends) == sorted(expected_sends), got_sends
assert sorted(got_recvs) == sorted(expected_recvs), got_recvs
by_tag = {r["tag"]: r for r in messages(user, "send")}
assert by_tag[1]["data"] == small.tobytes() and by_tag[6]["bytes"] == big.nbytes
assert by_tag[1]["crank"] == rank and by_tag[1]["cpeer"] == nxt
late = [r for r in messages(user, "recv") if r["tag"] == 18][0]
assert late["arrived"] is not None and late["arrived"] < late["t"], late
on_time = [r for r in messages(user, "recv") if r["tag"] == 4][0]
assert on_time["arrived"] is not None and on_time["arrived"] <= on_time["t"]
assert all(r["round"] is None for r in p2p)
check_rounds(recs)
pickle.loads(pickle.dumps(recs))
pairs = check_everyone(recs, payloads=True)
if rank == 0:
    assert len([p for p in pairs if p[0]["coll"] is None and p[0]["tag"] < 900]) == 18 * size
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", [2, 3, 4])
@pytest.mark.parametrize("vm", [True, False], ids=["vm-read", "chunks"])
def test_point_to_point_records_pair_up(run_mpi, n, vm) -> None:
    env = None if vm else {"IPYMPI_NO_VM_READV": "1"}
    run(run_mpi, n, P2P_BODY, timeout=90, env=env)


# -- collectives -------------------------------------------------------------------------------
BARRIER_HAS_LOG2_ROUNDS = """
with _trace.recording() as recs:
    comm.Barrier()
    comm.barrier()
colls = collectives(recs)
assert [c["call"] for c in colls] == ["Barrier", "barrier"]
for c in colls:
    assert c["algorithm"] == "barrier_dissemination" and c["root"] is None
    assert len(c["rounds"]) == math.ceil(math.log2(size)), c
    assert all(r["sends"] == [[(rank + 2**i) % size, 0]] and
               r["recvs"] == [[(rank - 2**i) % size, 0]]
               for i, r in enumerate(c["rounds"])), c
assert colls[0]["seq"] + 1 == colls[1]["seq"]
check_rounds(recs)
check_everyone(recs, payloads=False)
"""


@pytest.mark.parametrize("n", NPROCS)
def test_barrier_has_log2_rounds(run_mpi, n) -> None:
    run(run_mpi, n, BARRIER_HAS_LOG2_ROUNDS)


ALLREDUCE_ROUNDS_AND_FINAL_STATES = """
small = np.arange(5, dtype=np.int64) + 10 * rank
large = np.arange(40_000, dtype=np.float64) * (rank + 1)  # 320 KB: the ring
total_small = sum(np.arange(5, dtype=np.int64) + 10 * r for r in range(size))
total_large = np.arange(40_000, dtype=np.float64) * sum(range(1, size + 1))
out_small, out_large = np.empty_like(small), np.empty_like(large)
with _trace.recording(payloads=True) as recs:
    comm.Allreduce(small, out_small)
    comm.Allreduce(large, out_large)
rd, ring = collectives(recs)
assert rd["algorithm"] == "allreduce_recursive_doubling"
assert ring["algorithm"] == ("allreduce_ring" if size > 1 else
                             "allreduce_recursive_doubling")
pof2 = 1 << (size.bit_length() - 1)
rem = size - pof2
steps = pof2.bit_length() - 1
if rank >= 2 * rem:
    expected = steps  # exchanges only
elif rank % 2:
    expected = 1 + steps + 1  # fold in, exchanges, send the result back
else:
    expected = 2  # fold out, receive the result
assert len(rd["rounds"]) == expected, (rd["rounds"], expected)
if ring["algorithm"] == "allreduce_ring":
    assert len(ring["rounds"]) == 2 * (size - 1)
    labels = [r["label"] for r in ring["rounds"]]
    assert labels[0].startswith("reduce-scatter") and labels[-1].startswith("allgather")
for c, total in ((rd, total_small), (ring, total_large)):
    if size == 1:
        assert c["rounds"] == []
        continue
    after = c["rounds"][-1]["after"]
    assert isinstance(after, np.ndarray) and np.array_equal(after, total), (c, after)
    assert np.array_equal(c["rounds"][0]["before"], small if c is rd else large)
assert np.array_equal(out_small, total_small)
check_rounds(recs)
check_everyone(recs, payloads=True)
"""


@pytest.mark.parametrize("n", NPROCS)
def test_allreduce_rounds_and_final_states(run_mpi, n) -> None:
    run(run_mpi, n, ALLREDUCE_ROUNDS_AND_FINAL_STATES)


COLLECTIVES_BODY = """
i8 = np.int64
results = []  # the records of each call


def traced(check, fn, *args, **kwargs):
    _trace.start(payloads=True)
    value = fn(*args, **kwargs)
    recs = _trace.stop()
    (c,) = collectives(recs)
    check_rounds(recs)
    if c["rounds"]:
        check(c, c["rounds"][-1]["after"])
    else:
        assert size == 1, c
    results.append(recs)
    return value


def as_array(state):
    return np.frombuffer(state, dtype=i8) if isinstance(state, bytes) else np.asarray(state)


def same(expected):
    def check(c, after):
        if isinstance(after, list):
            assert [as_array(x).tolist() for x in after] == [list(e) for e in expected], (c, after)
        else:
            assert as_array(after).tolist() == list(np.ravel(expected)), (c, after)
    return check


def objects(expected, pickled=True):
    # lower-case calls move pickles (a list of them, or one); reductions keep objects
    def check(c, after):
        got = after
        if pickled and isinstance(after, list):
            got = [pickle.loads(x) for x in after]
        elif pickled:
            got = pickle.loads(after)
        assert got == expected, (c, after, expected)
    return check


def anything(c, after):
    pass


def block(r, n=3):
    return np.arange(n, dtype=i8) + 100 * r


root = size - 1
everyone_blocks = np.concatenate([block(r) for r in range(size)])
mine = block(rank)

# Bcast: binomial and, above 256 KiB on more than 2 ranks, scatter + ring allgather
buf = block(root) if rank == root else np.zeros(3, dtype=i8)
traced(same(block(root)), comm.Bcast, buf, root=root)
big = np.arange(40_000, dtype=i8) if rank == root else np.zeros(40_000, dtype=i8)
traced(same(np.arange(40_000)), comm.Bcast, big, root=root)
assert collectives(results[-1])[0]["algorithm"] == (
    "bcast_scatter_allgather" if size > 2 else "bcast_binomial")

# Gather: the root's last round rotates the blocks into rank order
out = np.zeros(3 * size, dtype=i8) if rank == root else None
traced(same(everyone_blocks) if rank == root else anything, comm.Gather, mine, out, root=root)
c = collectives(results[-1])[0]
if rank == root:
    assert c["rounds"][-1]["label"] == "local: rotate into place"
    assert c["rounds"][-1]["sends"] == c["rounds"][-1]["recvs"] == []
else:
    assert as_array(c["rounds"][-1]["after"])[:3].tolist() == mine.tolist()

# Scatter: each rank's last round copies its own block out of the scratch space
src = everyone_blocks if rank == root else None
got = np.zeros(3, dtype=i8)
traced(same(mine), comm.Scatter, src, got, root=root)
assert collectives(results[-1])[0]["rounds"][-1]["label"] == "local: copy own block out"

# Allgather: Bruck (small, then a rotation) and the ring (large blocks)
out = np.zeros(3 * size, dtype=i8)
traced(same(everyone_blocks), comm.Allgather, mine, out)
assert collectives(results[-1])[0]["algorithm"] == "allgather_bruck"
wide = np.full(9000, rank, dtype=i8)
out = np.zeros(9000 * size, dtype=i8)
traced(same(np.repeat(np.arange(size), 9000)), comm.Allgather, wide, out)
assert collectives(results[-1])[0]["algorithm"] == "allgatherv_ring"

# Alltoall: the receive blocks, one per source
send = np.concatenate([block(rank, 2) + 10 * j for j in range(size)])
recv = np.zeros(2 * size, dtype=i8)
traced(same([block(s, 2) + 10 * rank for s in range(size)]), comm.Alltoall, send, recv)

# v-variants
counts = [r + 1 for r in range(size)]
vblocks = [np.full(r + 1, r, dtype=i8) for r in range(size)]
vall = np.concatenate(vblocks)
out = np.zeros(sum(counts), dtype=i8) if rank == root else None
traced(same(vblocks) if rank == root else same(vblocks[rank]),
       comm.Gatherv, vblocks[rank], [out, counts] if rank == root else None, root=root)
got = np.zeros(rank + 1, dtype=i8)
traced(same(vblocks[rank]), comm.Scatterv, [vall, counts] if rank == root else None, got,
       root=root)
out = np.zeros(sum(counts), dtype=i8)
traced(same(vblocks), comm.Allgatherv, vblocks[rank], [out, counts])

# reductions
total = sum(block(r) for r in range(size))
out = np.zeros(3, dtype=i8)
traced(same(total) if rank == root else anything, comm.Reduce, mine, out, op=MPI.SUM, root=root)
traced(same(sum(block(r) for r in range(rank + 1))), comm.Scan, mine, out)
if rank > 0:
    traced(same(sum(block(r) for r in range(rank))), comm.Exscan, mine, out)
else:
    _trace.start(payloads=True)
    comm.Exscan(mine, out)
    recs = _trace.stop()
    assert all(r["before"] is None and r["after"] is None
               for r in collectives(recs)[0]["rounds"])
    check_rounds(recs)
    results.append(recs)
wide = np.arange(2 * size, dtype=i8) + rank
out = np.zeros(2, dtype=i8)
traced(same((np.arange(2 * size) * size + sum(range(size)))[2 * rank: 2 * rank + 2])
       if size > 1 else anything, comm.Reduce_scatter_block, wide, out)
assert collectives(results[-1])[0]["algorithm"] == "reduce_then_scatterv"

# lower case
obj = {"rank": rank}
traced(objects({"rank": root}), comm.bcast, obj if rank == root else None, root=root)
traced(objects([{"rank": r} for r in range(size)]) if rank == root else anything,
       comm.gather, obj, root=root)
traced(objects(rank * 2), comm.scatter, [r * 2 for r in range(size)] if rank == root else None,
       root=root)
traced(objects([{"rank": r} for r in range(size)]), comm.allgather, obj)
traced(objects([(s, rank) for s in range(size)]), comm.alltoall, [(rank, d) for d in range(size)])
concat = lambda a, b: a + b  # noqa: E731  (not commutative: a rank-0 tree, then forwarded)
traced(objects(list(range(size)), pickled=False) if rank == root else anything,
       comm.reduce, [rank], op=concat, root=root)
traced(objects(sum(range(size)), pickled=False), comm.allreduce, rank)
traced(objects(list(range(rank + 1)), pickled=False), comm.scan, [rank], op=concat)
traced(objects(list(range(rank)), pickled=False) if rank > 0 else anything,
       comm.exscan, [rank], op=concat)

pickle.loads(pickle.dumps(results))
check_everyone([r for recs in results for r in recs], payloads=True)
"""


@pytest.mark.timeout(120)
@pytest.mark.parametrize("n", NPROCS)
def test_collectives_rounds_messages_and_final_states(run_mpi, n) -> None:
    run(run_mpi, n, COLLECTIVES_BODY, timeout=90)


NONBLOCKING_AND_PERSISTENT_COLLECTIVES = """
a = np.arange(4, dtype=np.float64) + rank
b, b2 = np.empty_like(a), np.empty_like(a)
c = np.arange(6, dtype=np.int32) if rank == 0 else np.zeros(6, dtype=np.int32)
with _trace.recording(payloads=True) as recs:
    reqs = [comm.Iallreduce(a, b), comm.Ibcast(c, root=0), comm.Ibarrier()]
    MPI.Request.Waitall(reqs)
    preq = comm.Allreduce_init(a, b2)
    for _ in range(2):
        preq.Start()
        preq.Wait()
    value = comm.bcast({"x": 1} if rank == 0 else None, root=0)
colls = collectives(recs)
calls = [x["call"] for x in colls]
assert calls == ["Iallreduce", "Ibcast", "Ibarrier", "Allreduce_init",
                 "Allreduce_init", "bcast"], calls
seqs = [x["seq"] for x in colls]
assert seqs == list(range(seqs[0], seqs[0] + 6)), seqs
assert [x["root"] for x in colls] == [None, 0, None, None, None, 0]
total = sum(np.arange(4, dtype=np.float64) + r for r in range(size))
for x in (colls[0], colls[3], colls[4]):
    assert np.array_equal(x["rounds"][-1]["after"], total), x
assert np.frombuffer(colls[1]["rounds"][-1]["after"], np.int32).tolist() == list(range(6))
assert pickle.loads(colls[5]["rounds"][-1]["after"]) == {"x": 1}
check_rounds(recs)
check_everyone(recs, payloads=True)
"""


@pytest.mark.parametrize("n", [3, 4])
def test_nonblocking_and_persistent_collectives(run_mpi, n) -> None:
    run(run_mpi, n, NONBLOCKING_AND_PERSISTENT_COLLECTIVES)


COLLECTIVES_ON_A_SPLIT_COMMUNICATOR = """
sub = comm.Split(rank % 2, rank)
a = np.array([rank], dtype=np.int64)
b = np.empty_like(a)
with _trace.recording() as recs:
    sub.Allreduce(a, b)
    sub.Send(a, (sub.Get_rank() + 1) % 2, 3)
    sub.Recv(b, (sub.Get_rank() + 1) % 2, 3)
(c,) = collectives(recs)
label = "an unnamed communicator (2 ranks)"  # Split gives no name
assert c["comm"] == label and c["size"] == 2 and c["crank"] == sub.Get_rank()
assert c["context"] == sub._impl.context + 1
for r in recs:
    if r["type"] in ("send", "recv"):
        assert r["comm"] == label and r["crank"] == sub.Get_rank()
        assert r["peer"] == sub._impl.world_ranks[r["cpeer"]] and r["peer"] % 2 == rank % 2
check_everyone(recs, payloads=False)
"""


def test_collectives_on_a_split_communicator(run_mpi) -> None:
    run(run_mpi, 4, COLLECTIVES_ON_A_SPLIT_COMMUNICATOR)


# -- on, off, limits, picklable ----------------------------------------------------------------
OFF_MEANS_NO_RECORDS_AND_NO_HOOKS = """
engine = comm._impl.engine
a, b = np.arange(3.0), np.empty(3)
assert engine.tracer is None and not _trace.active() and _trace.stop() == []
comm.Allreduce(a, b)
comm.Send(a, nxt, 1)
comm.Recv(b, prv, 1)
req = comm.Ibarrier()
assert req._op.trace is None  # the collective keeps no record either
req.Wait()
_trace.start()
assert engine.tracer is not None and _trace.active()
recs = _trace.stop()  # no operation was in progress while recording
assert recs == [] and engine.tracer is None and not _trace.active()
comm.Allreduce(a, b)  # after stop: nothing recorded anywhere
with _trace.recording() as recs:
    comm.Barrier()
assert [r["call"] for r in collectives(recs)] == ["Barrier"]
assert all(r["call"] == "Barrier" for r in recs), recs
"""


def test_off_means_no_records_and_no_hooks(run_mpi) -> None:
    run(run_mpi, 3, OFF_MEANS_NO_RECORDS_AND_NO_HOOKS)


LIMIT_TRUNCATES = """
a, b = np.arange(3.0), np.empty(3)
_trace.start(limit=5)
for i in range(10):
    comm.Send(a, nxt, i)
    comm.Recv(b, prv, i)
assert len(_trace.records()) == 5
recs = _trace.stop()
assert len(recs) == 6 and recs[-1] == {"type": "truncated", "dropped": 15}, recs
assert [(r["type"], r["tag"]) for r in recs[:5]] == [
    ("send", 0), ("recv", 0), ("send", 1), ("recv", 1), ("send", 2)]
assert pickle.loads(pickle.dumps(recs)) == recs
"""


def test_limit_truncates(run_mpi) -> None:
    run(run_mpi, 2, LIMIT_TRUNCATES)


def test_start_before_init(run_mpi) -> None:
    source = """
import numpy as np
import ipympi
ipympi.rc.initialize = False
from ipympi import MPI; from ipympi.progress import tracing as _trace

_trace.start()
assert _trace.active() and _trace.records() == []
MPI.Init()
comm = MPI.COMM_WORLD
rank = comm.Get_rank()
a = np.ones(2)
comm.Allreduce(MPI.IN_PLACE, a)
recs = _trace.stop()
assert [r["call"] for r in recs if r["type"] == "coll"] == ["Allreduce"], recs
assert a.tolist() == [comm.Get_size()] * 2
MPI.Finalize()
print(f"OK {rank}", flush=True)
"""
    proc = run_mpi(2, source)
    assert_ok(proc, 2)
