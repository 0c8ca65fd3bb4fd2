"""ipympi's MPI module: the API of ``mpi4py.MPI``, implemented in Python.

``from ipympi import MPI`` initializes MPI (unless ``ipympi.rc.initialize`` is
off): in a process started by ``python -m ipympi.run -n N`` it joins the other
ranks; anywhere else it is a world of one rank. Every name comes from one of
the private modules below, each implementing one chapter of the standard; the
module's ``__all__`` is the union of theirs.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from . import (
    _buffers,
    _comm,
    _constants,
    _datatype,
    _datatype_lookup,
    _errhandling,
    _errors,
    _grequest,
    _group,
    _handle,
    _info,
    _memory,
    _message,
    _neighbor,
    _op,
    _pickle,
    _request,
    _runtime,
    _status,
    _topology,
    _unsupported,
)
from ._rc import settle as _settle_rc

_SOURCES: tuple[ModuleType, ...] = (
    _constants,
    _errors,
    _datatype,
    _buffers,
    _status,
    _request,
    _grequest,
    _message,
    _op,
    _group,
    _comm,
    _topology,
    _neighbor,
    _runtime,
    _memory,
    _pickle,
    _info,
    _unsupported,
)


def _collect() -> list[str]:
    names: list[str] = []
    namespace = globals()
    for module in _SOURCES:
        for name in module.__all__:
            if name.startswith("_"):
                continue
            namespace[name] = getattr(module, name)
            names.append(name)
    return names


__all__ = _collect()

# Process-wide functions that live with the runtime.
Attach_buffer = _runtime.Attach_buffer
Detach_buffer = _runtime.Detach_buffer
Flush_buffer = _runtime.Flush_buffer
Iflush_buffer = _runtime.Iflush_buffer
Pcontrol = _runtime.Pcontrol
__all__ += ["Attach_buffer", "Detach_buffer", "Flush_buffer", "Iflush_buffer", "Pcontrol"]

# Calls not tied to an object report errors through COMM_WORLD's handler.
_WORLD_CALLS = (
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
)
for _name in _WORLD_CALLS:
    globals()[_name] = _errhandling.world_call(globals()[_name])
del _name

# mpi4py's low-level accessors of MPI objects (see _handle).
_addressof = _handle.addressof
_handleof = _handle.handleof
_sizeof = _handle.sizeof
# mpi4py's private alignment helper, which mpi4py.util.dtlib uses (see _datatype_lookup).
_typealign = _datatype_lookup.typealign
# mpi4py's per-communicator locks of lower-case collectives (see _commlock).
_comm_lock = _comm._comm_lock
_comm_lock_table = _comm._comm_lock_table


def __getattr__(name: str) -> Any:
    raise AttributeError(f"module 'ipympi.MPI' has no attribute {name!r}")


if _settle_rc()["initialize"]:
    _runtime.Init()
