"""The rank side of ``%mpi explain``: run one collective call with its messages recorded.

The controller checks the call text with :func:`parse_collective_call` and
sends it to every rank, where :func:`explain_call` evaluates the call's
communicator and arguments in the rank's namespace, copies the buffers it was
given, runs the call with the tracer keeping payloads and algorithm states
(:mod:`ipympi.progress.tracing`), and returns everything the explanation needs. The call
really runs: afterwards the rank's buffers hold its results, as they would
after running the cell.

A collective's bare name (``%mpi explain Allreduce``) stands for a call on
small default buffers (:func:`default_call`), made in a namespace of the
explanation's own: the user's variables are left alone.
"""

from __future__ import annotations

import ast
import copy
from typing import Any, cast

import numpy as np

from ..core.schedule import KINDS
from ..mpi.request import Request
from ..progress import tracing as _trace

__all__ = ["COLLECTIVES", "default_call", "explain_call", "parse_collective_call"]

# The collectives of the standard's collective chapter, as mpi4py spells them
# (the collective kinds that signatures know, but for Idup's context agreement).
_BUFFER_CALLS = tuple(kind for kind in KINDS if kind[0].isupper())
_OBJECT_CALLS = ("barrier", *(k for k in KINDS if k[0].islower() and k != "dup"))
COLLECTIVES = frozenset(
    _BUFFER_CALLS
    + _OBJECT_CALLS
    + tuple("I" + name[0].lower() + name[1:] for name in _BUFFER_CALLS)
)


