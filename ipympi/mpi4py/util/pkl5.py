"""``mpi4py.util.pkl5``: object communication with pickle protocol 5 and out-of-band buffers.

The lower-case methods of ``MPI.Comm`` pickle an object into one stream and send it as one
message. The communicator classes here pickle with protocol 5 instead, keeping every
buffer of at least ``pickle.THRESHOLD`` bytes (a numpy array's memory, say) *out of band*:
the buffer is sent as a message of its own, straight from the object's memory, and
received into memory that the rebuilt object then uses. Large arrays are thus neither
copied into a pickle stream nor out of one; the price is one message per buffer.

How a transfer looks on the wire: a *head* message on the communicator itself, with the
caller's destination and tag, holding the number and sizes of the buffers followed by the
pickle stream; then each buffer, to the same destination with the same tag. A receive
matches the head with a matched probe (``Mprobe``), reads it, and at once matches the
buffer messages that follow from the same source with the same tag (MPI keeps messages
between two processes in order), all under a per-communicator lock: no other pkl5
receive can take a buffer of another message. Programs should therefore receive pkl5
messages with pkl5 calls only. Messages larger than ``_bigmpi.blocksize`` bytes are
described to MPI as a few large blocks (see :class:`_BigMPI`), as MPI libraries with
32-bit counts need.

Collectives (``bcast``, ``gather``, ``scatter``, ``allgather``, ``alltoall``) first
agree on the size of each head with the matching buffer collective (which also checks
the root), then move heads and buffers on a private duplicate of the communicator (see
"Collectives" below).
"""

from __future__ import annotations

import struct
import sys
import threading
from array import array
from collections.abc import Sequence
from typing import Any, Callable, cast

from ... import MPI
from ._pkl5_request import Matched, Request, Transfer, copy_status
from ._pkl5_request import Message as _Message

__all__ = ["Comm", "Intercomm", "Intracomm", "Message", "Pickle", "Request", "pickle"]

Pickle = MPI.Pickle  # with dumps_oob, loads_oob and THRESHOLD, as mpi4py's

pickle = Pickle()
"""The serializer of pkl5's communicators (replace it to change how they pickle)."""


class _BigMPI:
    """Support for large message counts: a buffer as ``[buffer, count, datatype]``.

    A buffer of at most ``blocksize`` bytes is ``count`` bytes; a larger one is one item
    of a datatype made of blocks of ``blocksize`` bytes and the remaining bytes, so that
    no count exceeds ``blocksize`` (``2**31 - 1`` for MPI libraries with C ``int``
    counts; ipympi has no such limit, so the default is ``sys.maxsize``). The datatypes
    are cached by size and freed when the object is used as a context manager and left.
    """

    blocksize = sys.maxsize
    _CACHE_LIMIT = 64

    def __init__(self) -> None:
        self.cache: dict[tuple[int, int], MPI.Datatype] = {}

    def __enter__(self) -> _BigMPI:
        return self

    def __exit__(self, *exc: object) -> None:
        for datatype in self.cache.values():
            datatype.Free()
        self.cache.clear()

    def __call__(self, buf: Any) -> list[Any]:
        nbytes = memoryview(buf).nbytes
        blocksize = self.blocksize
        if nbytes <= blocksize:
            return [buf, nbytes, MPI.BYTE]
        key = (blocksize, nbytes)
        datatype = self.cache.get(key)
        if datatype is None:
            if len(self.cache) >= self._CACHE_LIMIT:
                self.__exit__()
            blocks, rest = divmod(nbytes, blocksize)
            block = MPI.BYTE.Create_contiguous(blocksize)
            datatype = MPI.Datatype.Create_struct(
                [blocks, rest], [0, blocks * blocksize], [block, MPI.BYTE]
            ).Commit()
            block.Free()
            self.cache[key] = datatype
        return [buf, 1, datatype]


_bigmpi = _BigMPI()


