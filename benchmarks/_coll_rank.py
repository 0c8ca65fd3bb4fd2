"""Rank-side program of ``benchmarks/collectives.py``: timed loops of collective calls.

Run on the number of ranks named in the plan, by ipympi or by a real MPI::

    python -m ipympi.run -n 4 benchmarks/_coll_rank.py --impl ipympi --plan PLAN
    mpiexec -n 4 python benchmarks/_coll_rank.py --impl mpi4py --plan PLAN
    python -m ipympi.run -n 4 benchmarks/_coll_rank.py --impl floor --plan PLAN

(``floor``: the rows whose data fit in a slot, each call done by
``_board_floor.FloorComm``'s bare board traffic, timed with ipympi's communicator.)

``PLAN`` is the JSON text built by :func:`make_plan`. Every row runs one untimed
warm-up loop (whose data are checked); then, when the plan gives no repetition
count ``reps``, timed calibration loops, longer and longer until one lasts at least
a fifth of ``target`` seconds, set ``reps`` so that a trial takes about ``target``
seconds; then ``trials`` timed loops of ``reps`` calls (data checked again). A
timed loop is::

    comm.Barrier(); t0 = perf_counter(); reps calls; t1 = perf_counter()
    per_call = comm.allreduce((t1 - t0) / reps, op=MPI.MAX)

so a trial's time is the slowest rank's mean time per call (the closing reduction
is outside the timed region). Rank 0 prints one line ``COLL-RESULT {json}`` with,
per row, ``reps``, the calibration estimate and the per-call seconds of each trial.
"""

from __future__ import annotations

import json
import math
import sys
import time
from typing import Any, Callable

import _harness
import numpy as np
from _board_floor import FloorComm, fits

RESULT_PREFIX = "COLL-RESULT "
TARGET_SECONDS = 0.25
MAX_REPS = 200_000
CALIBRATION_FRACTION = 0.2

# (name, label, kind, float64 count, unit, warm-up calls, quick reps); the same for every run.
ROWS: list[tuple[str, str, str, int, str, int, int]] = [
    ("Barrier", "Barrier, us", "Barrier", 0, "us", 200, 40),
    ("Bcast-1", "Bcast 1 f64, us", "Bcast", 1, "us", 200, 40),
    ("Bcast-1Ki", "Bcast 1 Ki f64, us", "Bcast", 1 << 10, "us", 200, 40),
    ("Bcast-1Mi", "Bcast 1 Mi f64, ms", "Bcast", 1 << 20, "ms", 3, 2),
    ("Allreduce-1", "Allreduce 1 f64, us", "Allreduce", 1, "us", 200, 40),
    ("Allreduce-1Ki", "Allreduce 1 Ki f64, us", "Allreduce", 1 << 10, "us", 200, 40),
    ("Allreduce-1Mi", "Allreduce 1 Mi f64, ms", "Allreduce", 1 << 20, "ms", 3, 2),
    ("Reduce-1", "Reduce 1 f64, us", "Reduce", 1, "us", 200, 40),
    ("allreduce-int", "allreduce int, us", "allreduce", 0, "us", 200, 40),
    ("Gather-1", "Gather 1 f64, us", "Gather", 1, "us", 200, 40),
    ("Scatter-1", "Scatter 1 f64, us", "Scatter", 1, "us", 200, 40),
    ("Allgather-1", "Allgather 1 f64, us", "Allgather", 1, "us", 200, 40),
    ("Alltoall-1", "Alltoall 1 f64, us", "Alltoall", 1, "us", 200, 40),
]


def make_plan(ranks: int, trials: int, quick: bool) -> dict[str, Any]:
    """The plan of one run on ``ranks`` ranks; ``reps`` is fixed only with ``quick``."""
    rows = []
    for name, label, kind, count, unit, warmup, quick_reps in ROWS:
        rows.append(
            {
                "name": name,
                "label": label,
                "kind": kind,
                "count": count,
                "unit": unit,
                "warmup": min(warmup, quick_reps) if quick else warmup,
                "reps": quick_reps if quick else None,
            }
        )
    return {"ranks": ranks, "trials": trials, "target": TARGET_SECONDS, "rows": rows}


