"""``MPI.Info``: ordered sets of (key, value) hints (MPI-4.1 §10).

An info object is a local store of string pairs, kept in the order keys were
first set. Keys are 1 to ``MAX_INFO_KEY`` characters, not all blank
(``ERR_INFO_KEY`` otherwise); values at most ``MAX_INFO_VAL`` characters
(``ERR_INFO_VALUE``). Besides the standard's calls an ``Info`` is a mapping
(``info[key]``, ``update``, ``items``, ...), as in mpi4py; on ``INFO_NULL``
the reading methods see an empty mapping and the writing ones raise
``KeyError``.

``INFO_ENV`` describes how this process was started (MPI-4.1 §11.2.4):
``command`` and ``argv`` (the Python interpreter and its arguments),
``maxprocs`` (the size of ``COMM_WORLD``), ``host``, ``arch``, ``wdir`` (the
working directory at start) and ``thread_level``; it is read-only
(``ERR_INFO``). ``Info.Create_env(args)`` makes a writable copy whose
``command``/``argv`` come from ``args``.

For the other modules: :func:`info_items` reads an ``info`` argument (a copy of
its pairs; ``INFO_NULL`` has none) and :func:`new_info` makes the ``Info`` a
``Get_info`` call returns.
"""

from __future__ import annotations

import os
import platform
import socket
import sys
from collections.abc import Iterable, Mapping
from typing import Any, Union, cast

from ..core.constants import MAX_INFO_KEY, MAX_INFO_VAL
from ..core.errors import ERR_ARG, ERR_INFO, ERR_INFO_KEY, ERR_INFO_NOKEY, ERR_INFO_VALUE
from ..core.errors import Exception as MPIException
from ..core.handle import Handle, Kind, register
from .errhandling import world_call
from .process import PROCESS

__all__ = ["INFO_ENV", "INFO_NULL", "Get_hw_resource_info", "Info"]  # what the MPI module exports

_START_DIRECTORY = os.getcwd()
_THREAD_LEVELS = ("MPI_THREAD_SINGLE", "MPI_THREAD_FUNNELED", "MPI_THREAD_SERIALIZED",
                  "MPI_THREAD_MULTIPLE")  # fmt: skip

Items = Union[Mapping[str, str], Iterable[tuple[str, str]], None]


class _InfoImpl:
    """An info object: its pairs in insertion order, and whether it is read-only."""

    __slots__ = ("__weakref__", "pairs", "readonly")

    def __init__(self, pairs: dict[str, str], readonly: bool = False) -> None:
        self.pairs = pairs
        self.readonly = readonly


_ENV = _InfoImpl({}, readonly=True)  # filled at first use, once MPI is initialized


def _environment(args: list[str] | None = None) -> dict[str, str]:
    """The pairs of ``INFO_ENV``; ``args`` (command first) replaces the command line."""
    command = [sys.executable, *sys.argv] if args is None else args
    pairs = {"command": command[0]} if command else {}
    if len(command) > 1:
        pairs["argv"] = " ".join(command[1:])
    engine = PROCESS.engine
    if engine is not None:
        pairs["maxprocs"] = str(len(PROCESS.world_ranks))
    pairs.update(
        host=socket.gethostname(),
        arch=platform.machine(),
        wdir=_START_DIRECTORY,
        thread_level=_THREAD_LEVELS[PROCESS.thread_level],
    )
    return pairs


def _key(key: Any, call: str) -> str:
    if not isinstance(key, str):
        raise TypeError(f"{call}: an info key must be a str, not {type(key).__name__}")
    if not key.strip() or len(key) > MAX_INFO_KEY:
        raise MPIException(
            ERR_INFO_KEY,
            f"{call}: info key {key[:40]!r} must have 1 to {MAX_INFO_KEY} characters, "
            "not all blank",
        )
    return key


def _value(value: Any, call: str) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{call}: an info value must be a str, not {type(value).__name__}")
    if len(value) > MAX_INFO_VAL:
        raise MPIException(
            ERR_INFO_VALUE,
            f"{call}: info value has {len(value)} characters; at most {MAX_INFO_VAL}",
        )
    return value