# -- the head of a transfer -----------------------------------------------------------------


def encode(obj: Any) -> tuple[bytearray, list[MPI.buffer]]:
    """Pickle ``obj``: the head (buffer count, buffer sizes, pickle stream) and buffers."""
    data, buffers = pickle.dumps_oob(obj)
    sizes = [memoryview(buffer).nbytes for buffer in buffers]
    head = bytearray(struct.pack(f"<{len(sizes) + 1}q", len(sizes), *sizes))
    head += data
    return head, buffers


def head_sizes(head: Any) -> tuple[list[int], memoryview]:
    """The buffer sizes a head announces, and its pickle stream."""
    view = memoryview(head).cast("B")
    (count,) = struct.unpack_from("<q", view)
    sizes = list(struct.unpack_from(f"<{count}q", view, 8))
    return sizes, view[8 * (count + 1) :]


def allocate(sizes: Sequence[int]) -> list[MPI.buffer]:
    """Memory to receive buffers of the given sizes into."""
    return [MPI.buffer.allocate(size) for size in sizes]


def decode(data: Any, buffers: Sequence[Any]) -> Any:
    """Rebuild an object from its pickle stream and received buffers."""
    return pickle.loads_oob(data, buffers)


# -- per-communicator state -------------------------------------------------------------------


class _State:
    """What pkl5 keeps with a communicator (as an MPI attribute, so every handle of the
    communicator sees it): the locks that keep the messages of one transfer together,
    and the private duplicate the collectives communicate on."""

    __slots__ = ("private", "recv_lock", "send_lock")

    def __init__(self) -> None:
        self.send_lock = threading.Lock()
        self.recv_lock = threading.Lock()
        self.private: MPI.Comm | None = None


def _delete_state(comm: MPI.Comm, keyval: int, state: _State) -> None:
    private, state.private = state.private, None
    if private is not None and not MPI.Is_finalized():
        private.Free()


_keyval_lock = threading.Lock()
_keyval: list[int] = []


def state_of(comm: MPI.Comm) -> _State:
    """The pkl5 state of ``comm``, made on first use."""
    with _keyval_lock:
        if not _keyval:
            _keyval.append(MPI.Comm.Create_keyval(delete_fn=_delete_state))
        keyval = _keyval[0]
        state = comm.Get_attr(keyval)
        if state is None:
            state = _State()
            comm.Set_attr(keyval, state)
    return state


# -- point to point ---------------------------------------------------------------------------

_Post = Callable[..., MPI.Request]


def _post(comm: MPI.Comm, post: _Post, obj: Any, dest: int, tag: int) -> Transfer:
    """Start sending ``obj``: the head, then each out-of-band buffer, as ``post`` sends."""
    if dest == MPI.PROC_NULL:
        return Transfer([post(comm, [b"", 0, MPI.BYTE], dest, tag)])
    head, buffers = encode(obj)
    with state_of(comm).send_lock:  # one transfer's messages stay together
        requests = [post(comm, _bigmpi(head), dest, tag)]
        requests += [post(comm, _bigmpi(buffer), dest, tag) for buffer in buffers]
    return Transfer(requests, payload=(head, buffers))


def _match(comm: MPI.Comm, head_message: MPI.Message, status: MPI.Status) -> Matched:
    """Receive a matched head and match its buffer messages (under the receive lock)."""
    head = bytearray(status.Get_count(MPI.BYTE))
    head_message.Recv(_bigmpi(head))
    sizes, data = head_sizes(head)
    source, tag = status.Get_source(), status.Get_tag()
    parts = [comm.Mprobe(source, tag) for _ in sizes]

    def receive(target: MPI.Status | None) -> Any:
        buffers = allocate(sizes)
        for part, buffer in zip(parts, buffers):
            part.Recv(_bigmpi(buffer))
        copy_status(status, target)
        return decode(data, buffers)

    def ireceive() -> Transfer:
        buffers = allocate(sizes)
        requests = [part.Irecv(_bigmpi(buffer)) for part, buffer in zip(parts, buffers)]
        return Transfer(requests, lambda: decode(data, buffers), status)

    return Matched(receive, ireceive)