# A collective's call on default buffers: (the code that makes them, the call). Each rank
# runs both with numpy as np, MPI, comm, rank and size defined.
_V_COUNTS = "counts = [r + 1 for r in range(size)]\n"
_DEFAULTS: dict[str, tuple[str, str]] = {
    "Barrier": ("", "comm.Barrier()"),
    "Bcast": ("buf = np.arange(4.0) if rank == 0 else np.zeros(4)", "comm.Bcast(buf, root=0)"),
    "Gather": (
        "sendbuf = np.full(2, float(rank))\nrecvbuf = np.zeros(2 * size) if rank == 0 else None",
        "comm.Gather(sendbuf, recvbuf, root=0)",
    ),
    "Gatherv": (
        _V_COUNTS + "sendbuf = np.full(rank + 1, float(rank))\n"
        "recvbuf = [np.zeros(sum(counts)), counts] if rank == 0 else None",
        "comm.Gatherv(sendbuf, recvbuf, root=0)",
    ),
    "Scatter": (
        "sendbuf = np.arange(2.0 * size) if rank == 0 else None\nrecvbuf = np.zeros(2)",
        "comm.Scatter(sendbuf, recvbuf, root=0)",
    ),
    "Scatterv": (
        _V_COUNTS + "sendbuf = [np.arange(float(sum(counts))), counts] if rank == 0 else None\n"
        "recvbuf = np.zeros(rank + 1)",
        "comm.Scatterv(sendbuf, recvbuf, root=0)",
    ),
    "Allgather": (
        "sendbuf = np.full(2, float(rank))\nrecvbuf = np.zeros(2 * size)",
        "comm.Allgather(sendbuf, recvbuf)",
    ),
    "Allgatherv": (
        _V_COUNTS + "sendbuf = np.full(rank + 1, float(rank))\n"
        "recvbuf = [np.zeros(sum(counts)), counts]",
        "comm.Allgatherv(sendbuf, recvbuf)",
    ),
    "Alltoall": (
        "sendbuf = np.arange(float(size)) + 10 * rank\nrecvbuf = np.zeros(size)",
        "comm.Alltoall(sendbuf, recvbuf)",
    ),
    "Alltoallv": (
        "ones = [1] * size\nsendbuf = [np.arange(float(size)) + 10 * rank, ones]\n"
        "recvbuf = [np.zeros(size), ones]",
        "comm.Alltoallv(sendbuf, recvbuf)",
    ),
    "Alltoallw": (
        "ones, types = [1] * size, [MPI.DOUBLE] * size\n"
        "offsets = [8 * r for r in range(size)]\n"
        "sendbuf = [np.arange(float(size)) + 10 * rank, ones, offsets, types]\n"
        "recvbuf = [np.zeros(size), ones, offsets, types]",
        "comm.Alltoallw(sendbuf, recvbuf)",
    ),
    "Reduce": (
        "sendbuf = np.arange(4.0) + rank\nrecvbuf = np.zeros(4) if rank == 0 else None",
        "comm.Reduce(sendbuf, recvbuf, op=MPI.SUM, root=0)",
    ),
    "Allreduce": (
        "sendbuf = np.arange(4.0) + rank\nrecvbuf = np.zeros(4)",
        "comm.Allreduce(sendbuf, recvbuf, op=MPI.SUM)",
    ),
    "Reduce_scatter": (
        "sendbuf = np.arange(2.0 * size) + rank\nrecvbuf = np.zeros(2)",
        "comm.Reduce_scatter(sendbuf, recvbuf, recvcounts=[2] * size, op=MPI.SUM)",
    ),
    "Reduce_scatter_block": (
        "sendbuf = np.arange(2.0 * size) + rank\nrecvbuf = np.zeros(2)",
        "comm.Reduce_scatter_block(sendbuf, recvbuf, op=MPI.SUM)",
    ),
    "Scan": (
        "sendbuf = np.full(2, rank + 1.0)\nrecvbuf = np.zeros(2)",
        "comm.Scan(sendbuf, recvbuf, op=MPI.SUM)",
    ),
    "Exscan": (
        "sendbuf = np.full(2, rank + 1.0)\nrecvbuf = np.zeros(2)",
        "comm.Exscan(sendbuf, recvbuf, op=MPI.SUM)",
    ),
    "barrier": ("", "comm.barrier()"),
    "bcast": ("data = [1, 2, 3] if rank == 0 else None", "comm.bcast(data, root=0)"),
    "gather": ("", "comm.gather(rank * 10, root=0)"),
    "scatter": (
        "data = [10 * r for r in range(size)] if rank == 0 else None",
        "comm.scatter(data, root=0)",
    ),
    "allgather": ("", "comm.allgather(rank * 10)"),
    "alltoall": ("", "comm.alltoall([10 * rank + r for r in range(size)])"),
    "reduce": ("", "comm.reduce(rank + 1, op=MPI.SUM, root=0)"),
    "allreduce": ("", "comm.allreduce(rank + 1, op=MPI.SUM)"),
    "scan": ("", "comm.scan(rank + 1, op=MPI.SUM)"),
    "exscan": ("", "comm.exscan(rank + 1, op=MPI.SUM)"),
}


def default_call(name: str) -> tuple[str, str] | None:
    """``(setup, call)``: collective ``name`` called on small default buffers, which
    ``setup`` makes (``Iallreduce`` as ``Allreduce``); None for another name."""
    if name in _DEFAULTS:
        return _DEFAULTS[name]
    if name.startswith("I") and name in COLLECTIVES:
        blocking = name[1].upper() + name[2:]
        if blocking in _DEFAULTS:
            setup, call = _DEFAULTS[blocking]
            return setup, call.replace(f"comm.{blocking}(", f"comm.{name}(", 1)
    return None


