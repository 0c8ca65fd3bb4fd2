"""The control protocol between a launcher (or controller) and its ranks.

Pure encoding, decoding and formatting: no sockets live here.

Transport
    The launcher binds a zmq ROUTER socket at ``ipc://<session dir>/ctl`` on
    one host, or at ``tcp://ADDRESS:PORT`` when the ranks span several hosts
    (the address is in ``IPYMPI_CTL``). Each rank connects one DEALER socket
    whose routing identity is ``b"rank%d" % rank`` (see :func:`identity`).

Frames
    Every message is one zmq frame: a 32-byte HMAC-SHA256 of the rest, keyed
    with the session's secret (``IPYMPI_KEY``), then one JSON object, UTF-8
    encoded, at most ``MAX_FRAME`` bytes. A frame whose signature does not
    verify is refused, so only processes given the key can take part, also
    over tcp. The ROUTER sees ``[identity, frame]``; a DEALER sees ``[frame]``.
    Every object has a ``"type"``; unknown extra keys are allowed (and
    ignored) so either side can grow. Required keys:

    =========  =========  ==========================================================
    type       direction  keys
    =========  =========  ==========================================================
    hello      rank → L   ``rank`` (int), ``pid`` (int), ``host`` (str): at start-up;
                          optionally ``data`` (str), the rank's tcp data endpoint
                          in a world that spans several hosts
    abort      rank → L   ``rank``, ``code`` (int), ``reason`` (str): the rank called
                          ``COMM_WORLD.Abort(code)`` or hit a fatal MPI error
    error      rank → L   ``rank``, ``text`` (str): the traceback of the rank's uncaught
                          exception, which the launcher prints (equal ones once)
    state      rank → L   ``rank``, ``state`` (one of ``RANK_STATES``), and optionally
                          ``pid``, ``host``, ``call`` (e.g. ``"Recv"``), ``comm``
                          (a communicator name), ``peer`` and ``tag`` (int or str),
                          ``since`` (seconds in the current call), ``where``
                          (``"file.py:12"``), ``line`` (the source text there),
                          ``cpu`` (CPU seconds the process has used), ``rss``
                          (resident bytes), ``threads`` (what the rank's other
                          threads blocked in MPI wait in: a dict of ``call``,
                          ``comm``, ``peer``, ``tag`` and ``since`` each); the
                          reply to a query
    query      L → rank   no keys: "what are you doing?"; the rank answers with a
                          ``state`` message from a background thread, even while
                          its main thread is blocked in an MPI call
    peer_exit  L → rank   ``rank``, ``reason`` (str): that rank has died; what
                          waits on it fails with an MPI error instead of hanging
    signal     L → rank   ``signal`` (int): the rank sends this signal to its own
                          process group (how an interrupt reaches a rank on
                          another host)
    peers      L → rank   ``endpoints`` (list of str): every rank's tcp data
                          endpoint, in rank order, once all have said hello
                          (worlds that span several hosts)
    spawn      rank → L   ``rank``, ``id`` (int), ``apps`` (list of objects: ``argv``
                          (list of str), ``maxprocs`` (int) and optionally ``wdir``,
                          ``path``, ``host``, ``soft``, ``env`` (str)), ``parents``
                          (the spawning group's process indexes), ``context`` and
                          ``base`` (int): the root of ``Comm.Spawn`` asks for processes
    spawned    L → rank   ``id``, ``ranks`` (list of int: the new processes' indexes),
                          ``errcodes`` (list of int, one per process asked for), and
                          ``error`` (str) when none could be started
    =========  =========  ==========================================================

Abort semantics
    A ``reason`` starting with ``"MPI_Abort"`` marks a call of ``Abort`` (e.g.
    ``"MPI_Abort(COMM_WORLD, 3)"``); any other reason names a fatal error (e.g.
    ``"Recv: ERR_TRUNCATE: message truncated"``). The launcher then ends every
    rank and exits with ``code % 256``, so like MPICH's ``mpiexec`` an
    ``Abort(0)`` ends the job with status 0. A rank should close its DEALER with
    a linger period (or wait to be ended) after sending ``abort``, so that the
    message leaves before the process does.

The launcher's reports also use ``state`` dicts for ranks that cannot answer:
``state`` is ``"no answer"``, or ``"exited"`` with ``status`` (shell-style exit
status) and, for a rank killed by a signal, ``signal`` (e.g. ``"SIGKILL"``).
"""