def mprobe(
    comm: MPI.Comm,
    source: int = MPI.ANY_SOURCE,
    tag: int = MPI.ANY_TAG,
    status: MPI.Status | None = None,
) -> Message:
    """Wait for a pkl5 message on ``comm`` and match it (head and buffers)."""
    found = MPI.Status()
    with state_of(comm).recv_lock:
        head_message = comm.Mprobe(source, tag, found)
        matched = None if head_message == MPI.MESSAGE_NO_PROC else _match(comm, head_message, found)
    copy_status(found, status)
    return Message(head_message if matched is None else matched)


def improbe(
    comm: MPI.Comm,
    source: int = MPI.ANY_SOURCE,
    tag: int = MPI.ANY_TAG,
    status: MPI.Status | None = None,
) -> Message | None:
    """Match a pkl5 message on ``comm`` if one has arrived; None otherwise."""
    found = MPI.Status()
    with state_of(comm).recv_lock:
        head_message = comm.Improbe(source, tag, found)
        if head_message is None:
            return None
        matched = None if head_message == MPI.MESSAGE_NO_PROC else _match(comm, head_message, found)
    copy_status(found, status)
    return Message(head_message if matched is None else matched)


# -- Collectives ------------------------------------------------------------------------
# Each collective runs in three steps:
#
# 1. Every object to send is pickled into a head and its out-of-band buffers
#    (:func:`encode`).
# 2. The lengths of the heads travel with the buffer collective of the same shape
#    (``Bcast``, ``Gather``, ``Scatter``, ``Allgather``, ``Alltoall`` of one 64-bit integer
#    per process). That collective checks the root and follows the intercommunicator rules
#    (``MPI.ROOT``, ``MPI.PROC_NULL``) for us, so pkl5's collectives raise what the buffer
#    collectives raise.
# 3. Heads and buffers move: ``bcast`` on an intracommunicator broadcasts them (``Bcast``
#    of the head, then of each buffer; every process learns the buffer sizes from the
#    head); the other collectives, and ``bcast`` on an intercommunicator (where the
#    processes of the root's group learn nothing from a broadcast, so could not take part
#    in one per buffer), send them point to point on a private duplicate of the
#    communicator, made the first time and freed with the communicator, so that they never
#    meet the program's own messages. Every receiver knows the length of each head it gets,
#    so it posts the receives of all heads at once, then those of the buffers.
#
# An intracommunicator member's own contribution is not sent: it is rebuilt from a copy of
# its buffers, as a received object would be.

_TAG = 0  # the private communicator carries nothing but collective traffic


def _lengths(values: Sequence[int]) -> list[Any]:
    return [array("q", values), MPI.INT64_T]


def _own_copy(head: Any, buffers: Sequence[Any]) -> Any:
    """The object a process contributes to itself: rebuilt from copied buffers."""
    data = head_sizes(head)[1]
    return decode(data, [bytearray(memoryview(buffer).cast("B")) for buffer in buffers])


def _private(comm: MPI.Comm) -> MPI.Comm:
    """The private duplicate of ``comm`` (collective on first use, as every call is)."""
    state = state_of(comm)
    if state.private is None:
        state.private = MPI.Comm.Dup(comm)
    return state.private


