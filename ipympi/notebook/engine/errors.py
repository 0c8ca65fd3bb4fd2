"""How a rank's exception is told to the controller: the ``error`` message of a cell.

The message carries IPython's traceback and the exception's name and text.
Tracebacks leave out the frames of the MPI implementation (:func:`up_to_mpi_call`,
unless ``IPYMPI_TRACEBACK=full``), as with mpi4py: they say nothing about the
user's code, nor does the engine's SIGINT handler (:func:`without_frames_of`).

An MPI error, of ipympi's MPI or of mpi4py's, is named ``MPI.Exception`` as
the program knows it, not ``Exception`` (its class's own name), and carries
its error class (``error_class``: ``"ERR_OTHER"``). One that a peer's death
caused also says so apart (``died``: ``rank 1 has died (exited with status
3)``, and ``call``: what the rank was doing, ``Barrier: collective #0 on
MPI_COMM_WORLD``), so that the controller can put the death first.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable
from typing import Any

from ...core.tracebacks import hide_internal, wants_full

__all__ = [
    "MPI_EXCEPTION",
    "error_content",
    "is_mpi_exception",
    "up_to_mpi_call",
    "without_frames_of",
]

MPI_EXCEPTION = "MPI.Exception"
_MPI_MODULES = ("ipympi.core.errors", "mpi4py.MPI")  # where the classes of MPI.Exception live
# The name of the exception in IPython's traceback, maybe coloured: on its last line,
# before a colon, and in its header, padded to the width of the line (which it keeps).
_LAST_LINE = re.compile(r"^((?:\x1b\[[0-9;]*m)*)Exception((?:\x1b\[[0-9;]*m)*):")
_HEADER = re.compile(r"^((?:\x1b\[[0-9;]*m)*)Exception((?:\x1b\[[0-9;]*m)*) {4}")


def error_content(etype: Any, evalue: Any, stb: list[str], dead: Iterable[str] = ()) -> dict:
    """The content of the ``error`` message of ``evalue`` (``stb``: IPython's traceback).

    ``dead`` are the texts of the peers' deaths this rank knows of
    (``rank 1 has died (exited with status 3)``).
    """
    content: dict[str, Any] = {
        "ename": getattr(etype, "__name__", str(etype)),
        "evalue": str(evalue),
        "traceback": list(stb),
    }
    if not is_mpi_exception(etype):
        return content
    content["ename"] = MPI_EXCEPTION
    lines = content["traceback"]
    for i, line in enumerate(lines):
        if "Traceback (most recent call last)" in line:
            lines[i] = _HEADER.sub(rf"\1{MPI_EXCEPTION}\2", line, count=1)
    if lines:
        lines[-1] = _LAST_LINE.sub(rf"\1{MPI_EXCEPTION}\2:", lines[-1], count=1)
    name = _error_class_name(evalue)
    if name:
        content["error_class"] = name
    message = str(evalue)
    with_class = getattr(evalue, "Get_error_string", lambda: "")()
    if with_class and message.startswith(with_class):
        message = message[len(with_class) :].lstrip(": ")  # "Other error; see ...: "
    for text in dead:
        at = message.find(text)
        if at >= 0:
            content["died"] = text
            call = message[:at].rstrip(": ")
            if call:
                content["call"] = call
            break
    return content


def is_mpi_exception(etype: Any) -> bool:
    """Whether ``etype`` is ``MPI.Exception`` (of ipympi's MPI or of mpi4py's)."""
    return (
        isinstance(etype, type)
        and etype.__name__ == "Exception"
        and etype.__module__ in _MPI_MODULES
    )


def _error_class_name(evalue: Any) -> str:
    """``"ERR_OTHER"``: the name of the exception's error class, where it has one."""
    try:
        errorclass = int(evalue.Get_error_class())
    except Exception:
        return ""
    module = sys.modules.get(type(evalue).__module__)
    if module is None:
        return ""
    names = [
        name
        for name, value in vars(module).items()
        if name.startswith("ERR_") and name != "ERR_LASTCODE" and value == errorclass
    ]
    return min(names, default="")


def without_frames_of(tb: Any, code: Any) -> Any:
    """``tb`` without the entries of ``code`` (the SIGINT handler that raised)."""
    while tb is not None and tb.tb_frame.f_code is code:
        tb = tb.tb_next
    head = tb
    while tb is not None and tb.tb_next is not None:
        if tb.tb_next.tb_frame.f_code is code:
            tb.tb_next = tb.tb_next.tb_next
        else:
            tb = tb.tb_next
    return head


def up_to_mpi_call(tb: Any) -> Any:
    """``tb`` without ipympi's own frames (all of them with ``IPYMPI_TRACEBACK=full``)."""
    return tb if wants_full(os.environ) else hide_internal(tb)
