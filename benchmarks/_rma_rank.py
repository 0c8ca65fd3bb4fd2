"""One rank of the one-sided benchmark (``rma.py``): run the plan, print the result line.

``python -m ipympi.run -n 2 benchmarks/_rma_rank.py --impl ipympi --plan JSON`` (or under
``mpiexec`` with ``--impl mpi4py``). Rank 0 is the origin of the passive-target rows;
both ranks take part in the fence and shared-memory rows. Each trial times ``reps``
operations (after one warm-up trial) and reports the time per operation on rank 0.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _harness import emit_result, load_mpi, parse_rank_args

RESULT_PREFIX = "RMA-RESULT "
MIB = 1 << 20

# name, label, unit, quick reps, full reps
ROWS = (
    ("put8", "Put 8 B + Flush", "us", 50, 2000),
    ("get8", "Get 8 B + Flush", "us", 50, 2000),
    ("put1m", "Put 1 MiB, Fence", "us", 5, 200),
    ("fop", "Fetch_and_op + Flush", "us", 50, 2000),
    ("cas", "Compare_and_swap + Flush", "us", 50, 2000),
    ("acc", "Accumulate 8 B + Flush", "us", 50, 2000),
    ("gacc", "Get_accumulate 8 B + Flush", "us", 50, 2000),
    ("shm", "shared 1 MiB load+store", "us", 5, 300),
)


def make_plan(trials: int, quick: bool) -> dict[str, Any]:
    """The rows to run, with their repetition counts."""
    rows = [
        {"name": n, "label": label, "unit": unit, "reps": q if quick else full}
        for n, label, unit, q, full in ROWS
    ]
    return {"trials": trials, "rows": rows}


def _timed(MPI: Any, reps: int, body: Callable[[], None]) -> float:
    """Seconds per call of ``body``: the slowest rank's mean over ``reps`` calls."""
    comm = MPI.COMM_WORLD
    comm.Barrier()
    start = time.perf_counter()
    for _ in range(reps):
        body()
    elapsed = time.perf_counter() - start
    return float(comm.allreduce(elapsed, op=MPI.MAX)) / reps


def run_row(MPI: Any, name: str, reps: int, trials: int) -> list[float]:
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    peer = 1 - rank
    times: list[float] = []
    if name in ("put8", "get8", "fop", "cas", "acc", "gacc"):
        win = MPI.Win.Allocate(64, 8, MPI.INFO_NULL, comm)
        small = np.zeros(1, dtype="i8")
        one = np.ones(1, dtype="i8")
        compare = np.zeros(1, dtype="i8")
        win.Lock_all()

        def body() -> None:
            if rank == 0:
                if name == "put8":
                    win.Put(small, 1, 0)
                elif name == "get8":
                    win.Get(small, 1, 0)
                elif name == "fop":
                    win.Fetch_and_op(one, small, 1, 0, MPI.SUM)
                elif name == "cas":
                    win.Compare_and_swap(one, compare, small, 1, 0)
                elif name == "acc":
                    win.Accumulate(one, 1, 0, MPI.SUM)
                else:
                    win.Get_accumulate(one, small, 1, 0, MPI.SUM)
                win.Flush(1)

        for trial in range(trials + 1):
            t = _timed(MPI, reps, body)
            if trial:
                times.append(t)
        win.Unlock_all()
        win.Free()
    elif name == "put1m":
        win = MPI.Win.Allocate(MIB, 1, MPI.INFO_NULL, comm)
        data = np.ones(MIB, dtype=np.uint8)

        def body() -> None:
            win.Fence()
            win.Put(data, peer, 0)
            win.Fence()

        for trial in range(trials + 1):
            t = _timed(MPI, reps, body)
            if trial:
                times.append(t)
        win.Free()
    else:  # shm: plain numpy loads and stores into the neighbour's shared memory
        win = MPI.Win.Allocate_shared(MIB, 8, MPI.INFO_NULL, comm)
        view = np.frombuffer(win.Shared_query(peer)[0], dtype="f8")
        win.Lock_all()

        def body() -> None:
            np.add(view, 1.0, out=view)

        for trial in range(trials + 1):
            t = _timed(MPI, reps, body)
            win.Sync()
            if trial:
                times.append(t)
        win.Unlock_all()
        win.Free()
    return times


def main(argv: list[str] | None = None) -> None:
    args = parse_rank_args(__doc__.splitlines()[0], argv, ("ipympi", "mpi4py"))
    plan = json.loads(args.plan)
    MPI, version = load_mpi(args.impl)
    rows = {}
    for row in plan["rows"]:
        rows[row["name"]] = {
            "reps": row["reps"],
            "times": run_row(MPI, row["name"], row["reps"], plan["trials"]),
        }
    if MPI.COMM_WORLD.Get_rank() == 0:
        emit_result(RESULT_PREFIX, {"version": version, "rows": rows})


if __name__ == "__main__":
    main()