def _exchange(
    private: MPI.Comm,
    sends: Sequence[tuple[int, Any, Sequence[Any]]],
    receives: Sequence[tuple[int, int]],
) -> list[Any]:
    """Send ``(peer, head, buffers)`` and receive from ``(peer, head length)``.

    Returns the received objects in the order of ``receives``.
    """
    big = _bigmpi
    sending: list[MPI.Request] = []
    for peer, head, buffers in sends:
        sending.append(private.Isend(big(head), peer, _TAG))
        sending += [private.Isend(big(buffer), peer, _TAG) for buffer in buffers]
    heads = [bytearray(length) for _, length in receives]
    MPI.Request.Waitall(
        [private.Irecv(big(head), peer, _TAG) for (peer, _), head in zip(receives, heads)]
    )
    pending: list[tuple[memoryview, list[Any]]] = []
    receiving: list[MPI.Request] = []
    for (peer, _), head in zip(receives, heads):
        sizes, data = head_sizes(head)
        buffers = allocate(sizes)
        receiving += [private.Irecv(big(buffer), peer, _TAG) for buffer in buffers]
        pending.append((data, buffers))
    MPI.Request.Waitall(receiving + sending)
    return [decode(data, buffers) for data, buffers in pending]


def _peers(comm: MPI.Comm) -> tuple[bool, int, int]:
    """``(inter, number of peers, own rank or -1)``: the peers are the remote group of
    an intercommunicator, the whole group (including oneself) of an intracommunicator."""
    if comm.Is_inter():
        return True, cast(MPI.Intercomm, comm).Get_remote_size(), -1
    return False, comm.Get_size(), comm.Get_rank()


def _items(sendobj: Sequence[Any] | None, count: int, call: str) -> list[Any]:
    """The per-process items of a scatter or all-to-all: ``None`` means ``count`` Nones."""
    items = [None] * count if sendobj is None else list(sendobj)
    if len(items) != count:
        raise ValueError(f"{call}: expecting {count} items, got {len(items)}")
    return items


def _bcast(comm: MPI.Comm, obj: Any, root: int) -> Any:
    """``comm.bcast(obj, root)``."""
    inter = comm.Is_inter()
    sends = root == MPI.ROOT if inter else comm.Get_rank() == root
    head, buffers = encode(obj) if sends else (bytearray(), [])
    length = array("q", [len(head)])
    comm.Bcast([length, MPI.INT64_T], root)
    if inter:  # only the root knows how many buffers follow: it sends to each receiver
        private = _private(comm)
        if root == MPI.ROOT:
            _exchange(private, [(peer, head, buffers) for peer in range(_peers(comm)[1])], [])
        if root in (MPI.ROOT, MPI.PROC_NULL):
            return None
        return _exchange(private, [], [(root, length[0])])[0]
    big = _bigmpi
    if not sends:
        head = bytearray(length[0])
    comm.Bcast(big(head), root)
    sizes, data = head_sizes(head)
    if not sends:
        buffers = allocate(sizes)
    for buffer in buffers:
        comm.Bcast(big(buffer), root)
    return obj if sends else decode(data, buffers)


def _gather(comm: MPI.Comm, sendobj: Any, root: int) -> list[Any] | None:
    """``comm.gather(sendobj, root)``."""
    inter, count, rank = _peers(comm)
    is_root = root == MPI.ROOT if inter else rank == root
    contributes = root not in (MPI.ROOT, MPI.PROC_NULL) if inter else True
    head, buffers = encode(sendobj) if contributes else (bytearray(), [])
    private = _private(comm)
    lengths = array("q", [0] * count)
    comm.Gather(
        _lengths([len(head)]) if contributes else None,
        [lengths, MPI.INT64_T] if is_root else None,
        root,
    )
    if not is_root:
        if contributes:
            _exchange(private, [(root, head, buffers)], [])
        return None
    peers = [peer for peer in range(count) if peer != rank]
    received = _exchange(private, [], [(peer, lengths[peer]) for peer in peers])
    result = dict(zip(peers, received))
    if not inter:
        result[rank] = _own_copy(head, buffers)
    return [result[peer] for peer in range(count)]


