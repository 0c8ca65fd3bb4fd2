"""Hand-built trace records in the recorder's format, for testing the teaching views.

:class:`Recorder` collects records per world rank. Point-to-point messages are
added with :meth:`Recorder.p2p` (or one side only, with :meth:`Recorder.send` /
:meth:`Recorder.recv`). A collective is given as a *schedule* — each rank's
rounds, what it sends to and receives from whom, and its working state before
and after each round — and :meth:`Recorder.collective` times it like a run
would: a round starts when the rank's previous round ended, its sends go out
at once, a receive completes once its message arrived, and the round ends
when its receives are done. The schedules below follow the library's
algorithms (recursive doubling, binomial tree, dissemination) and compute the
states from the inputs, so tests check results against the inputs, not
against stored answers.
"""

from __future__ import annotations

import pickle
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

WORLD = "MPI_COMM_WORLD"
LATENCY = 4e-6  # from a send to the message's arrival
ROUND_GAP = 1e-6  # from the end of one round to the start of the next
T0 = 1000.0  # perf_counter values are large; views must show times relative to the start


@dataclass
class ScheduledRound:
    """One round of one rank: ``sends`` are (peer, data bytes), ``recvs`` (peer, nbytes)."""

    label: str
    sends: list[tuple[int, bytes]] = field(default_factory=list)
    recvs: list[tuple[int, int]] = field(default_factory=list)
    before: Any = None
    after: Any = None