def parse_collective_call(text: str) -> ast.Call:
    """The call of ``text`` (``comm.Allreduce(a, b)``); ValueError explains what is wrong."""
    text = text.strip()
    if not text:
        raise ValueError("give the collective call to explain, e.g. comm.Allreduce(a, b)")
    try:
        tree = ast.parse(text, mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"{text!r} is not a Python expression: {exc.msg}") from None
    call = tree.body
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)):
        raise ValueError(f"{text!r} is not a method call such as comm.Allreduce(a, b)")
    name = call.func.attr
    if name not in COLLECTIVES:
        known = ", ".join(sorted(set(_BUFFER_CALLS) | set(_OBJECT_CALLS), key=str.lower))
        raise ValueError(f"{name} is not a collective that can be explained; choose one of {known}")
    if any(isinstance(arg, ast.Starred) for arg in call.args) or any(
        kw.arg is None for kw in call.keywords
    ):
        raise ValueError("write the call's arguments out (no *args or **kwargs)")
    return call


def _label(node: ast.AST, index: int) -> str:
    text = ast.unparse(node)
    return text if len(text) <= 30 else f"argument {index + 1}"


def _buffer_of(value: Any) -> Any:
    """The array inside a buffer argument (``a`` or ``[a, MPI.DOUBLE]``), else None."""
    if isinstance(value, np.ndarray):
        return value
    if isinstance(value, (list, tuple)) and value and isinstance(value[0], np.ndarray):
        return value[0]
    return None


def _snapshot(value: Any) -> Any:
    array = _buffer_of(value)
    if array is not None:
        return array.copy()
    try:
        return copy.deepcopy(value)
    except Exception:
        return repr(value)


def explain_call(text: str, setup: str = "") -> dict[str, Any]:
    """Run the collective call ``text`` on this rank, recording it for an explanation.

    Returns ``{"records", "dtype", "before", "after"}``: this rank's trace
    records (with payloads and states), the numpy dtype of the call's buffers
    (None for lower-case calls), and the call's data arguments before and
    after the call, by their text (``{"a": array, "b": array}``); a lower-case
    call's result is ``after["result"]``. ``setup`` (see :func:`default_call`)
    runs first, in a copy of the rank's namespace.
    """
    from IPython import get_ipython

    call = parse_collective_call(text)
    func = cast(ast.Attribute, call.func)  # parse_collective_call checked it
    shell = get_ipython()
    namespace = shell.user_ns if shell is not None else {}
    if setup:
        namespace = {**namespace, "np": np}
        exec(compile(setup, "<explain>", "exec"), namespace)

    def evaluate(node: ast.expr) -> Any:
        return eval(compile(ast.Expression(node), "<explain>", "eval"), namespace)

    target = evaluate(func.value)
    args = [evaluate(node) for node in call.args]
    kwargs = {kw.arg: evaluate(kw.value) for kw in call.keywords if kw.arg is not None}
    # The data arguments, by their text: not constants (a root), ops or datatypes.
    labelled = [
        (_label(node, i), value)
        for i, (node, value) in enumerate(zip(call.args, args))
        if not isinstance(node, ast.Constant)
    ]
    labelled += [
        (kw.arg, kwargs[kw.arg])
        for kw in call.keywords
        if kw.arg is not None and kw.arg not in ("op", "root")
    ]
    data = [(label, value) for label, value in labelled if not _is_handle(value)]
    arrays = [a for a in (_buffer_of(value) for _, value in data) if a is not None]
    dtype = str(arrays[0].dtype) if arrays else None

    before = {label: _snapshot(value) for label, value in data}
    _trace.start(payloads=True)
    try:
        result = getattr(target, func.attr)(*args, **kwargs)
        if isinstance(result, Request):
            result.Wait()
            result = None
    finally:
        records = _trace.stop()
    after = {label: _snapshot(value) for label, value in data if _buffer_of(value) is not None}
    if func.attr in _OBJECT_CALLS and func.attr != "barrier":
        after["result"] = _snapshot(result)
    return {"records": records, "dtype": dtype, "before": before, "after": after}


def _is_handle(value: Any) -> bool:
    """MPI handles (ops, datatypes, IN_PLACE) are not data to show."""
    module = type(value).__module__ or ""
    return (
        module.startswith("ipympi.")
        and _buffer_of(value) is None
        and not isinstance(value, (int, float, str, list, tuple, dict))
    )