def _scatter(comm: MPI.Comm, sendobj: Sequence[Any] | None, root: int) -> Any:
    """``comm.scatter(sendobj, root)``."""
    inter, count, rank = _peers(comm)
    is_root = root == MPI.ROOT if inter else rank == root
    receives = root not in (MPI.ROOT, MPI.PROC_NULL) if inter else True
    outgoing = [encode(item) for item in _items(sendobj, count, "scatter")] if is_root else []
    private = _private(comm)
    length = array("q", [0])
    comm.Scatter(
        _lengths([len(head) for head, _ in outgoing]) if is_root else None,
        [length, MPI.INT64_T] if receives else None,
        root,
    )
    if is_root:
        sends = [(peer, head, buffers) for peer, (head, buffers) in enumerate(outgoing)]
        _exchange(private, [send for send in sends if send[0] != rank], [])
        return None if inter else _own_copy(*outgoing[rank])
    if not receives:
        return None
    return _exchange(private, [], [(root, length[0])])[0]


def _allgather(comm: MPI.Comm, sendobj: Any) -> list[Any]:
    """``comm.allgather(sendobj)``."""
    inter, count, rank = _peers(comm)
    head, buffers = encode(sendobj)
    private = _private(comm)
    lengths = array("q", [0] * count)
    comm.Allgather(_lengths([len(head)]), [lengths, MPI.INT64_T])
    peers = [peer for peer in range(count) if peer != rank]
    received = _exchange(
        private,
        [(peer, head, buffers) for peer in peers],
        [(peer, lengths[peer]) for peer in peers],
    )
    result = dict(zip(peers, received))
    if not inter:
        result[rank] = _own_copy(head, buffers)
    return [result[peer] for peer in range(count)]


def _alltoall(comm: MPI.Comm, sendobj: Sequence[Any] | None) -> list[Any]:
    """``comm.alltoall(sendobj)``."""
    inter, count, rank = _peers(comm)
    outgoing = [encode(item) for item in _items(sendobj, count, "alltoall")]
    private = _private(comm)
    lengths = array("q", [0] * count)
    comm.Alltoall(_lengths([len(head) for head, _ in outgoing]), [lengths, MPI.INT64_T])
    peers = [peer for peer in range(count) if peer != rank]
    received = _exchange(
        private,
        [(peer, *outgoing[peer]) for peer in peers],
        [(peer, lengths[peer]) for peer in peers],
    )
    result = dict(zip(peers, received))
    if not inter:
        result[rank] = _own_copy(*outgoing[rank])
    return [result[peer] for peer in range(count)]


class Message(_Message):
    """A message matched by ``mprobe``/``improbe`` (not a subclass of ``MPI.Message``)."""

    __slots__ = ()

    @classmethod
    def probe(
        cls,
        comm: MPI.Comm,
        source: int = MPI.ANY_SOURCE,
        tag: int = MPI.ANY_TAG,
        status: MPI.Status | None = None,
    ) -> Message:
        """Blocking test for a matched message on ``comm``."""
        return mprobe(comm, source, tag, status)

    @classmethod
    def iprobe(
        cls,
        comm: MPI.Comm,
        source: int = MPI.ANY_SOURCE,
        tag: int = MPI.ANY_TAG,
        status: MPI.Status | None = None,
    ) -> Message | None:
        """Nonblocking test for a matched message on ``comm``; None if there is none."""
        return improbe(comm, source, tag, status)


