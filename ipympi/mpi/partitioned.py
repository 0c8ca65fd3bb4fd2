"""Partitioned communication (MPI 4, chapter 5): ``Psend_init``/``Precv_init`` and the
``Pready*``/``Parrived`` methods of their requests.

A partitioned send is a persistent request whose buffer is cut into ``partitions``
equal parts. After each ``Start`` the program marks parts ready (``Pready``,
``Pready_range``, ``Pready_list``) and each one leaves at once, as its own message;
the send completes when every part has been readied and has left. A partitioned
receive takes the parts as they come and copies each into its place, so
``Parrived`` reports a receive-side partition as soon as the sender's parts that
cover it are in, before the whole message is.

The wire. The parts travel on the communicator's internal context
(``INTERNAL | context``) with the negative tag ``-1 - tag``, which no other
traffic uses, so they never meet the program's messages or a constructor's. Each
message starts with a header (:data:`HEADER`: the pairing number, the sender's
partition count, the part's index). The two sides may cut the buffer differently
(their total sizes must match): the receiver learns the sender's count from the
first part and maps each sender part onto its own partitions by position.

Pairing. Partitioned operations match in the order of their initialization calls
(MPI 4.1 §5.2.1): the n-th ``Psend_init`` to (dest, tag) on a communicator pairs
with the n-th ``Precv_init`` from (source, tag), and their parts carry that n. Parts
taken off the matching queue for another pairing number wait in a per-rank mailbox
until their own receive takes them; the parts of a pairing arrive in order, so the
first ``p`` of them belong to the current round and the rest to later ones.

The operations register with the engine's in-progress list (``engine.colls``),
whose ``advance`` runs after every frame, so a blocking ``Wait`` on a receive
progresses part by part; ``Parrived`` and ``Test`` progress too.
"""

from __future__ import annotations

import struct
import weakref
from collections import deque
from typing import Any

from ..core import contexts as ctx
from ..core.constants import PROC_NULL
from ..core.errors import ERR_ARG, ERR_REQUEST, ERR_TRUNCATE
from ..core.errors import Exception as MPIException
from ..progress.operation import RECV, SEND, Operation

__all__ = [
    "HEADER",
    "PartRecv",
    "PartSend",
    "PartStart",
    "PartitionedMethods",
    "covering",
    "partition_size",
    "wire_tag",
]

HEADER = struct.Struct("<QII")  # pairing number, sender's partition count, part index


def wire_tag(tag: int) -> int:
    """The tag the parts of a partitioned operation with ``tag`` travel with."""
    return -1 - tag


def partition_size(count: int, partitions: int, call: str) -> int:
    """The elements of one partition of a buffer of ``count`` elements cut into
    ``partitions``."""
    if partitions < 1:
        raise MPIException(ERR_ARG, f"{call}: partitions must be at least 1, got {partitions}")
    if count % partitions:
        raise ValueError(
            f"{call}: the buffer ({count} elements) does not divide into {partitions} partitions"
        )
    return count // partitions


