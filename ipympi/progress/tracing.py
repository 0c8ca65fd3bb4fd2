"""Recording the messages of this rank: the data behind ``%%px --trace`` and ``%mpi explain``.

While tracing is on, the progress engine and the collective scheduler add one
plain dict per event to this rank's record list: every message sent or
received (point-to-point and inside collectives) and every collective call
with its algorithm and rounds. The records of all ranks, merged by the
controller, are drawn as a message diagram (``ipympi.teach``). Record format:

* ``{"type": "send", "t", "rank", "peer", "crank", "cpeer", "comm", "context",
  "tag", "bytes", "call", "coll", "round"}``: a message sent by this rank.
  ``rank``/``peer`` are COMM_WORLD ranks, ``crank``/``cpeer`` ranks in the
  communicator used (for intercommunicator collectives: ranks in the union of
  both groups). ``coll`` is ``[context, seq]`` of the collective the message
  belongs to (or None) and ``round`` its 1-based round (None when unknown).
  ``t`` is taken before the message leaves. A buffered send is recorded when
  its copy is handed to the engine; while tracing, blocking sends skip their
  fast path (which has no operation to record) and send the same frame through
  the general one. Calls on PROC_NULL and the library's own traffic without a
  communicator (the handshake of ``Finalize``) make no record.
* ``{"type": "recv", ..., "arrived"}``: a message delivered into a receive of
  this rank (when its data is in place: for a large message, once read or once
  its last chunk came), with the same fields (``peer`` the source, ``tag`` the
  actual tag) and the time its data or announcement reached this rank: ``t``
  itself when it was delivered as it arrived, earlier when it waited in the
  unexpected queue, None when it arrived before tracing began. The k-th send
  from s to d with some (context, tag) pairs with the k-th receive at d from s
  with that (context, tag).
* ``{"type": "coll", "t0", "t1", "rank", "crank", "size", "comm", "context",
  "seq", "call", "root", "algorithm", "error", "rounds"}``: one collective call;
  each round is ``{"index", "label", "t0", "t1", "sends": [[cpeer, nbytes]],
  "recvs": [[cpeer, nbytes]]}`` (an object receive's size is known once it
  came). A round without messages is a local step of the algorithm, such as
  ``"local: rotate into place"``. ``t1`` stays None for a call (or round) still
  running when tracing stopped.
* ``{"type": "file", "t0", "t1", "rank", "call", "file", "offset", "bytes",
  "segments"}``: one data access of ``MPI.File`` by this rank: the file's path, the
  first file byte it touched, the bytes it moved and the number of contiguous pieces.
* ``{"type": "rma", "t0", "t1", "rank", "target", "crank", "ctarget", "win",
  "window", "call", "op", "dir", "bytes", "disp"}``: one one-sided operation
  (``MPI.Win``) this rank started: ``rank`` is the origin and ``target`` the target
  (COMM_WORLD ranks; ``crank``/``ctarget`` ranks in the window), ``win`` the window's
  id (the same on every rank of the window), ``window`` its name, ``call`` ``Put``,
  ``Get``, ``Accumulate``, ... (``Rput``, ... for the request forms), ``op`` the
  combining operation's name (``"SUM"``; None for ``Put``/``Get``), ``dir`` where the
  data goes (``"put"``: to the target, ``"get"``: to the origin, ``"both"``: to the
  target and its old contents back), ``bytes`` the bytes moved each way and ``disp``
  the target displacement in the target's units.
* ``{"type": "rma_sync", "t0", "t1", "rank", "crank", "win", "window", "call",
  "peer", "group", "lock", "assertion", "done"}``: one synchronisation call of a
  window (``Fence``, ``Start``, ``Complete``, ``Post``, ``Wait``, ``Test``, ``Lock``,
  ``Unlock``, ``Lock_all``, ``Unlock_all``, ``Flush``, ``Flush_all``, ``Flush_local``,
  ``Flush_local_all``, ``Sync``): ``peer`` the target of ``Lock``/``Unlock``/``Flush``
  (COMM_WORLD rank, else None), ``group`` the COMM_WORLD ranks of ``Start``/``Post``,
  ``lock`` ``"exclusive"``/``"shared"`` for ``Lock``/``Lock_all``, ``assertion`` the
  ``MODE_*`` bits, ``done`` False for a ``Test`` that found the epoch still open.
  The messages and barriers these calls exchange on the window's private
  communicator are not recorded: a ``Fence`` is one span, not a Barrier.
* ``{"type": "truncated", "dropped": n}``: last, when more than ``limit``
  records were produced (the first ``limit`` are kept).

Times come from ``time.perf_counter()`` (CLOCK_MONOTONIC on Linux, comparable
between the processes of one host). With ``payloads`` a send or receive also
has ``"data"`` (a bytes copy of the message) and each round ``"before"`` and
``"after"``: snapshots of the algorithm's working state (``Round.state``) when
the round started and once the algorithm had processed its received data (for
the last round: when the algorithm returned, after the call's finishing step).
A snapshot copies a memoryview/bytes/bytearray to ``bytes``, a numpy array
with ``copy()``, a list or tuple item by item into a list, anything else by a
pickle round trip (an object that cannot be pickled becomes its ``repr``).

Tracing may start before ``MPI.Init``: the engine created by ``Init`` picks the
tracer up. Records are appended only while the engine's lock is held (by the
calling thread or the progress thread); ``start``, ``stop`` and ``records``
take that lock too. When tracing is off the engine holds ``tracer = None`` and
pays one ``is None`` test per send or delivery, and a window one test of
``current`` per operation or synchronisation call.
"""