def _pairs_of(items: Items, call: str) -> list[tuple[str, str]]:
    """The (key, value) pairs of a mapping or of an iterable of pairs, checked."""
    if items is None:
        return []
    if hasattr(items, "keys"):
        mapping = cast("Mapping[str, str]", items)
        items = [(k, mapping[k]) for k in mapping]
    elif isinstance(items, (str, bytes)) or not isinstance(items, Iterable):
        raise TypeError(f"{call}: expected a mapping or pairs, not {type(items).__name__}")
    return [(_key(k, call), _value(v, call)) for k, v in items]


class Info(Handle):
    """A handle to an info object (``INFO_NULL`` when null)."""

    __slots__ = ("_impl",)
    _mpi_kind = Kind("Info", 7, ERR_INFO, None)
    _impl: _InfoImpl | None

    @classmethod
    def _of(cls, pairs: dict[str, str]) -> Any:
        """A handle to a new (writable) info object holding ``pairs``."""
        info = object.__new__(cls)
        info._impl = _InfoImpl(pairs)
        return info

    def _live(self, call: str) -> _InfoImpl:
        """The info object, or ``ERR_INFO`` for ``INFO_NULL``."""
        impl = self._impl
        if impl is None:
            raise MPIException(ERR_INFO, f"{call}: the info object is INFO_NULL")
        if impl is _ENV and not impl.pairs:
            impl.pairs = _environment()
        return impl

    def _writable(self, call: str) -> dict[str, str]:
        impl = self._live(call)
        if impl.readonly:
            raise MPIException(ERR_INFO, f"{call}: MPI.INFO_ENV is read-only")
        return impl.pairs

    # -- creation and release -------------------------------------------------------------
    @classmethod
    @world_call
    def Create(cls, items: Items = None) -> Any:
        """A new info object holding ``items`` (a mapping or (key, value) pairs)."""
        return cls._of(dict(_pairs_of(items, "Create")))

    @classmethod
    @world_call
    def Create_env(cls, args: str | Iterable[str] | None = None) -> Any:
        """A new info object describing the environment, as ``INFO_ENV`` does; with
        ``args`` (a command and its arguments), those replace the command line."""
        if args is not None:
            args = [args] if isinstance(args, str) else [str(a) for a in args]
        return cls._of(_environment(args))

    @world_call
    def Dup(self) -> Any:
        """A new (writable) info object with the same pairs."""
        return type(self)._of(dict(self._live("Dup").pairs))

    @world_call
    def Free(self) -> None:
        """Release this handle, which becomes ``INFO_NULL`` (``INFO_ENV`` cannot be freed)."""
        self._writable("Free")
        self._impl = None

    # -- pairs ----------------------------------------------------------------------------
    @world_call
    def Get(self, key: str) -> str | None:
        """The value of ``key``, or ``None`` when it is not set."""
        return self._live("Get").pairs.get(_key(key, "Get"))

    @world_call
    def Set(self, key: str, value: str) -> None:
        """Set ``key`` to ``value`` (a new key goes last)."""
        self._writable("Set")[_key(key, "Set")] = _value(value, "Set")

    @world_call
    def Delete(self, key: str) -> None:
        """Remove ``key`` (``ERR_INFO_NOKEY`` when it is not set)."""
        pairs = self._writable("Delete")
        if pairs.pop(_key(key, "Delete"), None) is None:
            raise MPIException(ERR_INFO_NOKEY, f"Delete: info key {key!r} is not set")

    @world_call
    def Get_nkeys(self) -> int:
        """The number of keys set."""
        return len(self._live("Get_nkeys").pairs)

    @world_call
    def Get_nthkey(self, n: int) -> str:
        """The ``n``-th key, counting from 0 in the order keys were set."""
        pairs = self._live("Get_nthkey").pairs
        if not 0 <= n < len(pairs):
            raise MPIException(ERR_ARG, f"Get_nthkey: no key {n}; the info has {len(pairs)}")
        return list(pairs)[n]

    # -- the mapping interface --------------------------------------------------------------
    def _pairs(self) -> dict[str, str]:
        """The pairs (none for ``INFO_NULL``), for the reading methods."""
        return {} if self._impl is None else self._live("items").pairs

    def __len__(self) -> int:
        return len(self._pairs())

    def __contains__(self, key: object) -> bool:
        return key in self._pairs()

    def __iter__(self) -> Any:
        return iter(list(self._pairs()))

    def __getitem__(self, key: str) -> str:
        value = self._pairs().get(key)
        if value is None:
            raise KeyError(key)
        return value

    def __setitem__(self, key: str, value: str) -> None:
        if self._impl is None:
            raise KeyError(key)
        self.Set(key, value)

    def __delitem__(self, key: str) -> None:
        if key not in self._pairs():
            raise KeyError(key)
        self.Delete(key)

    def get(self, key: str, default: Any = None) -> Any:
        """The value of ``key``, or ``default``."""
        return self._pairs().get(key, default)

    def keys(self) -> list[str]:
        """The keys, in order."""
        return list(self._pairs())

    def values(self) -> list[str]:
        """The values, in key order."""
        return list(self._pairs().values())

    def items(self) -> list[tuple[str, str]]:
        """The (key, value) pairs, in order."""
        return list(self._pairs().items())

    def update(self, items: Items = (), **kwds: str) -> None:
        """Set the pairs of ``items`` (a mapping or pairs), then those of ``kwds``."""
        if self._impl is None:
            raise KeyError("update(): the info object is INFO_NULL")
        for key, value in [*_pairs_of(items, "update"), *_pairs_of(kwds, "update")]:
            self.Set(key, value)

    def pop(self, key: str, *default: Any) -> Any:
        """Remove ``key`` and return its value (``default``, or ``KeyError``, if unset)."""
        value = self._pairs().get(key)
        if value is None:
            if default:
                return default[0]
            raise KeyError(key)
        self.Delete(key)
        return value

    def popitem(self) -> tuple[str, str]:
        """Remove and return the last (key, value) pair (``KeyError`` when empty)."""
        pairs = self._pairs()
        if not pairs:
            raise KeyError("popitem(): info is empty")
        key, value = next(reversed(pairs.items()))
        self.Delete(key)
        return key, value

    def copy(self) -> Any:
        """A duplicate (``Dup``); a null handle for ``INFO_NULL``."""
        return type(self)() if self._impl is None else self.Dup()

    def clear(self) -> None:
        """Remove every key."""
        for key in self.keys():
            self.Delete(key)

    # -- handle semantics -----------------------------------------------------------------
    def _reduce_created(self) -> Any:
        """Pickle an info object as ``Create(items)``."""
        return (type(self).Create, (self.items(),))

    def __repr__(self) -> str:
        impl = self._impl
        if impl is None:
            return "MPI.INFO_NULL"
        if impl is _ENV:
            return "MPI.INFO_ENV"
        return f"<MPI.Info {dict(impl.pairs)!r}>"


def info_items(info: Any, call: str) -> dict[str, str]:
    """The pairs of an ``info`` argument (a copy); ``INFO_NULL`` gives none.

    ``TypeError`` when ``info`` is not an ``MPI.Info``.
    """
    if not isinstance(info, Info):
        raise TypeError(f"{call}: info must be an MPI.Info, not {type(info).__name__}")
    return {} if info._impl is None else dict(info._live(call).pairs)


def new_info(pairs: Mapping[str, str]) -> Info:
    """A new ``Info`` holding ``pairs`` (what ``Get_info`` calls return)."""
    return Info._of(dict(pairs))


def Get_hw_resource_info() -> Info:
    """The hardware this process runs on, as a new ``Info`` (MPI 4.1).

    The standard leaves the keys to the implementation; ipympi defines none (as MPICH),
    so the object is empty. ``Comm.Split_type`` takes the hardware levels it knows by name.
    """
    return new_info({})


INFO_NULL: Info = Info()
INFO_ENV: Info = object.__new__(Info)
INFO_ENV._impl = _ENV
register(globals(), __all__)  # the module's constants (see core.handle)
