"""The modes of MPI calls, as enums: how a send completes, and how a collective is called.

A send is standard, synchronous (it completes once the receive has matched), ready
(the receive is known to be posted) or buffered (the data is copied into an attached
buffer and the call completes at once) — MPI-3.1 §3.4. A collective call blocks
(``Bcast``), returns a request (``Ibcast``) or makes a persistent request that each
``Start`` runs again (``Bcast_init``); the three forms never match each other.
"""

from __future__ import annotations

import enum

__all__ = [
    "BLOCKING",
    "BUFFERED",
    "NONBLOCKING",
    "PERSISTENT",
    "READY",
    "STANDARD",
    "SYNCHRONOUS",
    "Form",
    "SendMode",
]


class SendMode(enum.Enum):
    """The communication mode of a send (``Send``/``Ssend``/``Rsend``/``Bsend``)."""

    STANDARD = "standard"
    SYNCHRONOUS = "synchronous"
    READY = "ready"
    BUFFERED = "buffered"


class Form(enum.Enum):
    """How a collective is called: blocking, nonblocking (``I...``) or persistent (``..._init``)."""

    BLOCKING = "blocking"
    NONBLOCKING = "nonblocking"
    PERSISTENT = "persistent"


# The members as module constants: code on hot paths reads these, since an attribute of
# an Enum class costs about ten times a global lookup on Python 3.11.
STANDARD, SYNCHRONOUS, READY, BUFFERED = (
    SendMode.STANDARD,
    SendMode.SYNCHRONOUS,
    SendMode.READY,
    SendMode.BUFFERED,
)
BLOCKING, NONBLOCKING, PERSISTENT = Form.BLOCKING, Form.NONBLOCKING, Form.PERSISTENT
