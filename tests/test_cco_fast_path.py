"""Blocking Barrier, Bcast, Allreduce and allreduce on the straight path (``_collfast``).

The straight path and the general one (algorithm generators) must send the
same messages: ranks on either path work together, and a user cannot tell
which one ran. The schedules they share are checked as pure logic; then
programs run with some ranks forced onto the general path, so any difference
in peers, order, tags or signatures would hang or corrupt results.
"""

from __future__ import annotations

import pytest
from conftest import MPI_PRELUDE, assert_ok, mpi_program

from ipympi.core.algorithms import binomial_peers, dissemination_peers
from ipympi.core.reductions import doubling_plan

SIZES = range(1, 18)


@pytest.mark.parametrize("size", SIZES)
def test_dissemination_rounds_pair_up(size: int) -> None:
    plans = [dissemination_peers(rank, size) for rank in range(size)]
    for rank, rounds in enumerate(plans):
        assert len(rounds) == (size - 1).bit_length()
        for i, (distance, to, frm) in enumerate(rounds):
            assert distance == 1 << i
            assert plans[to][i][2] == rank  # the peer hears from this rank in the same round
            assert plans[frm][i][1] == rank


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("root_choice", ["first", "last", "middle"])
def test_binomial_tree_reaches_every_rank_once(size: int, root_choice: str) -> None:
    root = {"first": 0, "last": size - 1, "middle": size // 2}[root_choice]
    parents = {rank: binomial_peers(rank, size, root)[0] for rank in range(size)}
    assert parents[root] is None
    for rank in range(size):
        parent, children = binomial_peers(rank, size, root)
        for child in children:
            assert parents[child] == rank
        if rank != root:
            assert rank in binomial_peers(parent, size, root)[1]
            hops, node = 0, rank  # the root is reached in at most log2(size) hops
            while node != root:
                node = parents[node]
                hops += 1
            assert hops <= (size - 1).bit_length()


@pytest.mark.parametrize("size", SIZES)
def test_recursive_doubling_partners_agree(size: int) -> None:
    plans = [doubling_plan(rank, size) for rank in range(size)]
    for rank, plan in enumerate(plans):
        if plan.fold_to is not None:
            assert plans[plan.fold_to].fold_from == rank
            assert plans[plan.fold_to].unfold_to == rank
            assert plan.unfold_from == plan.fold_to and not plan.partners
        for i, partner in enumerate(plan.partners):
            assert plans[partner].partners[i] == rank
    active = [rank for rank, plan in enumerate(plans) if plan.fold_to is None]
    assert len(active) == 1 << (size.bit_length() - 1)  # a power of two exchanges


MIXED = """
from ipympi.mpi.coll import fast as _collfast
if rank % 2 == {general_parity}:  # these ranks always take the general path
    _collfast._path = lambda *args, **kwargs: None
for root in range(size):
    buf = np.arange(5.0) * (root + 1) if rank == root else np.zeros(5)
    comm.Bcast(buf, root=root)
    assert buf.tolist() == (np.arange(5.0) * (root + 1)).tolist(), (root, buf)
for _ in range(3):
    comm.Barrier()
# point-to-point traffic that arrives while its receiver is in collectives
req = comm.isend(("hello", rank), dest=(rank + 1) % size, tag=7)
comm.Barrier()
assert comm.allreduce(1) == size
assert comm.recv(source=(rank - 1) % size, tag=7) == ("hello", (rank - 1) % size)
req.wait()
# an object too large to travel in one frame
big = comm.allreduce([rank] * 40_000)
assert len(big) == 40_000 * size and big[-1] == size - 1
out = np.zeros(3)
comm.Allreduce(np.array([rank, 1.0, -rank]), out, op=MPI.SUM)
assert out.tolist() == [size * (size - 1) / 2, size, -size * (size - 1) / 2], out
comm.Allreduce(MPI.IN_PLACE, out, op=MPI.MAX)
assert out[1] == size
assert comm.allreduce(rank) == size * (size - 1) // 2
assert comm.allreduce([rank]) == list(range(size))  # a non-commutative order
pairs = comm.allreduce((rank % 3, rank), op=MPI.MAXLOC)
assert pairs == (min(2, size - 1), min(2, size - 1)), pairs
# the straight path keeps a lane on each communicator it ran on: only its ranks have one
assert (comm._live().lane is None) == (rank % 2 == {general_parity})
sub = comm.Split(rank % 2, rank)
assert sub.allreduce(rank) == sum(r for r in range(size) if r % 2 == rank % 2)
sub.Barrier()
sub.Free()
"""


@pytest.mark.timeout(60)
@pytest.mark.parametrize("size", [2, 3, 4, 5])
@pytest.mark.parametrize("general_parity", [0, 1])
def test_ranks_on_either_path_work_together(run_mpi, size: int, general_parity: int) -> None:
    # Without shared boards (as between hosts): ranks with a board never mix paths.
    body = MIXED.replace("{general_parity}", str(general_parity))
    env = {"IPYMPI_SHM_COLL": "0"}
    assert_ok(run_mpi(size, mpi_program(MPI_PRELUDE, body), env=env), size)


@pytest.mark.timeout(60)
def test_a_mismatch_found_on_the_straight_path_reads_as_on_the_general_one(run_mpi) -> None:
    body = """
    try:
        if rank == 0:
            comm.Barrier()
        else:
            comm.Allreduce(np.zeros(2), np.zeros(2))
    except MPI.Exception as exc:
        assert exc.Get_error_class() == MPI.ERR_NOT_SAME, exc
        text = str(exc)
        assert "collective mismatch (collective #0" in text, text
        assert "called Barrier" in text and "called Allreduce" in text, text
    else:
        raise AssertionError(f"rank {rank}: no mismatch reported")
    """
    assert_ok(run_mpi(3, mpi_program(MPI_PRELUDE, body)), 3)


# -- when a communicator gets its shared board -----------------------------------------
def test_a_small_communicator_gets_its_board_from_its_fifth_collective(monkeypatch) -> None:
    from ipympi.mpi.coll import fast
    from ipympi.progress.shmcoll import SMALL

    monkeypatch.delenv("IPYMPI_SHM_COLL_AFTER", raising=False)
    assert fast.board_after(2) == fast.board_after(SMALL) == fast.BOARD_AFTER == 5
    assert fast.board_after(SMALL + 1) == 1  # its rounds cost more than a board
    monkeypatch.setenv("IPYMPI_SHM_COLL_AFTER", "2")
    assert fast.board_after(4) == 2 and fast.board_after(SMALL + 1) == 1
    monkeypatch.setenv("IPYMPI_SHM_COLL_AFTER", "soon")
    assert fast.board_after(4) == 5


BOARD_FROM_THE_FIFTH = """
from ipympi.progress import shmcoll

boarded = shmcoll.available()
for round in range(3):  # each new communicator takes the context the last one freed
    sub = comm.Dup()
    sub.Allreduce(np.ones(1), np.zeros(1))  # its first collective
    sub.Bcast(np.zeros(3), root=0)
    sub.Barrier()
    assert sub.allreduce(rank) == size * (size - 1) // 2
    assert sub._live().lane.board is None  # four calls: the rounds
    sub.Barrier()  # the fifth sets it up, on every rank
    board = sub._live().lane.board
    assert isinstance(board, shmcoll.Board) if boarded else board is False, board
    got = np.zeros(size)
    sub.Allgather(np.full(1, float(rank)), got)
    assert got.tolist() == list(map(float, range(size)))
    sub.Free()
once = comm.Split(0, rank)  # used once, then freed: no board
once.Barrier()
assert once._live().lane.board is None
once.Free()
"""


@pytest.mark.timeout(60)
def test_a_communicator_used_a_few_times_takes_the_rounds_and_then_its_board(run_mpi) -> None:
    assert_ok(run_mpi(4, mpi_program(MPI_PRELUDE, BOARD_FROM_THE_FIFTH), timeout=50), 4)
