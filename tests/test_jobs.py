"""The ids of other jobs' processes (``mpi.jobs``), without processes."""

from __future__ import annotations

import pytest

from ipympi.core.errors import Exception as MPIException
from ipympi.core.wire import FOREIGN_BASE
from ipympi.mpi import jobs


def test_a_block_free_on_every_member_and_its_ids() -> None:
    assert jobs.free_block([set(), set()], "Accept") == 0
    assert jobs.free_block([{0, 2}, {1}], "Accept") == 3
    ids = jobs.foreign_ids(3, 2, "Accept")
    assert ids == [FOREIGN_BASE + 3 * jobs.BLOCK, FOREIGN_BASE + 3 * jobs.BLOCK + 1]
    assert all(jobs.is_foreign(i) for i in ids) and not jobs.is_foreign(FOREIGN_BASE - 1)
    assert max(jobs.foreign_ids(jobs._LAST_BLOCK, jobs.BLOCK, "Accept")) < 2**31
    with pytest.raises(MPIException, match="more than"):
        jobs.foreign_ids(0, jobs.BLOCK + 1, "Accept")


def test_the_union_order_of_an_intercommunicator() -> None:
    # within a job: by world rank, the same on both sides
    assert jobs.local_first([0, 1], [2, 3]) and not jobs.local_first([2, 3], [0, 1])
    # with another job's group: as agreed when connecting (the acceptor's group first)
    remote = jobs.foreign_ids(7, 2, "Connect")
    jobs._FIRST[remote[0]] = False
    try:
        assert not jobs.local_first([0, 1, 2], remote)
        jobs._FIRST[remote[0]] = True
        assert jobs.local_first([0, 1, 2], remote)
    finally:
        jobs._FIRST.pop(remote[0])
