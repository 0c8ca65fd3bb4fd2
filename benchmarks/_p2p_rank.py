"""Rank-side program of ``benchmarks/p2p.py``: ping-pong loops over an MPI communicator.

Run on exactly two ranks, either by ipympi or by a real MPI::

    python -m ipympi.run -n 2 benchmarks/_p2p_rank.py --impl ipympi --plan PLAN
    mpiexec -n 2 python benchmarks/_p2p_rank.py --impl mpi4py --plan PLAN

``PLAN`` is the JSON text built by :func:`make_plan` (rows, iteration counts,
trials). Each row runs one untimed warm-up loop, then ``trials`` timed loops of
``iters`` round trips. Rank 0 times every loop and prints one line
``P2P-RESULT {json}`` holding, per row, the one-way time (round trip / 2) of each
trial in seconds. The helpers here (plan, result line, buffers) are shared with
``_raw_zmq.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

import _harness
import numpy as np

RESULT_PREFIX = "P2P-RESULT "
TAG = 7

# (name, label, kind, nbytes, full iters, quick iters); the same counts for every implementation.
ROWS: list[tuple[str, str, str, int, int, int]] = [
    ("int", "pickled int", "pickle", 0, 15000, 400),
    ("8B", "8 B buffer", "buffer", 8, 15000, 400),
    ("1KiB", "1 KiB buffer", "buffer", 1 << 10, 15000, 400),
    ("64KiB", "64 KiB", "buffer", 1 << 16, 5000, 100),
    ("1MiB", "1 MiB", "buffer", 1 << 20, 1000, 20),
    ("16MiB", "16 MiB", "buffer", 1 << 24, 40, 3),
]
LATENCY_ROWS = ("int", "8B", "1KiB")


def make_plan(trials: int, quick: bool) -> dict[str, Any]:
    """The benchmark plan: every row with its iteration and warm-up counts."""
    rows = []
    for name, label, kind, nbytes, iters, quick_iters in ROWS:
        n = quick_iters if quick else iters
        rows.append(
            {
                "name": name,
                "label": label,
                "kind": kind,
                "nbytes": nbytes,
                "iters": n,
                "warmup": max(2, n // 10),
            }
        )
    return {"trials": trials, "rows": rows}


def parse_args(argv: list[str] | None, impls: tuple[str, ...]) -> argparse.Namespace:
    """Command line of the p2p rank programs: ``--impl`` and ``--plan``."""
    return _harness.parse_rank_args(__doc__.splitlines()[0], argv, impls)


def make_buffers(rank: int, nbytes: int) -> tuple[np.ndarray, np.ndarray]:
    """A send array (filled with a rank-specific pattern) and a receive array, float64."""
    count = max(1, nbytes // 8)
    send = np.arange(count, dtype=np.float64) + 1000.0 * (rank + 1)
    recv = np.zeros(count, dtype=np.float64)
    return send, recv


def check_received(recv: np.ndarray, peer: int, name: str) -> None:
    """Raise if ``recv`` does not hold the peer's pattern (the transport lost data)."""
    expected, _ = make_buffers(peer, recv.nbytes)
    if not np.array_equal(recv, expected):
        raise RuntimeError(f"row {name}: received data differ from what rank {peer} sent")


def emit_result(impl: str, version: str, results: dict[str, list[float]]) -> None:
    """Print the result line read by ``p2p.py``."""
    _harness.emit_result(RESULT_PREFIX, {"impl": impl, "version": version, "rows": results})


def _pickle_loop(comm: Any, rank: int, iters: int) -> float:
    """``iters`` round trips of ``comm.send(i)``/``comm.recv()``; seconds on rank 0."""
    send, recv = comm.send, comm.recv
    if rank == 0:
        start = time.perf_counter()
        for i in range(iters):
            send(i, dest=1, tag=TAG)
            got = recv(source=1, tag=TAG)
        elapsed = time.perf_counter() - start
        if iters and got != iters - 1:
            raise RuntimeError(f"pickled int: got {got!r} back, expected {iters - 1}")
        return elapsed
    for _ in range(iters):
        send(recv(source=0, tag=TAG), dest=0, tag=TAG)
    return 0.0


def _buffer_loop(comm: Any, rank: int, iters: int, sbuf: np.ndarray, rbuf: np.ndarray) -> float:
    """``iters`` round trips of ``Send``/``Recv`` of numpy arrays; seconds on rank 0."""
    Send, Recv = comm.Send, comm.Recv
    if rank == 0:
        start = time.perf_counter()
        for _ in range(iters):
            Send(sbuf, dest=1, tag=TAG)
            Recv(rbuf, source=1, tag=TAG)
        return time.perf_counter() - start
    for _ in range(iters):
        Recv(rbuf, source=0, tag=TAG)
        Send(sbuf, dest=0, tag=TAG)
    return 0.0


def run(comm: Any, plan: dict[str, Any]) -> dict[str, list[float]]:
    """Every row of ``plan``: warm-up, then timed trials; one-way seconds per trial (rank 0)."""
    rank = comm.Get_rank()
    peer = 1 - rank
    if rank == 0:
        comm.send("ping", dest=1, tag=TAG)
        comm.recv(source=1, tag=TAG)
    else:
        comm.send(comm.recv(source=0, tag=TAG), dest=0, tag=TAG)
    results: dict[str, list[float]] = {}
    for row in plan["rows"]:
        name, iters = row["name"], row["iters"]
        if row["kind"] == "pickle":

            def loop(n: int) -> float:
                return _pickle_loop(comm, rank, n)

        else:
            sbuf, rbuf = make_buffers(rank, row["nbytes"])

            def loop(n: int, sbuf: np.ndarray = sbuf, rbuf: np.ndarray = rbuf) -> float:
                return _buffer_loop(comm, rank, n, sbuf, rbuf)

        loop(row["warmup"])
        if row["kind"] == "buffer":
            check_received(rbuf, peer, name)
        results[name] = [loop(iters) / iters / 2 for _ in range(plan["trials"])]
    return results


def main(argv: list[str] | None = None) -> int:
    """Run the plan with ipympi's or mpi4py's ``MPI.COMM_WORLD``."""
    args = parse_args(argv, ("ipympi", "mpi4py"))
    MPI, version = _harness.load_mpi(args.impl)
    comm = MPI.COMM_WORLD
    if comm.Get_size() != 2:
        print(f"_p2p_rank.py needs 2 ranks, got {comm.Get_size()}", file=sys.stderr)
        return 2
    results = run(comm, json.loads(args.plan))
    if comm.Get_rank() == 0:
        emit_result(args.impl, version, results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
