"""The raw pyzmq floor of ``benchmarks/p2p.py``: the same ping-pong loops without MPI.

``python benchmarks/_raw_zmq.py --impl raw --plan PLAN`` starts two rank processes
(this file with ``--rank 0`` / ``--rank 1``) and passes on rank 0's ``P2P-RESULT`` line.
Each rank binds a PULL socket at ``ipc://<tmpdir>/r<rank>`` and connects a PUSH socket
to the peer's (with ``--tcp``: at ``tcp://127.0.0.2:*`` and ``tcp://127.0.0.3:*``, the
floor for ranks on different hosts). Messages carry a 16-byte ``struct`` header (source,
tag, sequence):

- pickled int: one frame, header + ``pickle.dumps(i)``; the receiver unpickles it;
- small buffers (below ``LARGE``): one frame, header + the array's bytes; the receiver
  copies the payload into its array;
- large buffers: the header frame and the array sent with ``copy=False`` as one
  two-frame message; the receiver takes the payload with ``recv(copy=False)`` and
  ``np.copyto`` into its array (the cheapest delivery into a user's buffer through zmq).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import struct
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np
import zmq
from _p2p_rank import TAG, check_received, emit_result, make_buffers, parse_args

HEADER = struct.Struct("<iiQ")
LARGE = 1 << 16
PICKLE_PROTOCOL = pickle.HIGHEST_PROTOCOL


class Endpoint:
    """One rank's PULL (bound) and PUSH (connected to the peer) sockets.

    ipc sockets in ``directory``, or with ``tcp`` tcp sockets on 127.0.0.2 (rank 0)
    and 127.0.0.3 (rank 1), whose ports the ranks exchange through files there.
    """

    def __init__(self, rank: int, directory: str, tcp: bool = False) -> None:
        self.rank = rank
        self.ctx = zmq.Context()
        self.pull = self.ctx.socket(zmq.PULL)
        self.push = self.ctx.socket(zmq.PUSH)
        if tcp:
            port = self.pull.bind_to_random_port(f"tcp://127.0.0.{2 + rank}")
            _publish(os.path.join(directory, f"port{rank}"), str(port))
            peer = _await(os.path.join(directory, f"port{1 - rank}"))
            self.push.connect(f"tcp://127.0.0.{3 - rank}:{peer}")
        else:
            self.pull.bind(f"ipc://{directory}/r{rank}")
            self.push.connect(f"ipc://{directory}/r{1 - rank}")
        self.seq = 0

    def close(self) -> None:
        """Close both sockets and the context."""
        self.pull.close(linger=0)
        self.push.close(linger=1000)
        self.ctx.term()

    def handshake(self) -> None:
        """One pickled ping-pong, so both sockets are connected before any timing."""
        if self.rank == 0:
            self.push.send(HEADER.pack(0, TAG, 0) + pickle.dumps("ping"))
            self.pull.recv()
        else:
            self.push.send(self.pull.recv())

    def pickle_loop(self, iters: int) -> float:
        """``iters`` round trips of a pickled int; seconds on rank 0."""
        send, recv, pack, unpack = self.push.send, self.pull.recv, HEADER.pack, HEADER.unpack_from
        dumps, loads, rank, seq, size = pickle.dumps, pickle.loads, self.rank, self.seq, HEADER.size
        got = None
        start = time.perf_counter()
        if rank == 0:
            for i in range(iters):
                seq += 1
                send(pack(rank, TAG, seq) + dumps(i, PICKLE_PROTOCOL))
                msg = recv()
                unpack(msg)
                got = loads(memoryview(msg)[size:])
        else:
            for _ in range(iters):
                msg = recv()
                unpack(msg)
                seq += 1
                send(pack(rank, TAG, seq) + dumps(loads(memoryview(msg)[size:]), PICKLE_PROTOCOL))
        elapsed = time.perf_counter() - start
        self.seq = seq
        if rank == 0 and iters and got != iters - 1:
            raise RuntimeError(f"pickled int: got {got!r} back, expected {iters - 1}")
        return elapsed

    def small_loop(self, iters: int, sbuf: np.ndarray, rbuf: np.ndarray) -> float:
        """``iters`` round trips of header + bytes in one frame, copied into ``rbuf``."""
        send, recv, pack, unpack = self.push.send, self.pull.recv, HEADER.pack, HEADER.unpack_from
        payload, target = memoryview(sbuf).cast("B"), memoryview(rbuf).cast("B")
        rank, seq, size = self.rank, self.seq, HEADER.size
        start = time.perf_counter()
        if rank == 0:
            for _ in range(iters):
                seq += 1
                send(pack(rank, TAG, seq) + payload)
                msg = recv()
                unpack(msg)
                target[:] = memoryview(msg)[size:]
        else:
            for _ in range(iters):
                msg = recv()
                unpack(msg)
                target[:] = memoryview(msg)[size:]
                seq += 1
                send(pack(rank, TAG, seq) + payload)
        self.seq = seq
        return time.perf_counter() - start

    def large_loop(self, iters: int, sbuf: np.ndarray, rbuf: np.ndarray) -> float:
        """``iters`` round trips of [header, array with ``copy=False``], copied into ``rbuf``."""
        send, recv, pack, unpack = self.push.send, self.pull.recv, HEADER.pack, HEADER.unpack_from
        rank, seq, more, dtype = self.rank, self.seq, zmq.SNDMORE, rbuf.dtype
        start = time.perf_counter()
        if rank == 0:
            for _ in range(iters):
                seq += 1
                send(pack(rank, TAG, seq), more)
                send(sbuf, copy=False)
                unpack(recv())
                np.copyto(rbuf, np.frombuffer(recv(copy=False), dtype=dtype))
        else:
            for _ in range(iters):
                unpack(recv())
                np.copyto(rbuf, np.frombuffer(recv(copy=False), dtype=dtype))
                seq += 1
                send(pack(rank, TAG, seq), more)
                send(sbuf, copy=False)
        self.seq = seq
        return time.perf_counter() - start


def _publish(path: str, text: str) -> None:
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def _await(path: str, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise RuntimeError(f"the peer never published {path}")
        time.sleep(0.01)
    with open(path) as f:
        return f.read()


def run_rank(
    rank: int, directory: str, plan: dict[str, Any], tcp: bool = False
) -> dict[str, list[float]]:
    """One rank's side of every row: warm-up, then timed trials (one-way seconds, rank 0)."""
    ep = Endpoint(rank, directory, tcp)
    try:
        ep.handshake()
        results: dict[str, list[float]] = {}
        for row in plan["rows"]:
            name, iters = row["name"], row["iters"]
            if row["kind"] == "pickle":
                loop = ep.pickle_loop
            else:
                sbuf, rbuf = make_buffers(rank, row["nbytes"])
                method = ep.large_loop if row["nbytes"] >= LARGE else ep.small_loop

                def loop(n: int, method: Any = method, sbuf: Any = sbuf, rbuf: Any = rbuf) -> float:
                    return method(n, sbuf, rbuf)

            loop(row["warmup"])
            if row["kind"] == "buffer":
                check_received(rbuf, 1 - rank, name)
            results[name] = [loop(iters) / iters / 2 for _ in range(plan["trials"])]
        return results
    finally:
        ep.close()