def nice_reps(seconds_per_call: float, target: float) -> int:
    """Calls that take at least ``target`` seconds, rounded up to 2 significant digits."""
    reps = max(2, math.ceil(target / max(seconds_per_call, 1e-9)))
    scale = 10 ** max(0, len(str(reps)) - 2)
    return min(MAX_REPS, -(-reps // scale) * scale)


def _barrier_loop(comm: Any, reps: int) -> None:
    Barrier = comm.Barrier
    for _ in range(reps):
        Barrier()


def _bcast_loop(comm: Any, reps: int, buf: np.ndarray) -> None:
    Bcast = comm.Bcast
    for _ in range(reps):
        Bcast(buf, root=0)


def _allreduce_loop(comm: Any, reps: int, sbuf: np.ndarray, rbuf: np.ndarray, op: Any) -> None:
    Allreduce = comm.Allreduce
    for _ in range(reps):
        Allreduce(sbuf, rbuf, op=op)


def _reduce_loop(comm: Any, reps: int, sbuf: np.ndarray, rbuf: np.ndarray, op: Any) -> None:
    Reduce = comm.Reduce
    for _ in range(reps):
        Reduce(sbuf, rbuf, op=op, root=0)


def _blocks_loop(call: Callable[[Any, Any], None], reps: int, sbuf: Any, rbuf: Any) -> None:
    for _ in range(reps):
        call(sbuf, rbuf)


def _pyobj_loop(comm: Any, reps: int) -> int:
    allreduce = comm.allreduce
    total = 0
    for i in range(reps):
        total = allreduce(i)
    return total


def make_row(
    comm: Any, MPI: Any, row: dict[str, Any]
) -> tuple[Callable[[int], None], Callable[[int], None]]:
    """``(loop, check)``: ``loop(reps)`` makes ``reps`` calls of the row's collective;
    ``check(reps)`` raises if the last loop of ``reps`` calls gave wrong results."""
    rank, size, kind, count = comm.Get_rank(), comm.Get_size(), row["kind"], row["count"]
    name = row["name"]

    def fail(what: str) -> None:
        raise RuntimeError(f"row {name}: rank {rank} {what}")

    if kind == "Barrier":
        return (lambda reps: _barrier_loop(comm, reps)), (lambda reps: None)
    if kind == "Bcast":
        pattern = np.arange(count, dtype=np.float64) + 1.0
        buf = pattern.copy() if rank == 0 else np.zeros(count, dtype=np.float64)

        def check_bcast(reps: int) -> None:
            if not np.array_equal(buf, pattern):
                fail("received other data than rank 0 broadcast")

        return (lambda reps: _bcast_loop(comm, reps, buf)), check_bcast
    if kind == "Allreduce":
        sbuf = np.arange(count, dtype=np.float64) + rank
        rbuf = np.zeros(count, dtype=np.float64)
        expected = np.arange(count, dtype=np.float64) * size + size * (size - 1) / 2

        def check_allreduce(reps: int) -> None:
            if not np.array_equal(rbuf, expected):
                fail("got a wrong Allreduce sum")

        return (lambda reps: _allreduce_loop(comm, reps, sbuf, rbuf, MPI.SUM)), check_allreduce
    if kind == "Reduce":
        sbuf = np.arange(count, dtype=np.float64) + rank
        rbuf = np.zeros(count, dtype=np.float64)
        expected = np.arange(count, dtype=np.float64) * size + size * (size - 1) / 2

        def check_reduce(reps: int) -> None:
            if rank == 0 and not np.array_equal(rbuf, expected):
                fail("got a wrong Reduce sum at the root")

        return (lambda reps: _reduce_loop(comm, reps, sbuf, rbuf, MPI.SUM)), check_reduce
    if kind in ("Gather", "Scatter", "Allgather", "Alltoall"):
        return _blocks_row(comm, kind, count, fail)
    last = [0]

    def pyobj(reps: int) -> None:
        last[0] = _pyobj_loop(comm, reps)

    def check_pyobj(reps: int) -> None:
        if reps and last[0] != (reps - 1) * size:
            fail(f"got allreduce sum {last[0]!r}, expected {(reps - 1) * size}")

    return pyobj, check_pyobj


def _blocks_row(
    comm: Any, kind: str, count: int, fail: Callable[[str], None]
) -> tuple[Callable[[int], None], Callable[[int], None]]:
    """``(loop, check)`` of a row moving ``count`` float64 elements per rank pair: Gather
    (to rank 0), Scatter (from rank 0), Allgather or Alltoall; rank r sends the values
    100 r + destination."""
    rank, size = comm.Get_rank(), comm.Get_size()
    if kind == "Scatter":  # rank 0's blocks, one per rank: rank r gets 100 r + 0.5
        sbuf = np.repeat(100.0 * np.arange(size) + 0.5, count)
        rbuf = np.zeros(count)
        expected = np.full(count, 100.0 * rank + 0.5)
        scatter = comm.Scatter

        def check_scatter(reps: int) -> None:
            if not np.array_equal(rbuf, expected):
                fail(f"received {rbuf.tolist()} in Scatter, expected {expected.tolist()}")

        return (lambda reps: _blocks_loop(scatter, reps, sbuf, rbuf)), check_scatter
    if kind == "Alltoall":
        sbuf = np.repeat(100.0 * rank + np.arange(size), count)
        expected = np.repeat(100.0 * np.arange(size) + rank, count)
    else:
        sbuf = np.full(count, 100.0 * rank)
        expected = np.repeat(100.0 * np.arange(size), count)
    rbuf = np.zeros(size * count)
    call = getattr(comm, kind)

    def check(reps: int) -> None:
        if (kind != "Gather" or rank == 0) and not np.array_equal(rbuf, expected):
            fail(f"received {rbuf.tolist()} in {kind}, expected {expected.tolist()}")

    return (lambda reps: _blocks_loop(call, reps, sbuf, rbuf)), check


def timed(comm: Any, MPI: Any, loop: Callable[[int], None], reps: int) -> float:
    """Barrier, then ``reps`` calls timed on every rank: the slowest rank's seconds per call."""
    comm.Barrier()
    start = time.perf_counter()
    loop(reps)
    elapsed = time.perf_counter() - start
    return comm.allreduce(elapsed / reps, op=MPI.MAX)


def calibrate(comm: Any, MPI: Any, loop: Callable[[int], None], reps: int, target: float) -> float:
    """Seconds per call from timed loops of growing length, the last lasting ``target / 5``.

    Every rank takes the same decisions: they depend only on the reduced per-call time.
    """
    floor = target * CALIBRATION_FRACTION
    while True:
        per_call = timed(comm, MPI, loop, reps)
        if per_call * reps >= floor or reps >= MAX_REPS:
            return per_call
        reps = min(MAX_REPS, max(2 * reps, math.ceil(1.2 * floor / max(per_call, 1e-9))))


def run(comm: Any, MPI: Any, plan: dict[str, Any], calls: Any = None) -> dict[str, dict[str, Any]]:
    """Every row of ``plan``: warm-up, calibration when needed, timed trials. The rows'
    calls are ``calls``' (a :class:`FloorComm`), or ``comm``'s; ``comm`` times them."""
    results: dict[str, dict[str, Any]] = {}
    for row in plan["rows"]:
        loop, check = make_row(comm if calls is None else calls, MPI, row)
        loop(row["warmup"])
        check(row["warmup"])
        reps, estimate = row["reps"], None
        if reps is None:
            estimate = calibrate(comm, MPI, loop, row["warmup"], plan["target"])
            reps = nice_reps(estimate, plan["target"])
        times = [timed(comm, MPI, loop, reps) for _ in range(plan["trials"])]
        check(reps)
        results[row["name"]] = {"reps": reps, "calibration": estimate, "times": times}
    return results


def main(argv: list[str] | None = None) -> int:
    """Run the plan with ipympi's or mpi4py's ``MPI.COMM_WORLD``, or the floor."""
    impls = ("ipympi", "mpi4py", "floor")
    args = _harness.parse_rank_args(__doc__.splitlines()[0], argv, impls)
    plan = json.loads(args.plan)
    floor = args.impl == "floor"
    MPI, version = _harness.load_mpi("ipympi" if floor else args.impl)
    comm = MPI.COMM_WORLD
    if comm.Get_size() != plan["ranks"]:
        print(
            f"_coll_rank.py: plan is for {plan['ranks']} ranks, got {comm.Get_size()}",
            file=sys.stderr,
        )
        return 2
    calls = None
    if floor:
        size = comm.Get_size()
        plan["rows"] = [r for r in plan["rows"] if fits(r["kind"], r["count"], size)]
        calls = FloorComm(comm)
        version = "floor: bare board traffic in Python"
    results = run(comm, MPI, plan, calls)
    if comm.Get_rank() == 0:
        payload = {"impl": args.impl, "version": version, "ranks": plan["ranks"]}
        _harness.emit_result(RESULT_PREFIX, {**payload, "rows": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