from __future__ import annotations

import pickle
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..core.lazynumpy import np

__all__ = [
    "Tracer",
    "active",
    "attach",
    "file_access",
    "quiet",
    "recording",
    "records",
    "rma_op",
    "rma_sync",
    "snapshot",
    "start",
    "stop",
]

_now = time.perf_counter
# The point-to-point contexts of communicators whose traffic is not recorded: the
# private communicators of windows, whose calls are recorded as themselves (rma_sync).
quiet: set[int] = set()


def snapshot(value: Any) -> Any:
    """A copy of an algorithm's working state that later changes cannot touch."""
    if value is None:
        return None
    if isinstance(value, memoryview):
        return value.tobytes()
    if isinstance(value, bytes):
        return value
    if isinstance(value, bytearray):
        return bytes(value)
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, (list, tuple)):
        return [snapshot(item) for item in value]
    try:
        return pickle.loads(pickle.dumps(value, pickle.HIGHEST_PROTOCOL))
    except Exception:
        return repr(value)


def _nbytes(data: Any) -> int:
    return len(data) if isinstance(data, (bytes, bytearray)) else data.nbytes


def _comm_name(comm: Any) -> str:
    impl = getattr(comm, "_impl", None)
    return impl.label if impl is not None else ""


class Tracer:
    """The records of one tracing session on this rank.

    The engine calls :meth:`sent`, :meth:`arrived` and :meth:`received`; the
    collective scheduler :meth:`coll_started`, :meth:`round_started`,
    :meth:`round_done` and :meth:`coll_ended`. All of them run with the
    engine's lock held.
    """

    def __init__(self, payloads: bool, limit: int) -> None:
        self.payloads = payloads
        self.limit = limit
        self.on = True
        self.dropped = 0
        self.items: list[dict[str, Any]] = []
        # id(envelope) -> (envelope, arrival time) of messages queued unexpected
        self.arrivals: dict[int, tuple[Any, float]] = {}
        # (context, seq) -> record of each collective in progress: a message of
        # it belongs to its current round (a collective starts a round's
        # messages when the round begins and moves on once they all completed)
        self.colls: dict[tuple[int, int], dict[str, Any]] = {}

    def _add(self, record: dict[str, Any]) -> None:
        if len(self.items) < self.limit:
            self.items.append(record)
        else:
            self.dropped += 1

    def finish(self) -> list[dict[str, Any]]:
        """Stop recording; the records, with a truncation note when some were dropped."""
        self.on = False
        self.arrivals.clear()
        self.colls.clear()
        out = list(self.items)
        if self.dropped:
            out.append({"type": "truncated", "dropped": self.dropped})
        return out

    # -- messages ------------------------------------------------------------------
    def _message(
        self,
        kind: str,
        engine: Any,
        comm: Any,
        call: str,
        peer: int,
        crank: int,
        cpeer: int,
        context: int,
        tag: int,
        nbytes: int,
    ) -> dict[str, Any]:
        coll = None
        round_index = None
        if context & 1:  # a collective context; the tag is the call's sequence number
            coll = [context, tag]
            record = self.colls.get((context, tag))
            if record is not None:
                round_index = len(record["rounds"]) or None
                crank = record["crank"]
        return {
            "type": kind,
            "t": _now(),
            "rank": engine.rank,
            "peer": peer,
            "crank": crank,
            "cpeer": cpeer,
            "comm": _comm_name(comm),
            "context": context,
            "tag": tag,
            "bytes": nbytes,
            "call": call,
            "coll": coll,
            "round": round_index,
        }

    def sent(
        self, engine: Any, op: Any, mem: Any, wdest: int, context: int, source: int, tag: int
    ) -> None:
        """``op`` hands ``mem`` to the engine for world rank ``wdest``."""
        if not self.on or op.comm is None or (context & ~1) in quiet:
            return  # no communicator: the library's own traffic
        record = self._message(
            "send", engine, op.comm, op.call, wdest, source, op.peer, context, tag, _nbytes(mem)
        )
        if self.payloads:
            record["data"] = bytes(mem)
        self._add(record)

    def arrived(self, env: Any) -> None:
        """A message (or its announcement) reached this rank before a receive matched it."""
        if self.on:
            self.arrivals[id(env)] = (env, _now())

    def received(
        self, engine: Any, op: Any, env: Any, wsource: int, context: int, tag: int, nbytes: int
    ) -> None:
        """A message from world rank ``wsource`` was delivered into the receive ``op``.

        ``env`` is its envelope when it waited in a queue (its arrival was
        noted by :meth:`arrived`), None when it was delivered as it arrived.
        """
        if not self.on or op.comm is None:
            return
        noted = None if env is None else self.arrivals.pop(id(env), None)
        if (context & ~1) in quiet:
            return
        arrived = noted[1] if noted is not None else None
        impl = getattr(op.comm, "_impl", None)
        crank = impl.rank if impl is not None else -1
        record = self._message(
            "recv", engine, op.comm, op.call, wsource, crank, op.source, context, tag, nbytes
        )
        record["arrived"] = record["t"] if env is None else arrived
        if self.payloads:
            if op.mem is not None:
                record["data"] = op.mem[: op.count].tobytes()
            else:
                record["data"] = bytes(op.data) if op.data is not None else b""
        self._add(record)

    # -- collectives ----------------------------------------------------------------
    def coll_started(self, coll: Any, root: int | None) -> dict[str, Any] | None:
        """A collective call starts: its record (None when not recording)."""
        if not self.on or (coll.context & ~1) in quiet:
            return None
        record = {
            "type": "coll",
            "t0": _now(),
            "t1": None,
            "rank": coll.engine.rank,
            "crank": coll.rank,
            "size": len(coll.world_ranks),
            "comm": coll._name(),
            "context": coll.context,
            "seq": coll.seq,
            "call": coll.call,
            "root": root,
            "algorithm": getattr(coll.algorithm, "__name__", type(coll.algorithm).__name__),
            "error": None,
            "rounds": [],
        }
        self._add(record)
        self.colls[(coll.context, coll.seq)] = record
        return record

    def round_started(self, record: dict[str, Any], rnd: Any, previous: Any) -> None:
        """The algorithm yielded ``rnd``: ``previous`` (its last round) is processed."""
        rounds = record["rounds"]
        if not self.on:
            return
        if self.payloads and previous is not None and rounds:
            rounds[-1]["after"] = snapshot(previous.state)
        entry: dict[str, Any] = {
            "index": len(rounds) + 1,
            "label": rnd.label,
            "t0": _now(),
            "t1": None,
            "sends": [[peer, _nbytes(data)] for peer, data in rnd.sends],
            "recvs": [
                [peer, target.nbytes if target is not None else None] for peer, target in rnd.recvs
            ],
        }
        if self.payloads:
            entry["before"] = snapshot(rnd.state)
        rounds.append(entry)

    def round_done(self, record: dict[str, Any], recv_ops: list[Any]) -> None:
        """The messages of the current round have all completed."""
        rounds = record["rounds"]
        if not self.on or not rounds:
            return
        entry = rounds[-1]
        if entry["t1"] is None:
            entry["t1"] = _now()
            for pair, op in zip(entry["recvs"], recv_ops):
                if pair[1] is None:
                    pair[1] = op.count

    def coll_ended(self, record: dict[str, Any], last: Any, error: str | None) -> None:
        """The call finished (``error`` None) or failed; ``last`` is its last Round."""
        if not self.on:
            return
        self.colls.pop((record["context"], record["seq"]), None)
        record["t1"] = _now()
        record["error"] = error
        if self.payloads and error is None and last is not None and record["rounds"]:
            record["rounds"][-1]["after"] = snapshot(last.state)


