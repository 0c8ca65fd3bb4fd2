"""The straight path (``mpi.coll.fast``) of Gather, Scatter, Allgather and Alltoall agrees
with the general one: both run the same algorithm generators, the straight path with its
own sends and receives.

The generators' schedules are checked as pure logic; then programs run with some ranks
forced onto the general path (their messages must meet), and the same faulty programs
run once on each path and must fail alike: the same argument errors, the same mismatch
reports between ranks.
"""

from __future__ import annotations

import re

import pytest
from conftest import MPI_PRELUDE, assert_ok, mpi_program

from ipympi import MPI
from ipympi.core.algorithms import binomial_peers, binomial_subtrees, bruck_rounds, rotate

SIZES = range(1, 18)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("root_choice", ["first", "last", "middle"])
def test_binomial_subtrees_split_each_subtree_among_the_children(
    size: int, root_choice: str
) -> None:
    root = {"first": 0, "last": size - 1, "middle": size // 2}[root_choice]
    for rank in range(size):
        parent, count, children = binomial_subtrees(rank, size, root)
        assert (parent, tuple(c for c, _, _ in children)) == binomial_peers(rank, size, root)
        held = [False] * count  # relative to this rank: itself, then its children's ranges
        held[0] = True
        for child, first, got in children:
            assert (child - rank) % size == first  # a child's range starts with itself
            assert binomial_subtrees(child, size, root)[1] == got
            assert not any(held[first : first + got])
            held[first : first + got] = [True] * got
        assert all(held)
    assert binomial_subtrees(root, size, root)[1] == size


@pytest.mark.parametrize("size", SIZES)
def test_bruck_rounds_pair_up_and_fill_every_block(size: int) -> None:
    plans = [bruck_rounds(rank, size) for rank in range(size)]
    for rank, rounds in enumerate(plans):
        have = 1
        for i, (to, frm, start, count) in enumerate(rounds):
            assert plans[frm][i][0] == rank
            assert plans[to][i][1] == rank and plans[to][i][3] == count
            assert start == have and count <= have
            have += count
        assert have == size


def test_rotate_puts_relative_blocks_in_rank_order() -> None:
    src = memoryview(bytearray(b"abcdef"))
    out = memoryview(bytearray(6))
    rotate(out, src, 2)
    assert bytes(out) == b"cdefab"
    rotate(out, src, 0)
    assert bytes(out) == b"abcdef"


MIXED = """
from ipympi.mpi.coll import fast as _collfast
if rank % 2 == {general_parity}:  # these ranks always take the general path
    _collfast._path = lambda *args, **kwargs: None
for n in (1, 3, 0, 9000):  # 9000 float64: blocks too large for one frame
    mine = np.arange(n, dtype=float) + 1000 * rank
    every = np.concatenate([np.arange(n, dtype=float) + 1000 * r for r in range(size)])
    for root in range(size):
        out = np.full(n * size, -1.0)
        comm.Gather(mine, out, root=root)
        assert rank != root or np.array_equal(out, every), (n, root, out)
        if rank == root:  # IN_PLACE: the root's block is already in place
            out[:] = every
            out[root * n : (root + 1) * n] = -1.0
            out[root * n : (root + 1) * n] = mine
            comm.Gather(MPI.IN_PLACE, out, root=root)
            assert np.array_equal(out, every), (n, root, out)
        else:
            comm.Gather(mine, None, root=root)
        got = np.full(n, -1.0)
        comm.Scatter(every if rank == root else None, got, root=root)
        assert np.array_equal(got, mine), (n, root, got)
        if rank == root:
            whole = every.copy()
            comm.Scatter(whole, MPI.IN_PLACE, root=root)
            assert np.array_equal(whole, every)
        else:
            comm.Scatter(None, got, root=root)
            assert np.array_equal(got, mine)
    out = np.full(n * size, -1.0)
    comm.Allgather(mine, out)
    assert np.array_equal(out, every), (n, out)
    out[:] = -1.0
    out[rank * n : (rank + 1) * n] = mine
    comm.Allgather(MPI.IN_PLACE, out)
    assert np.array_equal(out, every), (n, out)
    sends = np.concatenate([np.arange(n, dtype=float) + 1000 * rank + r for r in range(size)])
    wants = np.concatenate([np.arange(n, dtype=float) + 1000 * r + rank for r in range(size)])
    out = np.full(n * size, -1.0)
    comm.Alltoall(sends, out)
    assert np.array_equal(out, wants), (n, out)
    comm.Alltoall(MPI.IN_PLACE, sends)
    assert np.array_equal(sends, wants), (n, sends)
# Alltoallv: rank r sends r + 1 elements to each rank
counts = [r + 1 for r in range(size)]
sends = np.full((rank + 1) * size, float(rank))
out = np.zeros(sum(counts))
comm.Alltoallv([sends, [rank + 1] * size], [out, counts])
assert out.tolist() == [float(r) for r in range(size) for _ in range(r + 1)], out
# a derived datatype in the receive buffer (unpacked after the call)
pair = MPI.DOUBLE.Create_vector(1, 1, 2).Create_resized(0, 16).Commit()
strided = np.full(2 * size, -1.0)
comm.Allgather(np.array([float(rank)]), [strided, 1, pair])
assert strided[::2].tolist() == [float(r) for r in range(size)], strided
pair.Free()
# interleaved with point-to-point traffic and the other straight collectives
req = comm.isend(rank, dest=(rank + 1) % size, tag=3)
comm.Barrier()
ints = np.zeros(size, dtype=np.int64)
comm.Allgather(np.array([rank], dtype=np.int64), ints)
assert ints.tolist() == list(range(size))
assert comm.recv(source=(rank - 1) % size, tag=3) == (rank - 1) % size
req.wait()
sub = comm.Split(rank % 2, rank)
got = np.zeros(sub.Get_size())
sub.Allgather(np.array([float(rank)]), got)
assert got.tolist() == [float(r) for r in range(size) if r % 2 == rank % 2]
sub.Free()
assert (comm._live().lane is None) == (rank % 2 == {general_parity})
"""


@pytest.mark.timeout(90)
@pytest.mark.parametrize("size", [2, 3, 4, 5])
@pytest.mark.parametrize("general_parity", [0, 1])
def test_ranks_on_either_path_work_together(run_mpi, size: int, general_parity: int) -> None:
    # Without shared boards (as between hosts): the straight path's messages meet the
    # general path's. Ranks with a board never mix paths (``mpi.coll.shmpath``).
    body = MIXED.replace("{general_parity}", str(general_parity))
    env = {"IPYMPI_SHM_COLL": "0"}
    assert_ok(run_mpi(size, mpi_program(MPI_PRELUDE, body), timeout=60, env=env), size)


# Faulty calls: each rank prints what it raised, as "FAULT <rank> <case> <class> <text>".
FAULTS = """
import sys
from ipympi.mpi.coll import fast as _collfast
if sys.argv[1] == "general":
    _collfast._path = lambda *args, **kwargs: None

def attempt(case, fn, *args, **kwargs):
    # run fn; print what it raised (or none); whether it raised
    try:
        fn(*args, **kwargs)
    except (MPI.Exception, ValueError, TypeError) as exc:
        cls = exc.Get_error_class() if isinstance(exc, MPI.Exception) else type(exc).__name__
        print(f"FAULT {rank} {case} {cls} {exc}", flush=True)
        return True
    print(f"FAULT {rank} {case} none", flush=True)
    return False

one, out = np.zeros(1), np.zeros(size)
CASE
"""

BAD_ARGUMENTS = """
attempt("gather-root", comm.Gather, one, out, root=size)
attempt("scatter-root", comm.Scatter, out, one, root=-5)
attempt("gather-in-place", comm.Gather, MPI.IN_PLACE, out, root=(rank + 1) % size)
attempt("scatter-in-place", comm.Scatter, out, MPI.IN_PLACE, root=(rank + 1) % size)
attempt("gather-count", comm.Gather, np.zeros(2), out, root=rank)
attempt("allgather-count", comm.Allgather, np.zeros(2), out)
attempt("allgather-split", comm.Allgather, one, np.zeros(size + 1))
attempt("alltoall-count", comm.Alltoall, np.zeros(size), np.zeros(2 * size))
comm.Barrier()  # every call above failed on every rank before sending anything
"""

# Ranks that disagree: case -> (what rank 0 calls, what the other ranks call). In
# the first two a rank may leave the call before it receives a message of the
# other one: the left-over messages tell it, and its next collective fails. Only
# those ranks call it: a rank that noticed the mismatch in the call has nothing
# more to learn, and a Barrier of its own would wait for ranks that fail theirs.
MISMATCHES = {
    "bcast-gather": ("comm.Bcast(one, root=0)", "comm.Gather(one, out, root=0)"),
    "scatter-gather": ("comm.Scatter(out, one, root=0)", "comm.Gather(one, out, root=0)"),
    "allgather-alltoall": ("comm.Allgather(one, out)", "comm.Alltoall(out, out.copy())"),
    "alltoall-barrier": ("comm.Alltoall(out, out.copy())", "comm.Barrier()"),
    "gather-size": (
        "comm.Gather(one, out, root=0)",
        "comm.Gather(np.zeros(2), np.zeros(2 * size), root=0)",
    ),
    "allgather-size": (
        "comm.Allgather(one, out)",
        "comm.Allgather(np.zeros(2), np.zeros(2 * size))",
    ),
}
LATER = """
for _ in range(2):  # the left-over messages arrive, then the reports they cause
    time.sleep(0.5)
    comm.Iprobe(MPI.ANY_SOURCE, 99)
if not noticed:
    attempt("CASE", comm.Barrier)
"""


def _faults(run_mpi, size: int, case: str, path: str) -> list[str]:
    """The FAULT lines of one run of ``case`` on ``path``, sorted."""
    proc = run_mpi(size, mpi_program(MPI_PRELUDE, FAULTS.replace("CASE", case)), path)
    assert_ok(proc, size)
    return sorted(line for line in proc.stdout.splitlines() if line.startswith("FAULT "))


@pytest.mark.timeout(60)
def test_bad_arguments_raise_the_same_errors_on_either_path(run_mpi) -> None:
    straight = _faults(run_mpi, 3, BAD_ARGUMENTS, "straight")
    assert straight == _faults(run_mpi, 3, BAD_ARGUMENTS, "general")
    assert not [line for line in straight if line.endswith(" none")], straight
    assert len(straight) == 3 * 8


def _reported(line: str) -> tuple[str, ...]:
    """A mismatch report as (rank, case, class, kind, calls named), where the texts
    may differ only in which rank noticed first."""
    _, rank, case, cls, text = line.split(" ", 4)
    kind = "size" if "size mismatch" in text else "calls"
    return (
        rank,
        case,
        cls,
        kind,
        *sorted(set(re.findall(r"rank \d+ called (\w+(?:\(root=\d+\))?)", text))),
    )


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", sorted(MISMATCHES))
def test_mismatched_calls_are_reported_alike_on_either_path(run_mpi, case: str) -> None:
    first, others = MISMATCHES[case]
    body = f"""
noticed = attempt("{case}", lambda: {first} if rank == 0 else {others})
"""
    if case in ("bcast-gather", "scatter-gather"):
        body += LATER.replace("CASE", case)
    reports = {path: _faults(run_mpi, 3, body, path) for path in ("straight", "general")}
    straight = [_reported(line) for line in reports["straight"] if not line.endswith(" none")]
    general = [_reported(line) for line in reports["general"] if not line.endswith(" none")]
    # which rank notices first may differ from run to run, never what is reported
    assert straight and general, reports
    assert {r[2:] for r in straight} == {r[2:] for r in general}, reports
    for report in straight + general:
        assert report[2] == str(MPI.ERR_NOT_SAME), reports
        if case.endswith("-size"):
            assert report[3] == "size", reports
        else:  # both calls named
            assert report[3] == "calls" and len(report) == 6, reports
