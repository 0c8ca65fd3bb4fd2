"""A mismatch report reaches a rank before that rank gets to the mismatched collective.

Ranks 0 and 1 find that collective #1 does not match (Barrier against
allreduce) and tell every rank, while rank 2 is still on its way to
collective #0. Rank 2's collectives up to the mismatched one are sound and
must complete with the right data; the mismatch fails it at collective #1,
in every form a collective can be started (blocking, nonblocking, persistent).
"""

from __future__ import annotations

import pytest
from conftest import MPI_PRELUDE, assert_ok, mpi_program

FORMS = {  # collective #0, as one statement
    "blocking": "got = comm.bcast('data' if rank == 0 else None, root=0)",
    "nonblocking": "comm.Ibcast(buf, root=0).Wait()",
    "persistent": "req = comm.Bcast_init(buf, root=0); req.Start(); req.Wait()",
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("form", sorted(FORMS))
def test_a_report_about_a_later_collective_waits_for_it(run_mpi, form: str) -> None:
    body = f"""
    buf = np.arange(4.0) if rank == 0 else np.zeros(4)
    if rank == 2:
        time.sleep(0.5)  # the others find the mismatch of collective #1 meanwhile
    got = None
    try:
        {FORMS[form]}
    except MPI.Exception as exc:
        raise AssertionError(f"collective #0 failed on rank {{rank}}: {{exc}}") from None
    assert got == "data" or (got is None and buf.tolist() == [0.0, 1.0, 2.0, 3.0]), (got, buf)
    try:
        if rank == 1:
            comm.allreduce(rank)
        else:
            comm.Barrier()
    except MPI.Exception as exc:
        assert exc.Get_error_class() == MPI.ERR_NOT_SAME, exc
        assert "collective #1" in str(exc), str(exc)
    else:
        raise AssertionError(f"rank {{rank}}: no mismatch reported")
    """
    assert_ok(run_mpi(3, mpi_program(MPI_PRELUDE, body)), 3)


@pytest.mark.timeout(60)
def test_ranks_that_wait_long_for_a_late_rank_in_the_same_collective_report_nothing(
    run_mpi,
) -> None:
    """A rank waiting long in a collective asks the rank it waits for whether it called
    the same one (``CHECK``); a late rank on its way to the same call, or already in
    it, is no mismatch, on the straight path (Bcast, Allreduce, Gather) or the general
    one (Reduce, a persistent Bcast)."""
    body = """
    late = size - 1
    buf = np.zeros(4)
    for step in range(5):
        if rank == late or (rank == 0 and step % 2):
            time.sleep(0.25)  # longer than a wait takes to ask
        if rank == 0:
            buf[:] = step
        comm.Bcast(buf, root=0)
        assert buf.tolist() == [step] * 4, buf
        total = np.zeros(1)
        comm.Reduce(np.ones(1), total if rank == 0 else None, MPI.SUM, root=0)
        assert rank != 0 or total[0] == size, total
        assert comm.allreduce(rank) == size * (size - 1) // 2
        got = np.zeros(size)
        comm.Gather(np.full(1, float(rank)), got, root=late)
        assert rank != late or got.tolist() == list(map(float, range(size))), got
        req = comm.Bcast_init(buf, root=late)
        req.Start()
        req.Wait()
        req.Free()
    """
    assert_ok(run_mpi(3, mpi_program(MPI_PRELUDE, body)), 3)
    assert_ok(run_mpi(4, mpi_program(MPI_PRELUDE, body)), 4)
