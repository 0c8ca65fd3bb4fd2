"""Which call of mpi4py a thread is inside, seen from another thread.

A real MPI does not say what its ranks wait for. What an engine on mpi4py can
see of its own main thread (:mod:`ipympi.notebook.engine.mpi4py_engine`, whose control
thread answers the controller's questions) is the thread's innermost Python
frame and the instruction it is at. While a C function runs, that instruction
is the call, and the code object's positions (Python 3.11 and later; the
whole line before) give its source text, e.g. ``comm.recv(source=1, tag=7)``.

The call is an MPI call when its callee is an attribute of an object of
mpi4py: a communicator, a request, a class such as ``MPI.Request``, the
``MPI`` module itself. Names are looked up in the frame's namespaces and
attributes found with :func:`inspect.getattr_static`, so nothing of the
user's code runs and no MPI function is called from the looking thread.

:func:`current_call` returns what the controller's stuck-cell rule for a real
MPI needs (:mod:`ipympi.notebook.controller.realwatch`):

===========  ===================================================================
``call``     the call as written, e.g. ``"comm.recv(source=1, tag=7)"``
``method``   the method's name, ``"recv"``
``kind``     ``"send"``, ``"recv"``, ``"sendrecv"``, ``"wait"`` (completing
             requests), ``"collective"`` (blocking calls), or ``"other"``
``peer``     the destination or source where it is written as a value (an int,
             or ``"ANY_SOURCE"``), else absent
``tag``      the tag, likewise (``"ANY_TAG"``; the call's default when not
             written)
``world``    True when the communicator is ``MPI.COMM_WORLD``
``position`` a token that differs between two places of the thread (a frame
             and an instruction)
===========  ===================================================================

The same place at two looks may be two calls: a loop of short waits. A
:class:`StayProbe` tells them apart: Python runs a signal's handler in the
main thread only between two instructions of Python, never inside a call of C
that does not ask for it, as mpi4py's blocking calls do not. The probe
simulates the arrival of a signal (:func:`_thread.interrupt_main`: no signal
reaches any thread, no system call is interrupted) and notes when; as long as
its handler has not run, the main thread has executed no Python since: it
is still inside the call it was in.
"""

from __future__ import annotations

import _thread
import ast
import inspect
import itertools
import linecache
import signal
import sys
from typing import Any

__all__ = ["BLOCKING", "StayProbe", "current_call", "kind_of"]

_SEND = ("send", "ssend", "bsend", "rsend")
_RECV = ("recv",)
_PROBE = ("probe", "mprobe")
_SENDRECV = ("sendrecv", "sendrecv_replace")
_WAIT = ("wait", "waitall", "waitany", "waitsome")
_COLLECTIVE = (
    "barrier", "bcast", "gather", "gatherv", "scatter", "scatterv", "allgather",
    "allgatherv", "alltoall", "alltoallv", "alltoallw", "reduce", "allreduce",
    "reduce_scatter", "reduce_scatter_block", "scan", "exscan", "neighbor_allgather",
    "neighbor_allgatherv", "neighbor_alltoall", "neighbor_alltoallv", "neighbor_alltoallw",
    "dup", "split", "split_type", "create", "create_group", "create_cart", "create_graph",
    "create_dist_graph", "create_dist_graph_adjacent", "create_intercomm", "merge",
    "accept", "connect", "spawn", "spawn_multiple", "fence", "allocate", "allocate_shared",
    "open", "close", "sync",
)  # fmt: skip
# Where each kind's peer and tag are among the positional arguments.
_ARGS = {
    "send": ("dest", 1, "tag", 2),
    "recv": ("source", 1, "tag", 2),
    "probe": ("source", 0, "tag", 1),
}
BLOCKING = frozenset({"send", "recv", "sendrecv", "wait", "collective"})
_MAX_TEXT = 80