# -- the tracer of this process and the engine it feeds ------------------------------------
current: Tracer | None = None  # the tracer of this process; None when tracing is off
_engine_ref: Any = None  # weak reference to the engine of this process


def attach(engine: Any) -> Tracer | None:
    """Called by a new engine: remember it; the tracer it must feed (None when off)."""
    global _engine_ref
    _engine_ref = weakref.ref(engine)
    return current


def _engine() -> Any:
    return _engine_ref() if _engine_ref is not None else None


def _swap(tracer: Tracer | None) -> Tracer | None:
    """Make ``tracer`` the current one (on the engine too); return the previous one,
    which stops recording."""
    global current
    engine = _engine()
    live = engine is not None and not engine.finalized
    if live:
        engine.enter()  # takes the engine from the progress thread if it drives
    try:
        previous, current = current, tracer
        if engine is not None:
            engine.set_tracer(tracer)
        if previous is not None:
            previous.on = False
        return previous
    finally:
        if live:
            engine.leave()


def start(payloads: bool = False, limit: int = 100_000) -> None:
    """Clear this rank's records and begin recording.

    With ``payloads`` each message keeps a copy of its data and each collective
    round snapshots of the algorithm's state. At most ``limit`` records are
    kept (see :func:`stop`). Works before ``MPI.Init`` too. Calling it while
    recording starts over.
    """
    if not isinstance(payloads, bool):
        raise TypeError(f"payloads must be True or False, not {payloads!r}")
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit must be a positive number of records, not {limit!r}")
    _swap(Tracer(payloads, limit))