class Recorder:
    """Records of every rank, built up message by message and collective by collective."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.records: dict[int, list[dict[str, Any]]] = {rank: [] for rank in range(size)}
        self._seq: dict[int, int] = defaultdict(int)

    def send(
        self,
        t: float,
        src: int,
        dst: int,
        nbytes: int,
        tag: int = 0,
        call: str = "Send",
        comm: str = WORLD,
        context: int = 0,
        coll: tuple[int, int] | None = None,
        round: int | None = None,
        data: bytes | None = None,
    ) -> dict[str, Any]:
        record = {
            "type": "send",
            "t": t,
            "rank": src,
            "peer": dst,
            "crank": src,
            "cpeer": dst,
            "comm": comm,
            "context": context,
            "tag": tag,
            "bytes": nbytes,
            "call": call,
            "coll": None if coll is None else list(coll),
            "round": round,
        }
        if data is not None:
            record["data"] = data
        self.records[src].append(record)
        return record

    def recv(
        self,
        t: float,
        dst: int,
        src: int,
        nbytes: int,
        tag: int = 0,
        call: str = "Recv",
        comm: str = WORLD,
        context: int = 0,
        coll: tuple[int, int] | None = None,
        round: int | None = None,
        data: bytes | None = None,
        arrived: float | None = None,
    ) -> dict[str, Any]:
        record = {
            "type": "recv",
            "t": t,
            "arrived": arrived,
            "rank": dst,
            "peer": src,
            "crank": dst,
            "cpeer": src,
            "comm": comm,
            "context": context,
            "tag": tag,
            "bytes": nbytes,
            "call": call,
            "coll": None if coll is None else list(coll),
            "round": round,
        }
        if data is not None:
            record["data"] = data
        self.records[dst].append(record)
        return record

    def p2p(
        self,
        t_send: float,
        t_recv: float,
        src: int,
        dst: int,
        nbytes: int,
        tag: int = 0,
        call: str = "Send",
        recv_call: str = "Recv",
        comm: str = WORLD,
        context: int = 0,
    ) -> None:
        """A point-to-point message traced on both sides."""
        self.send(t_send, src, dst, nbytes, tag, call, comm, context)
        self.recv(t_recv, dst, src, nbytes, tag, recv_call, comm, context, arrived=t_send)

    def truncate(self, rank: int, dropped: int) -> None:
        self.records[rank].append({"type": "truncated", "dropped": dropped})

    def collective(
        self,
        call: str,
        algorithm: str,
        schedule: dict[int, list[ScheduledRound]],
        start: float,
        root: int | None = None,
        comm: str = WORLD,
        context: int = 1,
        payloads: bool = True,
        skew: float = 0.0,
    ) -> tuple[int, int]:
        """Time and record one collective (``schedule``: world rank → its rounds).

        Ranks enter at ``start + rank * skew``. Returns the collective's (context, seq).
        """
        seq = self._seq[context]
        self._seq[context] += 1
        key = (context, seq)
        clock = {rank: start + rank * skew for rank in schedule}
        entered = dict(clock)
        position = dict.fromkeys(schedule, 0)
        sent: dict[tuple[int, int], list[tuple[float, bytes]]] = defaultdict(list)
        taken: dict[tuple[int, int], int] = defaultdict(int)
        issued: set[tuple[int, int]] = set()
        timed: dict[int, list[dict[str, Any]]] = {rank: [] for rank in schedule}
        message = {"comm": comm, "context": context, "tag": seq, "call": call, "coll": key}
        while any(position[rank] < len(rounds) for rank, rounds in schedule.items()):
            progressed = False
            for rank, rounds in schedule.items():
                if position[rank] >= len(rounds):
                    continue
                index = position[rank]
                rnd, begin = rounds[index], clock[rank]
                if (rank, index) not in issued:
                    issued.add((rank, index))
                    for i, (peer, data) in enumerate(rnd.sends):
                        t = begin + i * 1e-7
                        sent[(rank, peer)].append((t, data))
                        self.send(
                            t,
                            rank,
                            peer,
                            len(data),
                            round=index + 1,
                            data=data if payloads else None,
                            **message,
                        )
                        progressed = True
                needed: dict[int, int] = defaultdict(int)
                for peer, _ in rnd.recvs:
                    needed[peer] += 1
                if any(taken[(p, rank)] + n > len(sent[(p, rank)]) for p, n in needed.items()):
                    continue
                end = begin + 5e-7
                for peer, nbytes in rnd.recvs:
                    t_sent, data = sent[(peer, rank)][taken[(peer, rank)]]
                    taken[(peer, rank)] += 1
                    assert len(data) == nbytes, "a schedule's receive size differs from the send"
                    t = max(begin, t_sent + LATENCY) + 2e-7
                    end = max(end, t + 1e-7)
                    self.recv(
                        t,
                        rank,
                        peer,
                        nbytes,
                        round=index + 1,
                        arrived=t_sent + LATENCY,
                        data=data if payloads else None,
                        **message,
                    )
                entry = {
                    "index": index + 1,
                    "label": rnd.label,
                    "t0": begin,
                    "t1": end,
                    "sends": [[peer, len(data)] for peer, data in rnd.sends],
                    "recvs": [[peer, nbytes] for peer, nbytes in rnd.recvs],
                }
                if payloads:
                    entry["before"], entry["after"] = rnd.before, rnd.after
                timed[rank].append(entry)
                clock[rank] = end + ROUND_GAP
                position[rank] += 1
                progressed = True
            if not progressed:
                raise ValueError("the schedule deadlocks: a receive has no matching send")
        for rank in schedule:
            self.records[rank].append(
                {
                    "type": "coll",
                    "t0": entered[rank],
                    "t1": clock[rank],
                    "rank": rank,
                    "crank": rank,
                    "size": len(schedule),
                    "comm": comm,
                    "context": context,
                    "seq": seq,
                    "call": call,
                    "root": root,
                    "algorithm": algorithm,
                    "error": None,
                    "rounds": timed[rank],
                }
            )
        return key


# -- schedules following the library's algorithms ---------------------------------------------
def allreduce_recursive_doubling(values: dict[int, np.ndarray]) -> dict[int, list[ScheduledRound]]:
    """Allreduce SUM on a power-of-two number of ranks: exchange at distance 1, 2, 4 ..."""
    size = len(values)
    assert size & (size - 1) == 0, "this schedule is for powers of two"
    acc = {rank: np.array(value, copy=True) for rank, value in values.items()}
    schedule: dict[int, list[ScheduledRound]] = {rank: [] for rank in values}
    mask = 1
    while mask < size:
        new = {rank: acc[rank] + acc[rank ^ mask] for rank in values}
        for rank in values:
            partner = rank ^ mask
            schedule[rank].append(
                ScheduledRound(
                    f"exchange at distance {mask}",
                    sends=[(partner, acc[rank].tobytes())],
                    recvs=[(partner, acc[partner].nbytes)],
                    before=acc[rank].copy(),
                    after=new[rank].copy(),
                )
            )
        acc = new
        mask <<= 1
    return schedule


def allreduce_recursive_doubling_any(
    values: dict[int, np.ndarray],
) -> dict[int, list[ScheduledRound]]:
    """Allreduce SUM on any number of ranks: with p = 2^k + r, the first 2r ranks fold first."""
    size = len(values)
    pof2 = 1 << (size.bit_length() - 1)
    rem = size - pof2
    total = sum(values[rank] for rank in range(size))
    schedule: dict[int, list[ScheduledRound]] = {rank: [] for rank in range(size)}
    acc = {rank: np.array(values[rank], copy=True) for rank in range(size)}
    newrank = {}
    for rank in range(size):
        if rank < 2 * rem and rank % 2 == 0:
            schedule[rank].append(
                ScheduledRound(
                    "fold: send to odd neighbour",
                    sends=[(rank + 1, acc[rank].tobytes())],
                    before=acc[rank].copy(),
                    after=acc[rank].copy(),
                )
            )
        elif rank < 2 * rem:
            folded = acc[rank - 1] + acc[rank]
            schedule[rank].append(
                ScheduledRound(
                    "fold: receive from even neighbour",
                    recvs=[(rank - 1, acc[rank - 1].nbytes)],
                    before=acc[rank].copy(),
                    after=folded.copy(),
                )
            )
            acc[rank] = folded
            newrank[rank] = rank // 2
        else:
            newrank[rank] = rank - rem
    rank_of = {new: rank for rank, new in newrank.items()}
    mask = 1
    while mask < pof2:
        new_acc = {rank: acc[rank] + acc[rank_of[newrank[rank] ^ mask]] for rank in newrank}
        for rank in newrank:
            partner = rank_of[newrank[rank] ^ mask]
            schedule[rank].append(
                ScheduledRound(
                    f"exchange at distance {mask}",
                    sends=[(partner, acc[rank].tobytes())],
                    recvs=[(partner, acc[partner].nbytes)],
                    before=acc[rank].copy(),
                    after=new_acc[rank].copy(),
                )
            )
        acc.update(new_acc)
        mask <<= 1
    for rank in range(2 * rem):
        if rank % 2:
            schedule[rank].append(
                ScheduledRound(
                    "unfold: send result to even neighbour",
                    sends=[(rank - 1, total.tobytes())],
                    before=total.copy(),
                    after=total.copy(),
                )
            )
        else:
            schedule[rank].append(
                ScheduledRound(
                    "unfold: receive result",
                    recvs=[(rank + 1, total.nbytes)],
                    before=acc[rank].copy(),
                    after=total.copy(),
                )
            )
    return schedule


def _children(rel: int, size: int) -> list[int]:
    top = rel & -rel if rel else 1 << (size - 1).bit_length()
    mask, distances = top >> 1, []
    while mask > 0:
        if rel + mask < size:
            distances.append(mask)
        mask >>= 1
    return distances


def bcast_binomial(
    size: int, root: int, data: bytes, initial: bytes | None = None
) -> dict[int, list[ScheduledRound]]:
    """Binomial-tree broadcast of ``data``; non-roots start with ``initial`` (zeros)."""
    blank = bytes(len(data)) if initial is None else initial
    schedule: dict[int, list[ScheduledRound]] = {}
    for rank in range(size):
        rel = (rank - root) % size
        up = rel & -rel
        rounds = []
        if up:
            rounds.append(
                ScheduledRound(
                    "receive from parent",
                    recvs=[((rank - up) % size, len(data))],
                    before=blank,
                    after=data,
                )
            )
        children = [(rank + d) % size for d in _children(rel, size)]
        if children:
            rounds.append(
                ScheduledRound(
                    "send to children",
                    sends=[(child, data) for child in children],
                    before=data,
                    after=data,
                )
            )
        schedule[rank] = rounds
    return schedule


def barrier_dissemination(size: int) -> dict[int, list[ScheduledRound]]:
    """Round k: notify rank + 2^k, hear from rank - 2^k (no state)."""
    schedule: dict[int, list[ScheduledRound]] = {rank: [] for rank in range(size)}
    k = 1
    while k < size:
        for rank in range(size):
            schedule[rank].append(
                ScheduledRound(
                    f"dissemination distance {k}",
                    sends=[((rank + k) % size, b"")],
                    recvs=[((rank - k) % size, 0)],
                )
            )
        k <<= 1
    return schedule


def pickled(value: Any) -> bytes:
    return pickle.dumps(value, pickle.HIGHEST_PROTOCOL)


# -- ready-made traces -------------------------------------------------------------------------
def allreduce_trace(size: int = 4, start: float = T0) -> tuple[Recorder, dict[int, np.ndarray]]:
    """A traced ``comm.Allreduce(a, b)`` of float64 pairs; returns the recorder and inputs."""
    inputs = {rank: np.array([rank + 1.0, 10.0 * (rank + 1)]) for rank in range(size)}
    recorder = Recorder(size)
    recorder.collective(
        "Allreduce", "allreduce_recursive_doubling", allreduce_recursive_doubling(inputs), start
    )
    return recorder, inputs


def p2p_trace() -> Recorder:
    """Three ranks: a Send/Recv, an Isend/Irecv pair, and an Isend whose receive was not traced."""
    recorder = Recorder(3)
    recorder.p2p(T0 + 12.3e-6, T0 + 40.1e-6, 0, 1, 800, tag=7)
    recorder.p2p(T0 + 20e-6, T0 + 30e-6, 1, 2, 16, tag=3, call="Isend", recv_call="Irecv")
    recorder.send(T0 + 50e-6, 2, 0, 8, tag=5, call="Isend")
    return recorder