def kind_of(method: str) -> str:
    """The kind of an mpi4py method (see the module docstring)."""
    name = method.lower()
    if name in _SEND:
        return "send"
    if name in _RECV or name in _PROBE:
        return "recv"
    if name in _SENDRECV:
        return "sendrecv"
    if name in _WAIT:
        return "wait"
    if name in _COLLECTIVE:
        return "collective"
    return "other"


def current_call(frame: Any) -> dict[str, Any] | None:
    """The MPI call ``frame`` (a thread's innermost frame) is at, or None (not an MPI call).

    Never raises: what cannot be told is no MPI call (the controller's rule then
    takes the rank for one that is working).
    """
    if frame is None:
        return None
    try:
        return _call_of(frame)
    except Exception:
        return None


def _call_of(frame: Any) -> dict[str, Any] | None:
    text, node = _call_at(frame)
    if node is None or not isinstance(node.func, ast.Attribute):
        return None
    namespaces = _namespaces(frame)
    receiver = _lookup(node.func.value, namespaces)
    if not _is_mpi(receiver) or _static(receiver, node.func.attr) is None:
        return None
    method = node.func.attr
    found: dict[str, Any] = {
        "call": _shorten(text),
        "method": method,
        "kind": kind_of(method),
        "position": f"{id(frame):x}:{frame.f_lasti}",
    }
    world = _world_of(receiver)
    if world is not None:
        found["world"] = world
    found.update(_peer_and_tag(method, node, namespaces))
    return found


class StayProbe:
    """How long the main thread has stayed inside the call of C it is in (see above).

    Made in the main thread, which it gives a handler for :attr:`signum`;
    :meth:`look` is for another thread.
    """

    # A signal number no library is likely to use (SIGUSR2 without real-time signals).
    signum = int(signal.SIGRTMIN) + 5 if hasattr(signal, "SIGRTMIN") else int(signal.SIGUSR2)

    def __init__(self) -> None:
        self._handler = self._answer
        self._answered = True
        self._position = ""
        self._since = 0.0
        self.usable = sys.version_info >= (3, 10)  # interrupt_main takes a signal from 3.10
        if self.usable:
            signal.signal(self.signum, self._handler)

    def _answer(self, signum: int, frame: Any) -> None:
        self._answered = True

    def look(self, position: str, now: float) -> float | None:
        """Seconds the main thread has surely stayed inside its call at ``position``
        (0 when it may have left it since the last look); None when the probe cannot
        tell (before Python 3.10, or when the program took the signal for itself)."""
        if not self.usable or signal.getsignal(self.signum) != self._handler:
            return None
        if not self._answered and position == self._position:
            return now - self._since
        self._answered = False
        self._position = position
        self._since = now
        _thread.interrupt_main(self.signum)  # type: ignore[arg-type]  # any signal number works
        return 0.0