def covering(receiver: int, partitions: int, senders: int) -> range:
    """The sender parts (of ``senders``) overlapping receive partition ``receiver`` (of
    ``partitions``): each side's parts are equal slices of the same message."""
    first = receiver * senders // partitions
    last = -(-(receiver + 1) * senders // partitions)  # ceiling
    return range(first, max(last, first + 1))


class _Mailbox:
    """A rank's parts taken off the matching queue, by pairing, until their receive
    takes them."""

    __slots__ = ("incoming", "parts")

    def __init__(self) -> None:
        # (context, source, wire tag) -> received parts in arrival order, not sorted yet
        self.incoming: dict[tuple[int, int, int], deque[Operation]] = {}
        # (context, source, wire tag, pairing) -> parts of that pairing, in order
        self.parts: dict[tuple[int, int, int, int], deque[Operation]] = {}


_mailboxes: weakref.WeakKeyDictionary[Any, _Mailbox] = weakref.WeakKeyDictionary()
# A communicator's counts of partitioned initializations, per (side, peer, tag): kept
# with its state, so a new communicator that reuses a freed one's context starts at 0.
_counts: weakref.WeakKeyDictionary[Any, dict[tuple[int, int, int], int]] = (
    weakref.WeakKeyDictionary()
)


def _mailbox(engine: Any) -> _Mailbox:
    box = _mailboxes.get(engine)
    if box is None:
        box = _mailboxes[engine] = _Mailbox()
    return box


def next_number(impl: Any, kind: int, peer: int, tag: int) -> int:
    """The pairing number of a new partitioned operation of ``kind`` (SEND or RECV)
    with ``peer`` and ``tag`` on the communicator ``impl``: its rank among the
    initializations of the same kind, peer and tag there."""
    counts = _counts.get(impl)
    if counts is None:
        counts = _counts[impl] = {}
    key = (kind, peer, tag)
    number = counts.get(key, 0)
    counts[key] = number + 1
    return number


class PartStart:
    """How a partitioned request starts (the ``start`` of its persistent request), and
    what ``Pready``/``Parrived`` need to know about it between starts."""

    __slots__ = ("comm", "kind", "make", "partitions")

    def __init__(self, comm: Any, kind: int, partitions: int, make: Any) -> None:
        self.comm = comm
        self.kind = kind  # SEND or RECV
        self.partitions = partitions
        self.make = make

    def __call__(self) -> Operation:
        op: Operation = self.make()
        return op


class PartSend(Operation):
    """One activation of a partitioned send: done once every part was readied and left."""

    trace = None

    def __init__(
        self,
        comm: Any,
        impl: Any,
        mem: memoryview,
        partitions: int,
        dest: int,
        tag: int,
        number: int,
    ) -> None:
        super().__init__(SEND, comm, "Psend_init", dest, tag)
        self.engine = impl.engine
        self.context = ctx.internal_context(impl.context)
        self.wdest = impl.remote_world_ranks[dest] if dest != PROC_NULL else PROC_NULL
        self.me = impl.rank
        self.size = mem.nbytes // partitions
        self.buf = mem
        self.partitions = partitions
        self.number = number
        self.ready = [False] * partitions
        self.left = partitions  # parts not readied yet
        self.sending: list[Operation] = []  # parts that have not left yet

    def pready(self, partition: int) -> None:
        """Send part ``partition`` now (caller holds the engine)."""
        if self.ready[partition]:
            raise MPIException(
                ERR_ARG, f"Pready: partition {partition} is already marked ready in this round"
            )
        self.ready[partition] = True
        self.left -= 1
        if self.wdest != PROC_NULL:
            size = self.size
            body = self.buf[partition * size : (partition + 1) * size]
            data = HEADER.pack(self.number, self.partitions, partition) + body
            op = Operation(SEND, self.comm, "Pready", self.peer, self.tag)
            self.engine.start_send(
                op, data, self.wdest, self.context, self.me, wire_tag(self.tag), False
            )
            if not op.done:
                self.sending.append(op)
        self.advance()
        if self.engine.colls:
            self.engine.advance_collectives()  # a receive on this rank may take the part

    def advance(self) -> None:
        if self.done:
            return
        self.sending = [op for op in self.sending if not op.done]
        if self.left == 0 and not self.sending:
            self.complete()
            if self in self.engine.colls:
                self.engine.colls.remove(self)


class PartRecv(Operation):
    """One activation of a partitioned receive: takes parts as they come."""

    trace = None

    def __init__(
        self, comm: Any, impl: Any, spec: Any, partitions: int, source: int, tag: int, number: int
    ) -> None:
        super().__init__(RECV, comm, "Precv_init", source, tag)
        self.engine = impl.engine
        self.context = ctx.internal_context(impl.context)
        self.buf: memoryview = spec.mem
        self.unpack = spec.unpack
        self.partitions = partitions
        self.number = number
        self.key = (self.context, source, wire_tag(tag))
        self.senders = 0  # the sender's partition count, once its first part came
        self.arrived: list[bool] = []
        self.missing = -1  # sender parts still to come (-1: not known yet)

    def take_parts(self) -> None:
        """Move this rank's parts of the key from the matching queue to the mailbox,
        and copy in the parts of this receive that have arrived."""
        engine, key = self.engine, self.key
        table = _mailbox(engine)
        incoming = table.incoming.setdefault(key, deque())
        while (env := engine.matcher.take(*key)) is not None:
            part = Operation(RECV, None, "Precv_init", key[1], key[2])
            engine.receive_matched(env, part)
            incoming.append(part)
        while incoming and incoming[0].done:
            part = incoming.popleft()
            number = HEADER.unpack_from(part.data)[0]
            table.parts.setdefault((*key, number), deque()).append(part)
        box = table.parts.get((*key, self.number))
        while box and self.missing != 0:
            self._place(box.popleft())
        if box is not None and not box:
            del table.parts[(*key, self.number)]

    def _place(self, part: Operation) -> None:
        _, senders, index = HEADER.unpack_from(part.data)
        body = memoryview(part.data)[HEADER.size :]
        if self.missing < 0:
            self.senders, self.missing = senders, senders
            self.arrived = [False] * senders
            total = body.nbytes * senders
            if total != self.buf.nbytes:
                self.error = ERR_TRUNCATE
                self.error_detail = (
                    f"the partitioned send has {total} bytes ({senders} partitions), "
                    f"the receive buffer {self.buf.nbytes} (the sizes must match)"
                )
        self.missing -= 1
        if not self.error:
            offset = index * body.nbytes
            self.buf[offset : offset + body.nbytes] = body
        self.arrived[index] = True

    def parrived(self, partition: int) -> bool:
        if self.missing < 0:
            return False
        return all(self.arrived[i] for i in covering(partition, self.partitions, self.senders))

    def advance(self) -> None:
        if self.done:
            return
        self.take_parts()
        if self.missing == 0:
            self.source = self.peer
            self.count = 0 if self.error else self.buf.nbytes
            self.complete()
            if self in self.engine.colls:
                self.engine.colls.remove(self)


def activate(op: PartSend | PartRecv) -> PartSend | PartRecv:
    """Register a new activation with the engine (caller holds it) and take what is
    already there."""
    if op.peer == PROC_NULL:
        if isinstance(op, PartRecv):
            op.complete_empty()
        else:
            op.wdest = PROC_NULL
        return op
    op.engine.colls.append(op)
    op.advance()
    return op


def _check_partition(start: PartStart, partition: Any, call: str) -> int:
    try:
        value = int(partition)
    except (TypeError, ValueError):
        raise TypeError(f"{call}: a partition is an int, not {partition!r}") from None
    if not 0 <= value < start.partitions:
        raise MPIException(
            ERR_ARG,
            f"{call}: partition {value} is out of range (the request has "
            f"{start.partitions} partitions, numbered 0 to {start.partitions - 1})",
        )
    return value


class PartitionedMethods:
    """The partitioned-communication methods of ``MPI.Prequest``."""

    __slots__ = ()

    def _part(self, call: str, kind: int) -> tuple[PartStart, Any]:
        """The request's :class:`PartStart` and current operation, checked for ``call``."""
        persist = self._persist  # type: ignore[attr-defined]
        start = getattr(persist, "start", None)
        if not isinstance(start, PartStart) or start.kind != kind:
            side = "send" if kind == SEND else "receive"
            raise MPIException(ERR_REQUEST, f"{call}: the request is not a partitioned {side}")
        return start, persist.op

    def _raise_in(self, start: PartStart | None, exc: MPIException, call: str) -> Any:
        if start is not None:
            start.comm._raise(exc, call)
        raise exc

    def _pready(self, call: str, partitions: Any) -> None:
        start: PartStart | None = None
        try:
            start, op = self._part(call, SEND)
            if op is None or op.done:
                raise MPIException(ERR_REQUEST, f"{call}: the request is not active (Start it)")
            checked = [_check_partition(start, p, call) for p in partitions]
            engine = op.engine
            engine.enter()
            try:
                for p in checked:
                    op.pready(p)
            finally:
                engine.leave()
        except MPIException as exc:
            self._raise_in(start, exc, call)

    def Pready(self, partition: int) -> None:
        """Mark ``partition`` of an active partitioned send ready: it leaves now."""
        self._pready("Pready", [partition])

    def Pready_range(self, partition_low: int, partition_high: int) -> None:
        """``Pready`` for partitions ``partition_low`` to ``partition_high`` (inclusive)."""
        self._pready("Pready_range", range(int(partition_low), int(partition_high) + 1))

    def Pready_list(self, partitions: Any) -> None:
        """``Pready`` for each partition in ``partitions``."""
        self._pready("Pready_list", list(partitions))

    def Parrived(self, partition: int) -> bool:
        """Whether ``partition`` of a partitioned receive has arrived (``True`` for an
        inactive request); the request stays active."""
        start: PartStart | None = None
        try:
            if self._persist is None:  # type: ignore[attr-defined]
                return True
            start, op = self._part("Parrived", RECV)
            value = _check_partition(start, partition, "Parrived")
            if op is None:
                return True
            if op.done:
                return not op.error
            engine = op.engine
            engine.enter()
            try:
                engine.poll_once(False)
                op.advance()
                return bool(op.done or op.parrived(value))
            finally:
                engine.leave()
        except MPIException as exc:
            return bool(self._raise_in(start, exc, "Parrived"))