from __future__ import annotations

import hmac
import json
import signal
from collections.abc import Mapping
from typing import Any

from .constants import ANY_SOURCE, ANY_TAG, PROC_NULL

__all__ = [
    "ABORT",
    "ENV_APPNUM",
    "ENV_BIND",
    "ENV_CTL",
    "ENV_HOST",
    "ENV_KEY",
    "ENV_NODES",
    "ENV_PARENT",
    "ENV_RANK",
    "ENV_SESSION_DIR",
    "ENV_SIZE",
    "ENV_SPAWN",
    "ENV_UNIVERSE",
    "ENV_WORLD_BASE",
    "ERROR",
    "EXITED",
    "HELLO",
    "MAC_SIZE",
    "MAX_FRAME",
    "MESSAGE_TYPES",
    "NO_ANSWER",
    "PEERS",
    "PEER_EXIT",
    "QUERY",
    "QUERY_TIMEOUT",
    "RANK_STATES",
    "SIGNAL",
    "SPAWN",
    "SPAWNED",
    "STATE",
    "ControlProtocolError",
    "answer",
    "answers",
    "control_address",
    "decode",
    "decode_nodes",
    "decode_parent",
    "describe_exit",
    "encode",
    "encode_nodes",
    "encode_parent",
    "exit_status",
    "format_abort",
    "format_call",
    "format_state",
    "identity",
    "launcher_state",
    "rank_of",
    "session_key",
    "sign",
    "signal_name",
]

# -- environment of a rank (set by the launcher, read by the MPI runtime) -------
ENV_RANK = "IPYMPI_RANK"  # this rank in COMM_WORLD
ENV_SIZE = "IPYMPI_SIZE"  # the size of COMM_WORLD
ENV_SESSION_DIR = "IPYMPI_SESSION_DIR"  # private directory for the job's ipc sockets
ENV_CTL = "IPYMPI_CTL"  # zmq address of the launcher's control ROUTER
ENV_KEY = "IPYMPI_KEY"  # per-session secret (hex): signs control and tcp traffic
# A world on several hosts: each rank's host (comma-separated indices, in rank
# order), the name of this rank's host, and the address its tcp socket binds.
ENV_NODES = "IPYMPI_NODES"
ENV_HOST = "IPYMPI_HOST"
ENV_BIND = "IPYMPI_BIND"
# Processes started by ``Comm.Spawn``: the process index of the first rank of this
# COMM_WORLD (``IPYMPI_RANK`` is the process's own index, ``IPYMPI_SIZE`` the size of its
# COMM_WORLD), the parents (``context,base,index;index;...``) and ``APPNUM``.
ENV_WORLD_BASE = "IPYMPI_WORLD_BASE"
ENV_PARENT = "IPYMPI_PARENT"
ENV_APPNUM = "IPYMPI_APPNUM"
# The ``UNIVERSE_SIZE`` attribute (default: the host's processors).
ENV_UNIVERSE = "IPYMPI_UNIVERSE_SIZE"
# Set when the launcher serves ``spawn`` requests (``ipympi.run``, a singleton's supervisor).
ENV_SPAWN = "IPYMPI_SPAWN"

# -- message types ----------------------------------------------------------------
HELLO = "hello"
ABORT = "abort"
ERROR = "error"  # a rank's uncaught exception: its traceback, for the launcher to print
STATE = "state"
QUERY = "query"
PEER_EXIT = "peer_exit"
SIGNAL = "signal"
PEERS = "peers"
SPAWN = "spawn"
SPAWNED = "spawned"
MESSAGE_TYPES = frozenset(
    {HELLO, ABORT, ERROR, STATE, QUERY, PEER_EXIT, SIGNAL, PEERS, SPAWN, SPAWNED}
)

