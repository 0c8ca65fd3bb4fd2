"""ipympi's MPI module: the API of ``mpi4py.MPI``, implemented in Python.

``from ipympi import MPI`` initializes MPI (unless ``ipympi.rc.initialize`` is
off): in a process started by ``python -m ipympi.run -n N`` it joins the other
ranks; anywhere else it is a world of one rank. Every name comes from one of
the private modules listed in ``_SOURCES``, each implementing one chapter of
the standard; the module's ``__all__`` is the union of theirs.

The modules are imported when needed (PEP 562): importing this module imports
only what starting MPI needs, and the first use of a name no module imported so
far defines (``MPI.Win``, ``dir(MPI)``, ``MPI.__all__``, ``from ipympi.MPI import *``)
imports the others. Adding a chapter is adding one line to ``_SOURCES``: the
dotted name of a module whose ``__all__`` lists its public names.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from .mpi import pickling as _pickling
from .mpi.rc import settle as _settle_rc

_SOURCES: tuple[str, ...] = (
    "ipympi.core.constants",
    "ipympi.core.errors",
    "ipympi.mpi.errhandling",
    "ipympi.mpi.datatype",
    "ipympi.mpi.rawmem",
    "ipympi.mpi.buffers",
    "ipympi.mpi.status",
    "ipympi.mpi.request",
    "ipympi.mpi.grequest",
    "ipympi.mpi.message",
    "ipympi.mpi.op",
    "ipympi.mpi.group",
    "ipympi.mpi.comm",
    "ipympi.mpi.topology",
    "ipympi.mpi.file",
    "ipympi.mpi.file_view",
    "ipympi.mpi.neighbor",
    "ipympi.mpi.runtime",
    "ipympi.mpi.memory",
    "ipympi.mpi.pickling",
    "ipympi.mpi.info",
    "ipympi.mpi.session",
    "ipympi.mpi.win",
    "ipympi.mpi.ports",
    "ipympi.mpi.unsupported",
)

# Names defined elsewhere than in a source's ``__all__``: name -> (module, attribute).
_EXTRA: dict[str, tuple[str, str]] = {
    # Process-wide functions that live with the runtime.
    "Attach_buffer": ("ipympi.mpi.runtime", "Attach_buffer"),
    "Detach_buffer": ("ipympi.mpi.runtime", "Detach_buffer"),
    "Flush_buffer": ("ipympi.mpi.runtime", "Flush_buffer"),
    "Iflush_buffer": ("ipympi.mpi.runtime", "Iflush_buffer"),
    "Pcontrol": ("ipympi.mpi.runtime", "Pcontrol"),
    # mpi4py's low-level accessors of MPI objects (see mpi/accessors.py).
    "_addressof": ("ipympi.mpi.accessors", "addressof"),
    "_handleof": ("ipympi.mpi.accessors", "handleof"),
    "_sizeof": ("ipympi.mpi.accessors", "sizeof"),
    # mpi4py's private alignment helper, which mpi4py.util.dtlib uses (see mpi.datatype_lookup).
    "_typealign": ("ipympi.mpi.datatype_lookup", "typealign"),
    # mpi4py's per-communicator locks of lower-case collectives (see mpi.commlock).
    "_comm_lock": ("ipympi.mpi.comm", "_comm_lock"),
    "_comm_lock_table": ("ipympi.mpi.comm", "_comm_lock_table"),
}
_PUBLIC_EXTRA = [name for name in _EXTRA if not name.startswith("_")]

# Calls not tied to an object report errors through COMM_WORLD's handler.
_WORLD_CALLS = frozenset(
    {
        "Attach_buffer",
        "Detach_buffer",
        "Flush_buffer",
        "Iflush_buffer",
        "Alloc_mem",
        "Free_mem",
        "Get_error_class",
        "Get_error_string",
        "Add_error_class",
        "Add_error_code",
        "Add_error_string",
        "Remove_error_class",
        "Remove_error_code",
        "Remove_error_string",
    }
)

_collected: set[str] = set()  # the sources whose names are in this namespace


def _define(name: str, value: Any) -> None:
    if name in _WORLD_CALLS:
        from .mpi.errhandling import world_call

        value = world_call(value)
    globals()[name] = value


def _collect(everything: bool) -> None:
    """Define the names of the sources imported so far (``everything``: of all of them)."""
    for source in _SOURCES:
        if source in _collected or (not everything and source not in sys.modules):
            continue
        module = importlib.import_module(source)
        for name in module.__all__:
            if not name.startswith("_"):
                _define(name, getattr(module, name))
        _collected.add(source)


def __getattr__(name: str) -> Any:
    if name in _EXTRA:
        source, attribute = _EXTRA[name]
        _define(name, getattr(importlib.import_module(source), attribute))
        return globals()[name]
    if name == "__all__" or len(_collected) < len(_SOURCES):
        _collect(True)
        if name == "__all__":
            names = [n for s in _SOURCES for n in sys.modules[s].__all__ if not n.startswith("_")]
            globals()["__all__"] = names + _PUBLIC_EXTRA
        if name in globals():
            return globals()[name]
    raise AttributeError(f"module 'ipympi.MPI' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *__getattr__("__all__"), *_EXTRA})


_pickling.read_environment()
if _settle_rc()["initialize"]:
    from .mpi import runtime as _runtime

    _runtime.Init()
_collect(False)