class Comm(MPI.Comm):
    """Communicator whose object methods use pickle protocol 5 with out-of-band buffers.

    ``Comm(comm)`` is another handle to ``comm`` (no new communicator is made). The
    upper-case (buffer) methods are ``MPI.Comm``'s.
    """

    def send(self, obj: Any, dest: int, tag: int = 0) -> None:
        """Blocking send in standard mode."""
        Request(_post(self, MPI.Comm.Isend, obj, dest, tag)).wait()

    def bsend(self, obj: Any, dest: int, tag: int = 0) -> None:
        """Blocking send in buffered mode (the attached buffer must hold every part)."""
        Request(_post(self, MPI.Comm.Ibsend, obj, dest, tag)).wait()

    def ssend(self, obj: Any, dest: int, tag: int = 0) -> None:
        """Blocking send in synchronous mode."""
        Request(_post(self, MPI.Comm.Issend, obj, dest, tag)).wait()

    def isend(self, obj: Any, dest: int, tag: int = 0) -> Request:  # type: ignore[override]
        """Nonblocking send in standard mode."""
        return Request(_post(self, MPI.Comm.Isend, obj, dest, tag))

    def ibsend(self, obj: Any, dest: int, tag: int = 0) -> Request:  # type: ignore[override]
        """Nonblocking send in buffered mode."""
        return Request(_post(self, MPI.Comm.Ibsend, obj, dest, tag))

    def issend(self, obj: Any, dest: int, tag: int = 0) -> Request:  # type: ignore[override]
        """Nonblocking send in synchronous mode."""
        return Request(_post(self, MPI.Comm.Issend, obj, dest, tag))

    def recv(
        self,
        buf: Any = None,
        source: int = MPI.ANY_SOURCE,
        tag: int = MPI.ANY_TAG,
        status: MPI.Status | None = None,
    ) -> Any:
        """Blocking receive (``buf`` is not used: the memory is allocated here)."""
        return mprobe(self, source, tag, status).recv(status)

    def irecv(  # type: ignore[override]
        self, buf: Any = None, source: int = MPI.ANY_SOURCE, tag: int = MPI.ANY_TAG
    ) -> Request:
        """Nonblocking receive: not supported, raises ``RuntimeError``.

        The buffers of a message can only be matched once its head has arrived, which
        a posted receive cannot wait for; use ``mprobe``/``improbe`` and ``irecv`` of
        the message instead.
        """
        raise RuntimeError("pkl5: unsupported nonblocking receive; use (i)mprobe + irecv")

    def sendrecv(
        self,
        sendobj: Any,
        dest: int,
        sendtag: int = 0,
        recvbuf: Any = None,
        source: int = MPI.ANY_SOURCE,
        recvtag: int = MPI.ANY_TAG,
        status: MPI.Status | None = None,
    ) -> Any:
        """Send and receive."""
        request = self.isend(sendobj, dest, sendtag)
        try:
            return self.recv(recvbuf, source, recvtag, status)
        finally:
            request.wait()

    def mprobe(  # type: ignore[override]
        self,
        source: int = MPI.ANY_SOURCE,
        tag: int = MPI.ANY_TAG,
        status: MPI.Status | None = None,
    ) -> Message:
        """Blocking test for a matched message."""
        return mprobe(self, source, tag, status)

    def improbe(  # type: ignore[override]
        self,
        source: int = MPI.ANY_SOURCE,
        tag: int = MPI.ANY_TAG,
        status: MPI.Status | None = None,
    ) -> Message | None:
        """Nonblocking test for a matched message."""
        return improbe(self, source, tag, status)

    def bcast(self, obj: Any = None, root: int = 0) -> Any:
        """Broadcast."""
        return _bcast(self, obj, root)

    def gather(self, sendobj: Any, root: int = 0) -> list[Any] | None:
        """Gather."""
        return _gather(self, sendobj, root)

    def scatter(self, sendobj: Sequence[Any] | None = None, root: int = 0) -> Any:
        """Scatter."""
        return _scatter(self, sendobj, root)

    def allgather(self, sendobj: Any) -> list[Any]:
        """Gather to All."""
        return _allgather(self, sendobj)

    def alltoall(self, sendobj: Sequence[Any] | None) -> list[Any]:
        """All to All Scatter/Gather."""
        return _alltoall(self, sendobj)


class Intracomm(Comm, MPI.Intracomm):
    """Intracommunicator wrapper class."""


class Intercomm(Comm, MPI.Intercomm):
    """Intercommunicator wrapper class."""
