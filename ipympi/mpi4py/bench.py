"""``python -m mpi4py.bench COMMAND [options]``: MPI benchmarks and tests, on ipympi.

Commands (as in mpi4py; run them under ``python -m ipympi.run -n N``):

* ``helloworld``: every process says hello, in rank order.
* ``ringtest``: a message goes around the ring of processes ``--loop`` times; rank 0
  prints the time taken.
* ``pingpong``: ranks 0 and 1 exchange messages of doubling sizes; rank 0 prints the
  bandwidth and the mean time of a round trip per size (``--pickle``: the object
  methods ``send``/``recv``; ``--outband``: :mod:`~ipympi.mpi4py.util.pkl5`'s, pickle
  protocol 5 with out-of-band buffers).
* ``futures``: tasks of growing data sizes through an executor (``--executor mpi``:
  the workers of ``python -m mpi4py.futures``; ``thread``; ``process``); prints the
  task throughput per size.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from typing import Any, Callable

__all__ = ["futures", "helloworld", "main", "pingpong", "ringtest"]


def _mpi(args: argparse.Namespace) -> Any:
    from ipympi.mpi.rc import rc

    if args.threads is not None:
        rc.threads = args.threads
    if args.thread_level is not None:
        rc.thread_level = args.thread_level
    from ipympi import MPI

    return MPI


def helloworld(comm: Any, args: Sequence[str] | None = None, verbose: bool = True) -> str:
    """Hello, World! from every process, in rank order."""
    parser = argparse.ArgumentParser(prog="python -m mpi4py.bench helloworld")
    parser.add_argument("-q", "--quiet", action="store_false", dest="verbose", default=verbose)
    options = parser.parse_args(args)
    from ipympi import MPI

    size, rank = comm.Get_size(), comm.Get_rank()
    message = f"Hello, World! I am process {rank} of {size} on {MPI.Get_processor_name()}.\n"
    from ipympi.mpi4py.util.sync import Sequential

    with Sequential(comm):
        if options.verbose:
            sys.stdout.write(message)
            sys.stdout.flush()
    return message


def ringtest(comm: Any, args: Sequence[str] | None = None, verbose: bool = True) -> float:
    """Time ``--loop`` trips of a ``--size``-byte message around the ring of processes."""
    parser = argparse.ArgumentParser(prog="python -m mpi4py.bench ringtest")
    parser.add_argument("-q", "--quiet", action="store_false", dest="verbose", default=verbose)
    parser.add_argument("-n", "--size", type=int, default=1, help="message size")
    parser.add_argument("-s", "--skip", type=int, default=0, help="number of warm-up iterations")
    parser.add_argument("-l", "--loop", type=int, default=1, help="number of iterations")
    options = parser.parse_args(args)
    from ipympi import MPI

    size, rank = comm.Get_size(), comm.Get_rank()
    source, dest = (rank - 1) % size, (rank + 1) % size
    send, recv = bytearray(options.size), bytearray(options.size)

    def trip() -> None:
        if size == 1:
            comm.Sendrecv([send, MPI.BYTE], dest, 0, [recv, MPI.BYTE], source, 0)
        elif rank == 0:
            comm.Send([send, MPI.BYTE], dest, 0)
            comm.Recv([recv, MPI.BYTE], source, 0)
        else:
            comm.Recv([recv, MPI.BYTE], source, 0)
            comm.Send([recv, MPI.BYTE], dest, 0)

    for _ in range(options.skip):
        trip()
    comm.Barrier()
    start = MPI.Wtime()
    for _ in range(options.loop):
        trip()
    elapsed = MPI.Wtime() - start
    if options.verbose and rank == 0:
        print(
            f"time for {options.loop} loops = {elapsed:g} seconds "
            f"({size} processes, {options.size} bytes)",
            flush=True,
        )
    return elapsed


def _sizes(low: int, high: int) -> list[int]:
    sizes, size = [], max(low, 1)
    if low == 0:
        sizes.append(0)
    while size <= high:
        sizes.append(size)
        size *= 2
    return sizes


def _report(
    title: str, unit: str, rows: list[tuple[int, list[float], float]], header: bool
) -> None:
    """Print one line per size: throughput, then mean and deviation of the times."""
    if header:
        print(f"# {title}")
        print(f"# Size [B]  {unit} | Time Mean [s] ± StdDev [s]  Samples")
    for size, times, rate in rows:
        mean = statistics.fmean(times)
        deviation = statistics.pstdev(times) if len(times) > 1 else 0.0
        print(f"{size:10d} {rate:17.2f} | {mean:.7e} ± {deviation:.4e} {len(times):8d}")
    sys.stdout.flush()


def pingpong(comm: Any, args: Sequence[str] | None = None, verbose: bool = True) -> list:
    """Round trips between ranks 0 and 1 for message sizes from ``-m`` to ``-n`` bytes."""
    parser = argparse.ArgumentParser(prog="python -m mpi4py.bench pingpong")
    parser.add_argument("-q", "--quiet", action="store_false", dest="verbose", default=verbose)
    parser.add_argument("-m", "--min-size", type=int, default=1, help="minimum message size")
    parser.add_argument("-n", "--max-size", type=int, default=1 << 30, help="maximum message size")
    parser.add_argument("-s", "--skip", type=int, default=100, help="number of warm-up iterations")
    parser.add_argument("-l", "--loop", type=int, default=10000, help="number of iterations")
    parser.add_argument("-a", "--array", default="numpy", choices=["numpy", "none"],
                        help="use NumPy arrays (or bytearrays)")  # fmt: skip
    parser.add_argument(
        "-p", "--pickle", action="store_true", help="use pickle-based send and receive"
    )
    parser.add_argument("--protocol", type=int, default=None, help="pickle protocol version")
    parser.add_argument("-o", "--outband", action="store_true", help="use out-of-band pickle")
    parser.add_argument("--threshold", type=int, default=None, help="out-of-band threshold")
    parser.add_argument("--no-header", action="store_false", dest="header", default=True)
    options = parser.parse_args(args)
    from ipympi import MPI

    if options.outband:
        from ipympi.mpi4py.util import pkl5

        comm = pkl5.Intracomm(comm)
        pkl5.pickle.PROTOCOL = options.protocol
        pkl5.pickle.THRESHOLD = options.threshold
    elif options.protocol is not None:
        MPI.pickle.PROTOCOL = options.protocol
    if comm.Get_size() < 2:
        raise SystemExit("pingpong: run with at least 2 processes")
    rank = comm.Get_rank()
    peer = {0: 1, 1: 0}.get(rank)
    objects = options.pickle or options.outband
    rows = []
    for size in _sizes(options.min_size, options.max_size):
        data = _buffer(options.array, size)
        iterations = options.skip + options.loop
        times = []
        for i in range(iterations):
            comm.Barrier()
            start = MPI.Wtime()
            if peer is not None:
                _exchange(comm, data, peer, rank == 0, objects, MPI)
            if i >= options.skip:
                times.append(MPI.Wtime() - start)
        if rank == 0:
            mean = statistics.fmean(times) if times else 0.0
            rate = 2 * size / mean / 1e6 if mean else 0.0
            rows.append((size, times, rate))
    if options.verbose and rank == 0:
        _report("MPI PingPong Test", "Bandwidth [MB/s]", rows, options.header)
    return rows


def _buffer(kind: str, size: int) -> Any:
    if kind == "numpy":
        import numpy

        return numpy.zeros(size, dtype="B")
    return bytearray(size)


def _exchange(comm: Any, data: Any, peer: int, first: bool, objects: bool, MPI: Any) -> None:
    if objects:
        if first:
            comm.send(data, peer, 0)
            comm.recv(None, peer, 0)
        else:
            comm.send(comm.recv(None, peer, 0), peer, 0)
    elif first:
        comm.Send([data, MPI.BYTE], peer, 0)
        comm.Recv([data, MPI.BYTE], peer, 0)
    else:
        comm.Recv([data, MPI.BYTE], peer, 0)
        comm.Send([data, MPI.BYTE], peer, 0)


def _identity(data: Any) -> Any:
    return data


def futures(comm: Any, args: Sequence[str] | None = None, verbose: bool = True) -> list:
    """Tasks of growing data sizes through an executor: throughput per size."""
    parser = argparse.ArgumentParser(prog="python -m mpi4py.bench futures")
    parser.add_argument("-q", "--quiet", action="store_false", dest="verbose", default=verbose)
    parser.add_argument("-e", "--executor", default="mpi", choices=["mpi", "process", "thread"])
    parser.add_argument("-w", "--num-workers", type=int, default=None, dest="workers")
    parser.add_argument("-t", "--num-tasks", type=int, default=50, dest="tasks",
                        help="number of tasks per worker")  # fmt: skip
    parser.add_argument("-m", "--min-size", type=int, default=0, help="minimum task data size")
    parser.add_argument(
        "-n", "--max-size", type=int, default=1 << 20, help="maximum task data size"
    )
    parser.add_argument("-c", "--chunksize", type=int, default=1)
    parser.add_argument("-s", "--skip", type=int, default=1, help="warm-up iterations")
    parser.add_argument("-l", "--loop", type=int, default=3, help="sample iterations")
    parser.add_argument("--no-header", action="store_false", dest="header", default=True)
    options = parser.parse_args(args)
    from ipympi import MPI
    from ipympi.mpi4py import futures as _futures

    executor_class: Callable[..., Any] = {
        "mpi": _futures.MPIPoolExecutor,
        "process": _futures.ProcessPoolExecutor,
        "thread": _futures.ThreadPoolExecutor,
    }[options.executor]
    rows = []
    with executor_class(options.workers) as executor:
        count = options.tasks * executor.num_workers
        for size in _sizes(options.min_size, options.max_size):
            data = [bytearray(size)] * count
            times = []
            for i in range(options.skip + options.loop):
                start = MPI.Wtime()
                for _ in executor.map(_identity, data, chunksize=options.chunksize):
                    pass
                if i >= options.skip:
                    times.append(MPI.Wtime() - start)
            rows.append((size, times, count / statistics.fmean(times)))
    if options.verbose:
        _report("MPI Futures Test", "Tasks / s       ", rows, options.header)
    return rows


_COMMANDS: dict[str, Callable[..., Any]] = {
    "helloworld": helloworld,
    "ringtest": ringtest,
    "pingpong": pingpong,
    "futures": futures,
}


def main(args: Sequence[str] | None = None) -> None:
    """``python -m mpi4py.bench [options] <command> [args]``."""
    parser = argparse.ArgumentParser(
        prog="python -m mpi4py.bench", usage="%(prog)s [options] <command> [args]"
    )
    parser.add_argument("--threads", action="store_true", dest="threads", default=None,
                        help="initialize MPI with thread support")  # fmt: skip
    parser.add_argument("--no-threads", action="store_false", dest="threads", default=None,
                        help="initialize MPI without thread support")  # fmt: skip
    parser.add_argument("--thread-level", dest="thread_level", default=None, metavar="LEVEL",
                        choices=["single", "funneled", "serialized", "multiple"],
                        help="initialize MPI with required thread level")  # fmt: skip
    parser.add_argument("command", metavar="<command>", choices=list(_COMMANDS),
                        help="benchmark command to run")  # fmt: skip
    parser.add_argument("args", nargs=argparse.REMAINDER, metavar="[args]",
                        help="arguments for benchmark command")  # fmt: skip
    options = parser.parse_args(args)
    MPI = _mpi(options)
    _COMMANDS[options.command](MPI.COMM_WORLD, options.args)


if __name__ == "__main__":
    main()