def launch(plan_text: str, timeout: float, tcp: bool = False) -> int:
    """Start both ranks, wait (at most ``timeout`` s), pass on rank 0's output.

    When a rank fails, the other is ended; the exit status is the failed rank's.
    """
    with tempfile.TemporaryDirectory(prefix="p2p-raw-") as directory:
        procs = []
        try:
            for rank in range(2):
                cmd = [sys.executable, os.path.abspath(__file__), "--impl", "raw"]
                cmd += ["--plan", plan_text, "--rank", str(rank), "--dir", directory]
                cmd += ["--tcp"] if tcp else []
                out = subprocess.PIPE if rank == 0 else subprocess.DEVNULL
                procs.append(subprocess.Popen(cmd, stdout=out, text=True))
            deadline = time.monotonic() + timeout
            while True:
                codes = [proc.poll() for proc in procs]
                failed = [code for code in codes if code not in (None, 0)]
                if failed:
                    return failed[0]
                if codes == [0, 0]:
                    break
                if time.monotonic() > deadline:
                    print(f"_raw_zmq.py: ranks did not finish in {timeout:g} s", file=sys.stderr)
                    return 124
                time.sleep(0.05)
            sys.stdout.write(procs[0].stdout.read())
            return 0
        finally:
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                proc.wait()
                if proc.stdout is not None:
                    proc.stdout.close()


def main(argv: list[str] | None = None) -> int:
    """Launcher (no ``--rank``) or one rank (``--rank R --dir D``)."""
    argv = sys.argv[1:] if argv is None else argv
    extra = argparse.ArgumentParser(add_help=False)
    extra.add_argument("--rank", type=int)
    extra.add_argument("--dir")
    extra.add_argument("--timeout", type=float, default=300.0)
    extra.add_argument("--tcp", action="store_true", help="tcp on 127.0.0.2/3 instead of ipc")
    ours, rest = extra.parse_known_args(argv)
    args = parse_args(rest, ("raw",))
    if ours.rank is None:
        return launch(args.plan, ours.timeout, ours.tcp)
    results = run_rank(ours.rank, ours.dir, json.loads(args.plan), ours.tcp)
    if ours.rank == 0:
        emit_result("raw", f"pyzmq {zmq.__version__} (libzmq {zmq.zmq_version()})", results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
