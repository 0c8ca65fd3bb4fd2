"""The collectives of :mod:`ipympi.mpi4py.util.pkl5`'s communicators.

Each collective runs in three steps:

1. Every object to send is pickled into a head and its out-of-band buffers
   (:func:`ipympi.mpi4py.util.pkl5.encode`).
2. The lengths of the heads travel with the buffer collective of the same shape
   (``Bcast``, ``Gather``, ``Scatter``, ``Allgather``, ``Alltoall`` of one 64-bit integer
   per process). That collective checks the root and follows the intercommunicator rules
   (``MPI.ROOT``, ``MPI.PROC_NULL``) for us, so pkl5's collectives raise what the buffer
   collectives raise.
3. Heads and buffers move: ``bcast`` on an intracommunicator broadcasts them (``Bcast``
   of the head, then of each buffer; every process learns the buffer sizes from the
   head); the other collectives, and ``bcast`` on an intercommunicator (where the
   processes of the root's group learn nothing from a broadcast, so could not take part
   in one per buffer), send them point to point on a private duplicate of the
   communicator, made the first time and freed with the communicator, so that they never
   meet the program's own messages. Every receiver knows the length of each head it gets,
   so it posts the receives of all heads at once, then those of the buffers.

An intracommunicator member's own contribution is not sent: it is rebuilt from a copy of
its buffers, as a received object would be.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from typing import Any

from ... import MPI
from . import pkl5

__all__ = ["allgather", "alltoall", "bcast", "gather", "scatter"]

_TAG = 0  # the private communicator carries nothing but collective traffic


def _lengths(values: Sequence[int]) -> list[Any]:
    return [array("q", values), MPI.INT64_T]


def _own_copy(head: Any, buffers: Sequence[Any]) -> Any:
    """The object a process contributes to itself: rebuilt from copied buffers."""
    data = pkl5.head_sizes(head)[1]
    return pkl5.decode(data, [bytearray(memoryview(buffer).cast("B")) for buffer in buffers])


def _private(comm: MPI.Comm) -> MPI.Comm:
    """The private duplicate of ``comm`` (collective on first use, as every call is)."""
    state = pkl5.state_of(comm)
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
    big = pkl5._bigmpi
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
        sizes, data = pkl5.head_sizes(head)
        buffers = pkl5.allocate(sizes)
        receiving += [private.Irecv(big(buffer), peer, _TAG) for buffer in buffers]
        pending.append((data, buffers))
    MPI.Request.Waitall(receiving + sending)
    return [pkl5.decode(data, buffers) for data, buffers in pending]


def _peers(comm: MPI.Comm) -> tuple[bool, int, int]:
    """``(inter, number of peers, own rank or -1)``: the peers are the remote group of
    an intercommunicator, the whole group (including oneself) of an intracommunicator."""
    if comm.Is_inter():
        return True, comm.Get_remote_size(), -1
    return False, comm.Get_size(), comm.Get_rank()


def _items(sendobj: Sequence[Any] | None, count: int, call: str) -> list[Any]:
    """The per-process items of a scatter or all-to-all: ``None`` means ``count`` Nones."""
    items = [None] * count if sendobj is None else list(sendobj)
    if len(items) != count:
        raise ValueError(f"{call}: expecting {count} items, got {len(items)}")
    return items


def bcast(comm: MPI.Comm, obj: Any, root: int) -> Any:
    """``comm.bcast(obj, root)``."""
    inter = comm.Is_inter()
    sends = root == MPI.ROOT if inter else comm.Get_rank() == root
    head, buffers = pkl5.encode(obj) if sends else (bytearray(), [])
    length = array("q", [len(head)])
    comm.Bcast([length, MPI.INT64_T], root)
    if inter:  # only the root knows how many buffers follow: it sends to each receiver
        private = _private(comm)
        if root == MPI.ROOT:
            _exchange(
                private, [(peer, head, buffers) for peer in range(comm.Get_remote_size())], []
            )
        if root in (MPI.ROOT, MPI.PROC_NULL):
            return None
        return _exchange(private, [], [(root, length[0])])[0]
    big = pkl5._bigmpi
    if not sends:
        head = bytearray(length[0])
    comm.Bcast(big(head), root)
    sizes, data = pkl5.head_sizes(head)
    if not sends:
        buffers = pkl5.allocate(sizes)
    for buffer in buffers:
        comm.Bcast(big(buffer), root)
    return obj if sends else pkl5.decode(data, buffers)


def gather(comm: MPI.Comm, sendobj: Any, root: int) -> list[Any] | None:
    """``comm.gather(sendobj, root)``."""
    inter, count, rank = _peers(comm)
    is_root = root == MPI.ROOT if inter else rank == root
    contributes = root not in (MPI.ROOT, MPI.PROC_NULL) if inter else True
    head, buffers = pkl5.encode(sendobj) if contributes else (bytearray(), [])
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


def scatter(comm: MPI.Comm, sendobj: Sequence[Any] | None, root: int) -> Any:
    """``comm.scatter(sendobj, root)``."""
    inter, count, rank = _peers(comm)
    is_root = root == MPI.ROOT if inter else rank == root
    receives = root not in (MPI.ROOT, MPI.PROC_NULL) if inter else True
    outgoing = [pkl5.encode(item) for item in _items(sendobj, count, "scatter")] if is_root else []
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


def allgather(comm: MPI.Comm, sendobj: Any) -> list[Any]:
    """``comm.allgather(sendobj)``."""
    inter, count, rank = _peers(comm)
    head, buffers = pkl5.encode(sendobj)
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


def alltoall(comm: MPI.Comm, sendobj: Sequence[Any] | None) -> list[Any]:
    """``comm.alltoall(sendobj)``."""
    inter, count, rank = _peers(comm)
    outgoing = [pkl5.encode(item) for item in _items(sendobj, count, "alltoall")]
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
