"""What a rank's process can tell about itself, and do to itself, without any MPI.

Where its main thread is in user code, how much memory it holds, and how to
send itself a signal. The built-in MPI's progress thread answers controller
queries with these (:mod:`ipympi.progress.thread`), and so does the control thread
of an engine running on another MPI (:mod:`ipympi.notebook.engine.mpi4py_engine`),
which must not import the built-in MPI at all. Both threads fail on purpose
when a test asks them to (:func:`injected_fault`), so that what guards them
is tested for real.
"""

from __future__ import annotations

import linecache
import os
import sysconfig
from typing import Any

__all__ = [
    "FAULT_ENV",
    "describe_location",
    "injected_fault",
    "resident_bytes",
    "running",
    "signal_self",
    "source_line",
]

# Set by tests only: the place where a rank's background thread fails on purpose.
FAULT_ENV = "IPYMPI_TEST_FAULT"

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # ipympi/
_LIBRARY_DIRS = tuple(
    {sysconfig.get_paths()[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")}
)
try:
    _PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
except (AttributeError, ValueError, OSError):
    _PAGE_SIZE = 4096


def _is_library(frame: Any) -> bool:
    """A frame of the standard library or an installed package (zmq, numpy, ...)."""
    name = frame.f_code.co_filename
    return name.startswith(_LIBRARY_DIRS) or "/site-packages/" in name


def _user_frame(frame: Any) -> Any:
    """The innermost frame of user code at or above ``frame``, or None.

    Frames of ipympi are skipped, and so are frames of libraries that ipympi
    called (zmq's poll while a rank waits for a message on another host); a
    user's function called by ipympi (a reduction operation) is user code.
    """
    chain = []
    while frame is not None:
        chain.append(frame)
        frame = frame.f_back
    first = next(
        (i for i, f in enumerate(chain) if f.f_code.co_filename.startswith(_PACKAGE_DIR)), 0
    )
    if not all(_is_library(f) for f in chain[:first]):
        first = 0
    for frame in chain[first:]:
        name = frame.f_code.co_filename
        if name.startswith("<ipython-input-"):
            return frame
        if not name.startswith(_PACKAGE_DIR) and not name.startswith("<"):
            return frame
    return None


def describe_location(frame: Any) -> str:
    """The innermost frame of user code at or above ``frame``, in words.

    ``prog.py:12`` for a file, ``line 3 of cell [7]`` for a notebook cell
    (IPython names cells ``<ipython-input-7-...>``); frames of ipympi itself
    and of other generated code are skipped. ``""`` when there is none.
    """
    frame = _user_frame(frame)
    if frame is None:
        return ""
    name = frame.f_code.co_filename
    if name.startswith("<ipython-input-"):
        parts = name.strip("<>").split("-")
        return f"line {frame.f_lineno} of cell [{parts[2] if len(parts) > 2 else '?'}]"
    return f"{os.path.basename(name)}:{frame.f_lineno}"


def source_line(frame: Any) -> str:
    """The source text of the line :func:`describe_location` names, stripped ("" if unknown)."""
    frame = _user_frame(frame)
    if frame is None:
        return ""
    return linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()


def resident_bytes() -> int | None:
    """This process's resident memory (Linux ``/proc``), else None."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * _PAGE_SIZE
    except (OSError, ValueError, IndexError):
        return None


def running(thread_id: int | None) -> bool | None:
    """Whether thread ``thread_id`` (a native id) of this process is running or ready to
    run, rather than asleep in a system call (Linux ``/proc``; None where it cannot tell).

    A rank blocked for a message sleeps; one copying a large message, or waiting
    for a core on a loaded machine, does not.
    """
    if thread_id is None:
        return None
    try:
        with open(f"/proc/self/task/{thread_id}/stat", "rb") as stat:
            state = stat.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None
    return state in (b"R", b"D")


def signal_self(signum: int) -> None:
    """Send ``signum`` to this process's group if it leads one (its children too), else to it.

    How an interrupt reaches a rank that the launcher or controller cannot
    signal directly (one on another host).
    """
    try:
        if os.getpgrp() == os.getpid():
            os.killpg(os.getpid(), signum)
        else:
            os.kill(os.getpid(), signum)
    except (OSError, ValueError):
        pass


def injected_fault(place: str) -> None:
    """Raise the fault a test asked for at ``place`` (``IPYMPI_TEST_FAULT=place``).

    The rank's background threads call it where they serve a control message
    (place ``"control"``). A test sets the variable in one rank's process, as
    a cell can; nothing else does.
    """
    if os.environ.get(FAULT_ENV) == place:
        raise RuntimeError(f"a fault injected for a test at {place!r} ({FAULT_ENV})")
