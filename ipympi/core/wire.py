"""The MPI wire protocol between ranks: one datagram (frame) per message.

Every frame starts with a fixed 40-byte little-endian header::

    offset size  field
    0      1     kind      EAGER, RTS, ACK, FIN, CTS, DATA (below)
    1      1     flags     SYNC (the sender waits for an ACK: Ssend/Issend);
                           HELPS (RTS: the sender can write half of it, below)
    2      2     sig       collective signature (kind and root of the collective call
                           a message belongs to; 0 for point-to-point)
    4      4     context   communicator context id (unsigned)
    8      4     source    sender's rank in that communicator
    12     4     tag       message tag
    16     4     wsource   sender's rank in COMM_WORLD (where replies go)
    20     4     pid       sender's process id (RTS: whose memory to read)
    24     8     msgid     sender-local id naming the send (ACK/FIN/CTS/DATA refer to it)
    32     8     value     EAGER/RTS/DATA: payload size in bytes; RTS: see below

Kinds:

* ``EAGER``: the payload follows the header in the same frame. Small messages.
* ``RTS`` (ready to send): a large message is announced without its data;
  ``value`` is its size and a second 8-byte field after the header holds the
  address of the sender's buffer. On a match the receiver reads the buffer in
  one copy with ``process_vm_readv`` and answers ``FIN``; if it cannot (other
  host, not permitted) it answers ``CTS`` and the sender replies with the data
  in ``DATA`` frames (``value`` is the chunk's offset), then the receiver sends
  ``FIN``.
* ``PUT``: the answer to an RTS flagged ``HELPS`` (a sender on the same host that
  waits for the message to be received, with a core of its own): the receiver
  reads the first ``value`` bytes itself and asks the sender to write the rest
  (``process_vm_writev``) into its buffer, whose address follows the header (as in
  an RTS; ``pid`` is the receiver's), so that two cores copy at once. The sender
  answers ``PUT_DONE`` (``value`` 1 when written, 0 when it could not: the receiver
  then reads that part too), and the receiver ends with ``FIN`` as usual.
* ``ACK``: a synchronous-mode eager message was matched.
* ``DATA``: a chunk of a large message (after ``CTS``); ``value`` is its offset.
* ``FIN``: the receiver is done with a large message; the send completes.
* ``CANCEL``: the sender asks to withdraw send ``msgid`` (``Request.Cancel``);
  if the message is still unmatched the receiver drops it and answers
  ``CANCELLED``, otherwise it answers nothing (the ACK/FIN follows as usual).
* ``CERR``: a collective mismatch was detected on ``context``; the payload is the
  UTF-8 report. Every rank waiting in a collective on that context fails with it.
* ``PEER_DEAD``: world rank ``value`` has died; the payload is the UTF-8 reason.
  A rank's progress thread sends it to the rank's own socket when the controller
  says so, so that a main thread blocked in MPI wakes up and fails what waits on
  the dead rank.
* ``CHECK``: the sender has long waited in collective ``tag`` on ``context`` for a
  message of this rank, and asks whether this rank called the same collective there:
  ``sig`` is the sender's call, ``source`` its rank in the communicator. A rank that
  called another one reports the mismatch (``CERR``); otherwise nothing is answered.
  Without it, two ranks in different collectives that wait for each other with no
  message crossing between them (Bcast against Reduce) would wait forever.
* ``RMA``: one-sided communication with a window's rank on another host (a request,
  or the target's reply): ``context`` names the window (its communicator's), ``tag``
  the request, ``msgid`` the origin's number for it, ``value`` the offset of this
  chunk; an 8-byte field after the header (:data:`RMA_EXTRA`) holds the whole
  payload's size, and the chunk follows (see ``mpi.win_remote``). The engine hands
  these frames to the service registered for the kind (``Engine.services``).
* ``WAKE``: nothing to handle. A thread of the rank that finds the engine taken by
  a thread blocked reading the socket sends it to the rank's own socket, so that
  the reader wakes up and lets it in (see ``Engine.enter``). A rank that wrote a
  frame into a shared ring sends it too, when the receiver may be asleep.
* ``RING``: from now on the sender writes its frames to this rank into a shared
  ring whenever they fit, instead of the socket; the payload is the ring's name
  (UTF-8), ``value`` its bytes of records. The transports at both ends deal with it
  (``progress.shmring``).

Flags above ``HELPS`` belong to the transport: ``RINGED`` marks a frame that went
by socket while its sender had a ring to the receiver (the receiving transport
orders it after what the ring holds, and clears the flag before anything above
sees the frame).

Packing and unpacking are pure functions; sockets live in ``progress.transport``.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

__all__ = [
    "ACK",
    "CANCEL",
    "CANCELLED",
    "CERR",
    "CHECK",
    "CTS",
    "DATA",
    "EAGER",
    "FIN",
    "FOREIGN_BASE",
    "HEADER",
    "HEADER_SIZE",
    "HELPS",
    "PEER_DEAD",
    "PUT",
    "PUT_DONE",
    "RING",
    "RINGED",
    "RMA",
    "RMA_EXTRA",
    "RTS",
    "RTS_EXTRA",
    "SYNC",
    "WAKE",
    "WAKE_FRAME",
    "Header",
    "pack",
    "signature_of",
    "unpack",
]

(
    EAGER,
    RTS,
    ACK,
    FIN,
    CTS,
    DATA,
    CERR,
    CANCEL,
    CANCELLED,
    PEER_DEAD,
    WAKE,
    CHECK,
    RMA,
    PUT,
    PUT_DONE,
    RING,
) = range(1, 17)
KIND_NAMES = {
    EAGER: "EAGER",
    RTS: "RTS",
    ACK: "ACK",
    FIN: "FIN",
    CTS: "CTS",
    DATA: "DATA",
    CERR: "CERR",
    CANCEL: "CANCEL",
    CANCELLED: "CANCELLED",
    PEER_DEAD: "PEER_DEAD",
    WAKE: "WAKE",
    CHECK: "CHECK",
    RMA: "RMA",
    PUT: "PUT",
    PUT_DONE: "PUT_DONE",
    RING: "RING",
}

SYNC = 0x01
HELPS = 0x02
RINGED = 0x80  # the transport's (see the module's docstring)

# The ids (``wsource``) of processes of other jobs start here: no job has this many
# processes (``progress.transport`` maps them to the other job's sockets).
FOREIGN_BASE = 1 << 24

HEADER = struct.Struct("<BBHIiiiIQQ")
HEADER_SIZE = HEADER.size
RTS_EXTRA = struct.Struct("<Q")  # address of the sender's buffer
RMA_EXTRA = struct.Struct("<Q")  # size of a one-sided request's (or reply's) whole payload


class Header(NamedTuple):
    kind: int
    flags: int
    sig: int
    context: int
    source: int
    tag: int
    wsource: int
    pid: int
    msgid: int
    value: int


def pack(
    kind: int,
    flags: int,
    sig: int,
    context: int,
    source: int,
    tag: int,
    wsource: int,
    pid: int,
    msgid: int,
    value: int,
) -> bytes:
    """Pack one header (the caller appends any payload)."""
    return HEADER.pack(kind, flags, sig, context, source, tag, wsource, pid, msgid, value)


def unpack(frame: bytes | memoryview) -> Header:
    """Unpack the header at the start of ``frame``."""
    return Header._make(HEADER.unpack_from(frame))


# A whole ``WAKE`` frame (nothing in it matters): what wakes a rank that reads its socket.
WAKE_FRAME = pack(WAKE, 0, 0, 0, 0, 0, 0, 0, 0, 0)


def signature_of(frame: bytes | memoryview) -> int:
    """The ``sig`` field of the header at the start of ``frame``, read alone: receivers
    of collective messages compare it with their own call's."""
    return frame[2] | frame[3] << 8
