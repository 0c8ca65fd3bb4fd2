"""The engine protocol: signed zmq messages between the controller and its engines.

Pure encoding, decoding and signing; no sockets live here.

Sockets
    The controller binds one ROUTER at ``ipc://<session dir>/engines`` (the
    session directory is private, mode 0700), and also at a tcp address on
    one interface when engines may run on other hosts. The supervisor connects a DEALER
    with identity ``b"supervisor"``. Each engine connects two DEALERs: ``in``
    (identity ``b"in<rank>"``), on which only its main thread receives
    requests, and ``out`` (identity ``b"out<rank>"``), on which every thread of
    the engine sends, under one lock. Everything an engine says about a cell
    (output, results, the reply) therefore reaches the controller in the order
    it was said.

Frames
    ``[MAGIC, signature, body, *buffers]``. ``body`` is one JSON object
    (UTF-8): ``{"type": str, "id": str, "parent": str | None, "content": {...}}``.
    ``buffers`` carry pickled data (``push``/``pull``/``apply``). ``signature``
    is the hex HMAC-SHA256 of ``body`` and every buffer, with the session key,
    as Jupyter signs its own messages. A message with a wrong or missing
    signature is dropped by the receiver (and counted), never acted upon.

Types (direction, content)
    ==================  ==========  ===================================================
    ``ready``           sup → C     ``pid``: the supervisor has imported everything
    ``spawn``           C → sup     ``ranks`` (list), ``size``, ``world_dir``, ``ctl``,
                                    ``mpi_key``, ``env`` (dict): fork these engines
    ``spawned``         sup → C     ``rank``, ``pid``
    ``exited``          sup → C     ``rank``, ``pid``, ``returncode`` (Popen style)
    ``hello``           eng → C     ``rank``, ``pid``, ``host``: the engine is ready;
                                    ``mpi`` (optional): its MPI library, e.g. "MPICH 5.0.2"
    ``execute``         C → eng     ``code``, ``silent``, ``store_history``
    ``stream``          eng → C     ``name``, ``text`` (``parent``: the request's id)
    ``display_data``    eng → C     ``data``, ``metadata``, ``transient``
    ``update_display_data``         as ``display_data``
    ``clear_output``    eng → C     ``wait``
    ``execute_result``  eng → C     ``execution_count``, ``data``, ``metadata``
    ``error``           eng → C     ``ename``, ``evalue``, ``traceback``, ``where``
    ``push``            C → eng     ``names``; buffer 0: a pickled dict name → value
    ``pull``            C → eng     ``names``
    ``apply``           C → eng     buffer 0: pickled ``(function, args, kwargs)``
    ``complete``        C → eng     ``code``, ``cursor_pos``
    ``inspect``         C → eng     ``code``, ``cursor_pos``, ``detail_level``
    ``shutdown``        C → eng     (none): finalize MPI and exit
    ``reply``           eng → C     ``status`` ("ok" | "error" | "aborted") and the
                                    request's results (``execution_count``,
                                    ``matches``..., buffers for ``pull``/``apply``)
    ==================  ==========  ===================================================
"""

from __future__ import annotations

import hashlib
import hmac
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "MAGIC",
    "MAX_BODY",
    "EngineMessage",
    "ProtocolError",
    "Signer",
    "new_id",
]

MAGIC = b"ipympi-engine/1"
MAX_BODY = 64 * 1024 * 1024  # a body this large is a bug or an attack


class ProtocolError(ValueError):
    """A message that is malformed or not signed with the session key."""


def new_id() -> str:
    """A fresh message id."""
    return uuid.uuid4().hex


@dataclass(frozen=True)
class EngineMessage:
    """One decoded engine-protocol message."""

    type: str
    content: dict[str, Any] = field(default_factory=dict)
    parent: str | None = None
    id: str = field(default_factory=new_id)
    buffers: tuple[bytes, ...] = ()


class Signer:
    """Signs and checks messages with one session key (HMAC-SHA256)."""

    def __init__(self, key: bytes) -> None:
        if len(key) < 16:
            raise ValueError("the session key must have at least 16 bytes")
        self._key = key

    def _digest(self, body: bytes, buffers: tuple[bytes, ...] | list[bytes]) -> bytes:
        mac = hmac.new(self._key, body, hashlib.sha256)
        for buf in buffers:
            mac.update(buf)
        return mac.hexdigest().encode("ascii")

    def encode(self, msg: EngineMessage) -> list[bytes]:
        """The frames of ``msg``."""
        body = json.dumps(
            {"type": msg.type, "id": msg.id, "parent": msg.parent, "content": msg.content},
            separators=(",", ":"),
            default=_jsonable,
        ).encode("utf-8")
        buffers = [bytes(b) for b in msg.buffers]
        return [MAGIC, self._digest(body, buffers), body, *buffers]

    def decode(self, frames: list[bytes]) -> EngineMessage:
        """The message in ``frames``; ProtocolError if malformed or wrongly signed."""
        if len(frames) < 3 or frames[0] != MAGIC:
            raise ProtocolError("not an engine-protocol message")
        signature, body, buffers = frames[1], frames[2], frames[3:]
        if len(body) > MAX_BODY:
            raise ProtocolError(f"message body of {len(body)} bytes")
        if not hmac.compare_digest(signature, self._digest(body, buffers)):
            raise ProtocolError("bad signature")
        try:
            obj = json.loads(body)
            kind, ident, content = obj["type"], obj["id"], obj["content"]
            parent = obj.get("parent")
        except (ValueError, KeyError, TypeError) as exc:
            raise ProtocolError(f"malformed body: {exc}") from None
        if not isinstance(kind, str) or not isinstance(content, dict):
            raise ProtocolError("malformed body: type or content")
        return EngineMessage(kind, content, parent, str(ident), tuple(bytes(b) for b in buffers))


def _jsonable(obj: Any) -> Any:
    """JSON fallback for values display hooks produce (bytes, numpy scalars, ...)."""
    if isinstance(obj, (bytes, bytearray, memoryview)):
        import base64

        return base64.b64encode(bytes(obj)).decode("ascii")
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if hasattr(obj, "isoformat"):
        return obj.isoformat()
    return repr(obj)