# -- the call's text ------------------------------------------------------------------------
def _call_at(frame: Any) -> tuple[str, ast.Call | None]:
    """The source text of the call ``frame`` executes, and its parsed form."""
    code = frame.f_code
    lines = linecache.getlines(code.co_filename, frame.f_globals)
    if not lines:
        return "", None
    positions = getattr(code, "co_positions", None)
    if positions is not None and frame.f_lasti >= 0:
        here = next(itertools.islice(positions(), frame.f_lasti // 2, None), None)
        if here is None:
            return "", None
        start, end, col, end_col = here
        if None in (start, end, col, end_col) or not 0 < start <= end <= len(lines):
            return "", None
        text = _segment(lines[start - 1 : end], col, end_col)
        return text, _parse_call(text)
    # Before Python 3.11: the one call of the line that names a method.
    text = lines[frame.f_lineno - 1].strip() if 0 < frame.f_lineno <= len(lines) else ""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return "", None
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    methods = [n for n in calls if isinstance(n.func, ast.Attribute)]
    if len(methods) != 1:
        return "", None
    return ast.get_source_segment(text, methods[0]) or text, methods[0]


def _segment(lines: list[str], col: int, end_col: int) -> str:
    """The text from byte column ``col`` of the first line to ``end_col`` of the last."""
    data = [line.encode() for line in lines]
    if len(data) == 1:
        return data[0][col:end_col].decode(errors="replace")
    data[0], data[-1] = data[0][col:], data[-1][:end_col]
    return b"".join(data).decode(errors="replace")


def _parse_call(text: str) -> ast.Call | None:
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        return None
    return node if isinstance(node, ast.Call) else None


def _shorten(text: str) -> str:
    text = " ".join(text.split()).replace("( ", "(").replace(" )", ")")
    return text if len(text) <= _MAX_TEXT else text[: _MAX_TEXT - 1] + "…"


# -- what the names stand for ---------------------------------------------------------------
_MISSING = object()


def _namespaces(frame: Any) -> tuple[dict[str, Any], ...]:
    builtins = frame.f_builtins if isinstance(frame.f_builtins, dict) else {}
    return (frame.f_locals, frame.f_globals, builtins)


def _lookup(node: ast.AST, namespaces: tuple[dict[str, Any], ...]) -> Any:
    """The value of a name or a chain of attributes, without running any code, or _MISSING."""
    if isinstance(node, ast.Name):
        for namespace in namespaces:
            value = namespace.get(node.id, _MISSING)
            if value is not _MISSING:
                return value
        return _MISSING
    if isinstance(node, ast.Attribute):
        owner = _lookup(node.value, namespaces)
        if owner is _MISSING:
            return _MISSING
        value = _static(owner, node.attr)
        return _MISSING if value is None else value
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        value = _lookup(node.operand, namespaces)
        return -value if _is_int(value) else _MISSING
    return _MISSING


def _static(owner: Any, name: str) -> Any:
    try:
        return inspect.getattr_static(owner, name)
    except AttributeError:
        return None


def _module_of(value: Any) -> str:
    if inspect.ismodule(value):
        return value.__name__
    if isinstance(value, type):
        return str(value.__module__)
    return str(type(value).__module__)


def _is_mpi(value: Any) -> bool:
    return value is not _MISSING and _module_of(value).split(".")[0] == "mpi4py"


def _world_of(receiver: Any) -> bool | None:
    """Whether ``receiver`` is ``MPI.COMM_WORLD`` (comparing handles calls no MPI function)."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is None or _module_of(receiver) != "mpi4py.MPI" or isinstance(receiver, type):
        return None
    if not isinstance(receiver, mpi.Comm):
        return None
    try:
        return bool(receiver == mpi.COMM_WORLD)
    except Exception:
        return None


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _peer_and_tag(method: str, node: ast.Call, namespaces: tuple[dict[str, Any], ...]) -> dict:
    """The call's peer and tag where they are written as values (or left at their default)."""
    layout = _ARGS.get("probe" if method.lower() in _PROBE else kind_of(method))
    if layout is None:
        return {}
    peer_word, peer_at, tag_word, tag_at = layout
    receiving = peer_word == "source"
    # Unwritten: a receive takes any source and any tag, a send has tag 0.
    defaults = {"peer": "ANY_SOURCE", "tag": "ANY_TAG"} if receiving else {"tag": 0}
    mpi = sys.modules.get("mpi4py.MPI")
    wildcards = {}
    if receiving and mpi is not None:
        wildcards = {("peer", mpi.ANY_SOURCE): "ANY_SOURCE", ("tag", mpi.ANY_TAG): "ANY_TAG"}
    keywords = {kw.arg: kw.value for kw in node.keywords if kw.arg is not None}
    found: dict[str, Any] = {}
    for key, word, at in (("peer", peer_word, peer_at), ("tag", tag_word, tag_at)):
        arg = keywords.get(word, node.args[at] if at < len(node.args) else None)
        if arg is None:
            if key in defaults:
                found[key] = defaults[key]
            continue
        value = _lookup(arg, namespaces)
        if _is_int(value):
            found[key] = wildcards.get((key, value), int(value))
    return found