# States a rank reports about itself.
RANK_STATES = frozenset({"running", "blocked", "idle", "finalized"})
# States the launcher fills in for ranks that cannot answer.
NO_ANSWER = "no answer"
EXITED = "exited"

MAX_FRAME = 1 << 20
# Seconds ranks get to answer a state query, before the asker takes them as silent.
QUERY_TIMEOUT = 1.0
MAC_SIZE = 32  # an HMAC-SHA256 digest leads every frame

_INT = (int,)
_STR = (str,)
_NUMBER = (int, float)
_INT_OR_STR = (int, str)
_LIST = (list,)

# type -> {key: accepted types}; required keys first, then optional ones (may be null).
_REQUIRED: dict[str, dict[str, tuple[type, ...]]] = {
    HELLO: {"rank": _INT, "pid": _INT, "host": _STR},
    ABORT: {"rank": _INT, "code": _INT, "reason": _STR},
    ERROR: {"rank": _INT, "text": _STR},
    STATE: {"rank": _INT, "state": _STR},
    QUERY: {},
    PEER_EXIT: {"rank": _INT, "reason": _STR},
    SIGNAL: {"signal": _INT},
    PEERS: {"endpoints": _LIST},
    SPAWN: {
        "rank": _INT,
        "id": _INT,
        "apps": _LIST,
        "parents": _LIST,
        "context": _INT,
        "base": _INT,
    },
    SPAWNED: {"id": _INT, "ranks": _LIST, "errcodes": _LIST},
}
_OPTIONAL: dict[str, dict[str, tuple[type, ...]]] = {
    STATE: {
        "pid": _INT,
        "host": _STR,
        "call": _STR,
        "comm": _STR,
        "peer": _INT_OR_STR,
        "tag": _INT_OR_STR,
        "since": _NUMBER,
        "where": _STR,
        "line": _STR,
        "cpu": _NUMBER,
        "rss": _INT,
        "threads": _LIST,
        "query": _INT,  # the ``id`` of the query answered
    },
    HELLO: {"data": _STR},
    # Numbered, so that an answer that comes after its query timed out is not taken
    # for the answer to the next one.
    QUERY: {"id": _INT},
    SPAWNED: {"error": _STR},
}

# Collectives whose peer is a root rather than a source or destination.
_ROOTED = frozenset(
    name.lower()
    for name in (
        "Bcast", "Reduce", "Gather", "Gatherv", "Scatter", "Scatterv",
        "Ibcast", "Ireduce", "Igather", "Igatherv", "Iscatter", "Iscatterv",
    )
)  # fmt: skip


class ControlProtocolError(ValueError):
    """A control frame or message that does not follow the protocol."""


# -- addresses and identities ----------------------------------------------------
def control_address(session_dir: str) -> str:
    """The zmq address of the launcher's control ROUTER in a session directory."""
    return f"ipc://{session_dir}/ctl"


def encode_nodes(nodes: list[int]) -> str:
    """``IPYMPI_NODES`` for a placement: each rank's host index, comma-separated."""
    return ",".join(str(node) for node in nodes)


def decode_nodes(text: str, size: int) -> list[int] | None:
    """The placement in ``IPYMPI_NODES`` (None when unset); ValueError if malformed."""
    if not text:
        return None
    nodes = [int(part) for part in text.split(",")]
    if len(nodes) != size or min(nodes) < 0:
        raise ValueError(f"{ENV_NODES} names {len(nodes)} ranks' hosts for a world of {size}")
    return nodes


def encode_parent(context: int, base: int, parents: list[int]) -> str:
    """``IPYMPI_PARENT`` of spawned processes: the context of the intercommunicator to
    their parents, its collectives' first sequence number, the parents' indexes."""
    return f"{context},{base};" + ";".join(str(p) for p in parents)


def decode_parent(text: str) -> tuple[int, int, list[int]]:
    """``(context, base, parents)`` of an ``IPYMPI_PARENT`` value; ValueError if malformed."""
    head, _, members = text.partition(";")
    context, base = (int(n) for n in head.split(","))
    return context, base, [int(n) for n in members.split(";")]


def identity(rank: int) -> bytes:
    """The routing identity of ``rank``'s DEALER socket."""
    return b"rank%d" % rank


