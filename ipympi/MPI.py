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

from .core import constants as _constants
from .core import errors as _errors
from .mpi import accessors as _accessors
from .mpi import (
    buffers as _buffers,
)
from .mpi import (
    comm as _comm,
)
from .mpi import (
    datatype as _datatype,
)
from .mpi import (
    datatype_lookup as _datatype_lookup,
)
from .mpi import (
    errhandling as _errhandling,
)
from .mpi import (
    grequest as _grequest,
)
from .mpi import (
    group as _group,
)
from .mpi import (
    info as _info,
)
from .mpi import (
    memory as _memory,
)
from .mpi import (
    message as _message,
)
from .mpi import (
    neighbor as _neighbor,
)
from .mpi import (
    op as _op,
)
from .mpi import (
    pickling as _pickle,
)
from .mpi import (
    ports as _ports,
)
from .mpi import (
    rawmem as _rawmem,
)
from .mpi import (
    request as _request,
)
from .mpi import (
    runtime as _runtime,
)
from .mpi import (
    session as _session,
)
from .mpi import (
    status as _status,
)
from .mpi import (
    topology as _topology,
)
from .mpi import (
    unsupported as _unsupported,
)
from .mpi.rc import settle as _settle_rc

_SOURCES: tuple[ModuleType, ...] = (
    _constants,
    _errors,
    _errhandling,
    _datatype,
    _rawmem,
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
    _session,
    _unsupported,
    _ports,
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

# mpi4py's low-level accessors of MPI objects (see mpi/accessors.py).
_addressof = _accessors.addressof
_handleof = _accessors.handleof
_sizeof = _accessors.sizeof
# mpi4py's private alignment helper, which mpi4py.util.dtlib uses (see mpi.datatype_lookup).
_typealign = _datatype_lookup.typealign
# mpi4py's per-communicator locks of lower-case collectives (see mpi.commlock).
_comm_lock = _comm._comm_lock
_comm_lock_table = _comm._comm_lock_table


def __getattr__(name: str) -> Any:
    raise AttributeError(f"module 'ipympi.MPI' has no attribute {name!r}")


if _settle_rc()["initialize"]:
    _runtime.Init()