def stop() -> list[dict[str, Any]]:
    """Stop recording; this rank's records, oldest first ([] when not recording).

    If more than ``limit`` records were produced, the first ``limit`` are kept
    and a last record ``{"type": "truncated", "dropped": n}`` is added.
    """
    previous = _swap(None)
    return previous.finish() if previous is not None else []


def file_access(rank: int, call: str, path: str, offset: int, nbytes: int, segments: int,
                t0: float) -> None:  # fmt: skip
    """Record a file data access of this rank that started at ``t0`` and ends now."""
    tracer = current
    if tracer is None or not tracer.on:
        return
    record = {"type": "file", "t0": t0, "t1": _now(), "rank": rank, "call": call,
              "file": path, "offset": offset, "bytes": nbytes, "segments": segments}  # fmt: skip
    _add_now(tracer, record)


def _add_now(tracer: Tracer, record: dict[str, Any]) -> None:
    """Add ``record`` holding the engine's lock (calls outside the engine record this way)."""
    engine = _engine()
    live = engine is not None and not engine.finalized
    if live:
        engine.enter()
    try:
        tracer._add(record)
    finally:
        if live:
            engine.leave()


def rma_op(record: dict[str, Any], t0: float) -> None:
    """Record a one-sided operation that started at ``t0`` and ends now (see the
    module docstring for ``record``'s fields; ``type``, ``t0`` and ``t1`` are added)."""
    tracer = current
    if tracer is None or not tracer.on:
        return
    _add_now(tracer, {"type": "rma", "t0": t0, "t1": _now(), **record})


def rma_sync(record: dict[str, Any], t0: float) -> None:
    """Record a window's synchronisation call that started at ``t0`` and ends now."""
    tracer = current
    if tracer is None or not tracer.on:
        return
    _add_now(tracer, {"type": "rma_sync", "t0": t0, "t1": _now(), **record})


def active() -> bool:
    """Whether this rank is recording."""
    return current is not None


def records() -> list[dict[str, Any]]:
    """A copy of the records so far, while recording."""
    tracer = current
    if tracer is None:
        raise RuntimeError("not recording: call ipympi.progress.tracing.start() first")
    engine = _engine()
    if engine is None or engine.finalized:
        return list(tracer.items)
    engine.enter()
    try:
        return list(tracer.items)
    finally:
        engine.leave()


@contextmanager
def recording(payloads: bool = False, limit: int = 100_000) -> Iterator[list[dict[str, Any]]]:
    """Record the block's messages: ``with recording() as recs: ...``; ``recs`` is
    filled when the block ends (also when it raises)."""
    result: list[dict[str, Any]] = []
    start(payloads, limit)
    try:
        yield result
    finally:
        result.extend(stop())