def rank_of(ident: bytes) -> int:
    """The rank whose routing identity is ``ident``."""
    if not ident.startswith(b"rank") or not ident[4:].isdigit():
        raise ControlProtocolError(f"not a rank identity: {ident[:40]!r}")
    return int(ident[4:])


# -- encoding -----------------------------------------------------------------------
def _check_type(key: str, value: object, types: tuple[type, ...]) -> None:
    if isinstance(value, bool) or not isinstance(value, types):
        names = " or ".join(t.__name__ for t in types)
        raise ControlProtocolError(f"{key!r} must be {names}, not {value!r:.60}")


def _validate(msg: Mapping[str, Any]) -> None:
    """Raise :class:`ControlProtocolError` unless ``msg`` is a well-formed message."""
    kind = msg.get("type")
    if kind not in MESSAGE_TYPES:
        raise ControlProtocolError(f"unknown control message type {kind!r:.60}")
    for key, types in _REQUIRED[kind].items():
        if key not in msg:
            raise ControlProtocolError(f"{kind} message without {key!r}")
        _check_type(key, msg[key], types)
    for key, types in _OPTIONAL.get(kind, {}).items():
        if msg.get(key) is not None:
            _check_type(key, msg[key], types)
    if kind == STATE and msg["state"] not in RANK_STATES:
        raise ControlProtocolError(f"unknown rank state {msg['state']!r:.60}")


def sign(key: bytes, data: bytes) -> bytes:
    """The HMAC-SHA256 of ``data`` under the session ``key``."""
    return hmac.digest(key, data, "sha256")


def session_key(text: str) -> bytes:
    """The session key given as hex text in ``IPYMPI_KEY`` (a non-hex text is used as is)."""
    try:
        return bytes.fromhex(text)
    except ValueError:
        return text.encode()


