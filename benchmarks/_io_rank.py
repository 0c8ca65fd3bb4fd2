"""Rank program of ``io.py``: timed collective writes and reads of one shared file.

``python _io_rank.py --impl ipympi|mpi4py --plan JSON`` (under ``ipympi.run`` or
``mpiexec``). Each trial of each row: Barrier, then every rank writes its share of
``total`` bytes with the row's access pattern, Barrier; then (after an untimed Sync)
reads it back the same way. A phase's time is the max over ranks; the result line
carries every trial's times.
Reads are checked against what was written.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _harness import emit_result, load_mpi, parse_rank_args

RESULT_PREFIX = "IO-RESULT "
IMPLS = ("ipympi", "mpi4py")


def make_plan(total: int, piece: int, trials: int, folder: str) -> dict[str, Any]:
    """The rows: contiguous blocks with explicit offsets, and pieces through a vector view."""
    return {
        "total": total,
        "piece": piece,
        "trials": trials,
        "folder": folder,
        "rows": [
            {"name": "contiguous", "label": "contiguous Write_at_all / Read_at_all"},
            {"name": "interleaved", "label": "interleaved vector view Write_all / Read_all"},
        ],
    }


def main(argv: list[str] | None = None) -> int:
    import numpy as np

    args = parse_rank_args(__doc__.splitlines()[0], argv, IMPLS)
    import json

    plan = json.loads(args.plan)
    MPI, version = load_mpi(args.impl)
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    share, piece = plan["total"] // size, plan["piece"]
    data = np.full(share, rank + 1, dtype=np.uint8)
    back = np.empty_like(data)
    name = os.path.join(plan["folder"], f"{args.impl}.bin")
    amode = MPI.MODE_CREATE | MPI.MODE_RDWR
    results: dict[str, Any] = {}
    for row in plan["rows"]:
        vector = None
        if row["name"] == "interleaved":
            vector = MPI.BYTE.Create_vector(share // piece, piece, piece * size).Commit()
        writes, reads = [], []
        for _ in range(plan["trials"]):
            fh = MPI.File.Open(comm, name, amode)
            if vector is not None:
                fh.Set_view(rank * piece, MPI.BYTE, vector)
            for phase, times in (("write", writes), ("read", reads)):
                comm.Barrier()
                start = time.perf_counter()
                if vector is None:
                    op = fh.Write_at_all if phase == "write" else fh.Read_at_all
                    op(rank * share, data if phase == "write" else back)
                else:
                    if phase == "read":
                        fh.Seek(0)
                    (fh.Write_all if phase == "write" else fh.Read_all)(
                        data if phase == "write" else back
                    )
                comm.Barrier()
                times.append(comm.allreduce(time.perf_counter() - start, op=MPI.MAX))
                if phase == "write":  # (untimed: the device's speed is not the library's)
                    fh.Sync()
                    comm.Barrier()
            assert (back == rank + 1).all(), "read back something else"
            fh.Close()
            comm.Barrier()
            if rank == 0:
                os.unlink(name)
        if vector is not None:
            vector.Free()
        results[row["name"]] = {"write": writes, "read": reads}
    if rank == 0:
        emit_result(RESULT_PREFIX, {"version": version, "rows": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