def encode(msg: Mapping[str, Any], key: bytes) -> bytes:
    """One signed control frame holding ``msg`` (validated first)."""
    _validate(msg)
    try:
        text = json.dumps(dict(msg), separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ControlProtocolError(f"cannot encode {msg.get('type')} message: {exc}") from exc
    data = text.encode("utf-8")
    if len(data) > MAX_FRAME:
        raise ControlProtocolError(f"control message of {len(data)} bytes exceeds {MAX_FRAME}")
    return sign(key, data) + data


def decode(frame: bytes, key: bytes) -> dict[str, Any]:
    """The message in one signed control frame.

    Raises :class:`ControlProtocolError` if the frame is not signed with
    ``key`` or does not hold a well-formed message.
    """
    if len(frame) > MAX_FRAME + MAC_SIZE:
        raise ControlProtocolError(f"control frame of {len(frame)} bytes exceeds {MAX_FRAME}")
    mac, data = bytes(frame[:MAC_SIZE]), bytes(frame[MAC_SIZE:])
    if len(mac) < MAC_SIZE or not hmac.compare_digest(mac, sign(key, data)):
        raise ControlProtocolError("control frame with a bad signature (not from this session)")
    try:
        msg = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ControlProtocolError(f"control frame is not UTF-8 JSON: {exc}") from exc
    if not isinstance(msg, dict):
        raise ControlProtocolError(f"control frame holds a {type(msg).__name__}, not an object")
    _validate(msg)
    return msg


# -- exit statuses -------------------------------------------------------------------
def signal_name(signum: int) -> str:
    """``"SIGSEGV"`` for 11; ``"signal 99"`` for a number with no name."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def exit_status(returncode: int) -> int:
    """A Popen return code as a shell exit status: 128 + n for death by signal n."""
    return 128 - returncode if returncode < 0 else returncode


def describe_exit(returncode: int) -> str:
    """``"exited with status 3"`` or ``"was killed by signal SIGSEGV"`` for a Popen return code."""
    if returncode < 0:
        return f"was killed by signal {signal_name(-returncode)}"
    return f"exited with status {returncode}"


# -- state queries ----------------------------------------------------------------
def answer(query: Mapping[str, Any], state: dict[str, Any]) -> dict[str, Any]:
    """``state`` as the answer to ``query``: it echoes the query's ``id``."""
    state["query"] = query.get("id")
    return state


def answers(state: Mapping[str, Any], query_id: int) -> bool:
    """Whether ``state`` answers the query numbered ``query_id``, not an earlier one
    whose answer came late (an answer without a number is taken as current)."""
    return state.get("query") in (None, query_id)


def launcher_state(rank: int, pid: int | None, returncode: int | None) -> dict[str, Any]:
    """The ``state`` dict the launcher reports for a rank that cannot answer.

    ``"exited"`` (with ``status`` and, after a signal, ``signal``) when
    ``returncode`` is set, else ``"no answer"``.
    """
    state: dict[str, Any] = {"type": STATE, "rank": rank, "pid": pid, "state": NO_ANSWER}
    if returncode is not None:
        state["state"], state["status"] = EXITED, exit_status(returncode)
        if returncode < 0:
            state["signal"] = signal_name(-returncode)
    return state


# -- formatting -----------------------------------------------------------------------
def _peer_keyword(call: str) -> str:
    name = call.lower()
    if "recv" in name or "probe" in name:
        return "source"
    if "send" in name:
        return "dest"
    if name in _ROOTED:
        return "root"
    return "peer"


def _show(keyword: str, value: object) -> str:
    if keyword == "source" and value == ANY_SOURCE:
        return "ANY_SOURCE"
    if keyword == "tag" and value == ANY_TAG:
        return "ANY_TAG"
    if keyword in ("source", "dest") and value == PROC_NULL:
        return "PROC_NULL"
    return str(value)


def _describe_call(msg: Mapping[str, Any]) -> str:
    call = msg.get("call")
    if not call:
        return ""
    args = []
    if msg.get("peer") is not None:
        keyword = _peer_keyword(call)
        args.append(f"{keyword}={_show(keyword, msg['peer'])}")
    if msg.get("tag") is not None:
        args.append(f"tag={_show('tag', msg['tag'])}")
    return f" in {call}({', '.join(args)})"


def format_call(msg: Mapping[str, Any]) -> str:
    """``Recv(source=0, tag=7) on MPI_COMM_WORLD`` for a state dict ("" without a call)."""
    call = str(msg.get("call") or "")
    # A collective's call is already described, e.g. "Barrier (collective #3, round 1)".
    text = call if "(" in call else _describe_call(msg)[len(" in ") :]
    if text and msg.get("comm"):
        text += f" on {msg['comm']}"
    return text


def format_state(msg: Mapping[str, Any]) -> str:
    """One readable line for a ``state`` dict, e.g.

    ``rank 1 (pid 4242): blocked in Recv(source=0, tag=7) on COMM_WORLD for 3.0 s at prog.py:5``
    """
    head = f"rank {msg.get('rank', '?')}"
    if msg.get("pid") is not None:
        head += f" (pid {msg['pid']})"
    state = str(msg.get("state", NO_ANSWER))
    if state == EXITED:
        if msg.get("signal"):
            return f"{head}: killed by signal {msg['signal']}"
        return f"{head}: exited with status {msg.get('status', '?')}"
    text = f"{head}: {state}"
    if state == "blocked":
        text += _describe_call(msg)
        if msg.get("comm"):
            text += f" on {msg['comm']}"
        if msg.get("since") is not None:
            text += f" for {float(msg['since']):.1f} s"
    if msg.get("where"):
        text += f" at {msg['where']}"
    for other in msg.get("threads") or ():
        if isinstance(other, Mapping) and other.get("call"):
            text += f"; another thread in {format_call(other)}"
    return text


def format_abort(msg: Mapping[str, Any]) -> str:
    """One line for an ``abort`` message, e.g.

    ``rank 2 called Abort with error code 3: MPI_Abort(COMM_WORLD, 3)``
    """
    rank, code, reason = msg["rank"], msg["code"], msg["reason"]
    if not reason or reason.startswith("MPI_Abort"):
        text = f"rank {rank} called Abort with error code {code}"
        return f"{text}: {reason}" if reason else text
    return f"rank {rank}: {reason} (error code {code})"
