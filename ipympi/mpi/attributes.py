"""Attribute caching on communicators and datatypes: keyvals, ``Set_attr``/``Get_attr``/...

Communicators (:class:`CommAttributes`) and datatypes (:class:`TypeAttributes`)
share the machinery; a keyval belongs to one object kind, and using it on the
other kind is ``ERR_KEYVAL``.

A keyval is a process-local integer naming an attribute key with its callbacks,
as in mpi4py:

* ``copy_fn(oldcomm, keyval, value)`` runs on ``Dup`` for each attribute of the
  old communicator and returns the new communicator's value; returning
  ``NotImplemented`` leaves the attribute out. ``copy_fn=None`` (or ``False``)
  never copies and ``copy_fn=True`` copies the value unchanged.
* ``delete_fn(comm, keyval, value)`` runs when the attribute goes away: ``Free``
  of the communicator, ``Delete_attr``, and ``Set_attr`` replacing a value.

A callback that raises has its traceback printed to ``sys.stderr``. As with
mpi4py on MPICH, a failing copy callback makes ``Dup`` fail (creating nothing),
and a failing delete callback makes ``Delete_attr`` fail after removing the
attribute, both with an ``MPI.Exception``: the one the callback raised, or
``ERR_OTHER`` for any other exception. ``Set_attr`` replacing a value and
``Free`` report nothing more than the traceback: the old value is replaced, the
object freed.

``Free_keyval`` invalidates the number at once (using it is ``ERR_KEYVAL``), but
attributes already set keep their callbacks until they are deleted. The
predefined attributes of ``COMM_WORLD`` (``TAG_UB``, ``HOST``, ``IO``,
``WTIME_IS_GLOBAL``, ``UNIVERSE_SIZE``, ``APPNUM``, ``LASTUSEDCODE``) can be read
but not set or deleted. ``Finalize`` deletes the attributes of ``COMM_SELF``
first, in the reverse order of setting.

Datatype attributes follow the same rules: copy callbacks run on
``Datatype.Dup`` only (``MPI_Type_dup``; no other constructor copies
attributes), delete callbacks on ``Datatype.Free``, ``Delete_attr`` and
overwrite. Predefined datatypes can carry attributes too. Datatype calls raise
their errors directly, as the rest of ``MPI.Datatype`` does.
"""

from __future__ import annotations

import itertools
import os
import sys
import traceback
from typing import TYPE_CHECKING, Any, Callable, Union

from ..core import constants as K
from ..core import errors as _errors
from ..core.errors import ERR_KEYVAL, ERR_OTHER
from ..core.errors import Exception as MPIException
from . import finalize_hooks as _finalize_hooks
from .args import c_int
from .errhandling import mpi_call, raise_through_world
from .handles import CommMixin, DatatypeMixin
from .process import PROCESS

if TYPE_CHECKING:
    from .commimpl import CommImpl
    from .datatype import Datatype, _TypeImpl

    AttrHolder = Union[CommImpl, _TypeImpl]

__all__ = [
    "CommAttributes",
    "TypeAttributes",
    "copy_attributes",
    "delete_attr",
    "delete_attributes",
    "set_attr",
]

PREDEFINED = frozenset(
    (K.TAG_UB, K.HOST, K.IO, K.WTIME_IS_GLOBAL, K.UNIVERSE_SIZE, K.APPNUM, K.LASTUSEDCODE)
)


class Keyval:
    """An attribute key: its object kind and callbacks."""

    __slots__ = ("copy_fn", "delete_fn", "kind", "nopython", "number")

    def __init__(
        self, number: int, kind: str, copy_fn: Any, delete_fn: Any, nopython: bool
    ) -> None:
        self.number = number
        self.kind = kind
        self.copy_fn = copy_fn
        self.delete_fn = delete_fn
        self.nopython = nopython


_numbers = itertools.count(0x6A000001)
_keyvals: dict[int, Keyval] = {}  # live (not freed) keyvals


def create_keyval(kind: str, copy_fn: Any, delete_fn: Any, nopython: bool) -> int:
    if copy_fn is False:
        copy_fn = None  # mpi4py: False and None both mean "never copy"
    number = next(_numbers)
    _keyvals[number] = Keyval(number, kind, copy_fn, delete_fn, bool(nopython))
    return number


def lookup(kind: str, keyval: Any, call: str) -> Keyval:
    """The live keyval ``keyval`` of object kind ``kind``, or ``ERR_KEYVAL``."""
    keyval = c_int(keyval)  # as mpi4py converts it: a float works, a str is a TypeError
    kv = _keyvals.get(keyval)
    if kv is None:
        if keyval == K.KEYVAL_INVALID:
            raise MPIException(ERR_KEYVAL, f"{call}: KEYVAL_INVALID is not a valid key")
        if keyval in PREDEFINED and kind != "comm":
            raise MPIException(
                ERR_KEYVAL, f"{call}: attribute key {keyval} is a comm key, not a {kind} key"
            )
        if keyval in PREDEFINED:
            raise MPIException(
                ERR_KEYVAL, f"{call}: predefined attribute {keyval} cannot be set or deleted"
            )
        raise MPIException(ERR_KEYVAL, f"{call}: invalid attribute key {keyval!r}")
    if kv.kind != kind:
        raise MPIException(
            ERR_KEYVAL, f"{call}: attribute key {keyval} is a {kv.kind} key, not a {kind} key"
        )
    return kv


def free_keyval(kind: str, keyval: Any) -> int:
    kv = lookup(kind, keyval, "Free_keyval")
    del _keyvals[kv.number]  # attributes already set keep the Keyval object
    return K.KEYVAL_INVALID


def _callback_error(call: str, what: str, kv: Keyval, exc: BaseException) -> MPIException:
    """The error of a call whose callback raised ``exc``; its traceback goes to stderr."""
    traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
    if isinstance(exc, MPIException):
        return exc
    error = MPIException(
        ERR_OTHER,
        f"{call}: the {what} callback of attribute key {kv.number} raised "
        f"{type(exc).__name__}: {exc}",
    )
    error.__cause__ = exc
    return error


def _run_delete(obj: Any, kv: Keyval, value: Any, call: str) -> None:
    fn = kv.delete_fn
    if fn is None:
        return
    try:
        fn(obj, kv.number, value)
    except Exception as exc:
        raise _callback_error(call, "delete", kv, exc) from exc


def _quiet_delete(obj: Any, kv: Keyval, value: Any, call: str) -> None:
    """Run a delete callback whose failure only gets its traceback printed."""
    try:
        _run_delete(obj, kv, value, call)
    except MPIException:
        pass


def copy_attributes(oldcomm: Any, old: AttrHolder, new: AttrHolder, call: str) -> None:
    """Run the copy callbacks of ``old``'s attributes (for ``Dup``) into ``new``.

    On failure the attributes already copied are deleted again (with their
    delete callbacks) and the error is raised.
    """
    for number, (kv, value) in list(old.attrs.items()):
        fn = kv.copy_fn
        if fn is None:
            continue
        if fn is True:
            new.attrs[number] = (kv, value)
            continue
        try:
            result = fn(oldcomm, number, value)
        except Exception as exc:
            error = _callback_error(call, "copy", kv, exc)
            newcomm = type(oldcomm)._from_impl(new)
            for kv2, value2 in reversed(list(new.attrs.values())):
                _quiet_delete(newcomm, kv2, value2, call)
            new.attrs.clear()
            raise error from exc
        if result is not NotImplemented:
            new.attrs[number] = (kv, result)


def delete_attributes(obj: Any, impl: AttrHolder, call: str) -> None:
    """Delete every attribute of ``impl`` (last set first), running delete callbacks,
    for a ``Free``: a failing callback is reported on stderr and the rest still run."""
    while impl.attrs:
        number = next(reversed(impl.attrs))
        kv, value = impl.attrs.pop(number)
        _quiet_delete(obj, kv, value, call)


def _predefined_value(impl: CommImpl, keyval: int) -> tuple[bool, Any]:
    """(True, value) for a predefined attribute of ``impl``, else (False, None)."""
    if not _is_world(impl):
        return False, None
    if keyval == K.LASTUSEDCODE:
        return True, _errors.last_used_code()
    values = {
        K.TAG_UB: K.TAG_UB_VALUE,
        K.HOST: K.PROC_NULL,
        K.IO: K.ANY_SOURCE,
        K.WTIME_IS_GLOBAL: 0,
        K.UNIVERSE_SIZE: PROCESS.universe_size or max(impl.size, os.cpu_count() or 1),
        K.APPNUM: PROCESS.appnum,
    }
    if keyval in values:
        return True, values[keyval]
    return False, None


def _is_world(impl: CommImpl) -> bool:
    return PROCESS.world is not None and impl is PROCESS.world._impl


class CommAttributes(CommMixin):
    """Attribute caching methods of ``MPI.Comm``."""

    __slots__ = ()

    @classmethod
    def Create_keyval(
        cls,
        copy_fn: Callable[[Any, int, Any], Any] | None = None,
        delete_fn: Callable[[Any, int, Any], None] | None = None,
        nopython: bool = False,
    ) -> int:
        """A new attribute key for communicators, with its copy and delete callbacks."""
        return _world_call("Create_keyval", create_keyval, "comm", copy_fn, delete_fn, nopython)

    @classmethod
    def Free_keyval(cls, keyval: int) -> int:
        """Free an attribute key; returns ``KEYVAL_INVALID``."""
        return _world_call("Free_keyval", free_keyval, "comm", keyval)

    @mpi_call
    def Set_attr(self, keyval: int, attrval: Any) -> None:
        """Attach ``attrval`` under ``keyval``, deleting any value already there first."""
        set_attr(self, self._live(), "comm", keyval, attrval)

    @mpi_call
    def Get_attr(self, keyval: int) -> Any:
        """Value of attribute ``keyval``, or ``None`` when it is not set."""
        impl = self._live()
        keyval = c_int(keyval)
        if keyval in PREDEFINED:
            return _predefined_value(impl, keyval)[1]
        kv = lookup("comm", keyval, "Get_attr")
        entry = impl.attrs.get(kv.number)
        return None if entry is None else entry[1]

    @mpi_call
    def Delete_attr(self, keyval: int) -> None:
        """Remove attribute ``keyval`` (running its delete callback); absent is fine."""
        delete_attr(self, self._live(), "comm", keyval)


def set_attr(obj: Any, impl: AttrHolder, kind: str, keyval: Any, attrval: Any) -> None:
    """``Set_attr`` of ``keyval`` (of object kind ``kind``) on ``impl``."""
    kv = lookup(kind, keyval, "Set_attr")
    old = impl.attrs.pop(kv.number, None)  # re-set: it becomes the last one set
    impl.attrs[kv.number] = (kv, attrval)
    if old is not None:
        _quiet_delete(obj, old[0], old[1], "Set_attr")


def delete_attr(obj: Any, impl: AttrHolder, kind: str, keyval: Any) -> None:
    """``Delete_attr`` of ``keyval`` on ``impl``, running its delete callback."""
    kv = lookup(kind, keyval, "Delete_attr")
    entry = impl.attrs.pop(kv.number, None)
    if entry is not None:
        _run_delete(obj, entry[0], entry[1], "Delete_attr")


class TypeAttributes(DatatypeMixin):
    """Attribute caching methods of ``MPI.Datatype`` (and its ``Dup`` copying them)."""

    __slots__ = ()

    @classmethod
    def Create_keyval(
        cls,
        copy_fn: Callable[[Any, int, Any], Any] | None = None,
        delete_fn: Callable[[Any, int, Any], None] | None = None,
        nopython: bool = False,
    ) -> int:
        """A new attribute key for datatypes, with its copy and delete callbacks."""
        return _world_call("Create_keyval", create_keyval, "type", copy_fn, delete_fn, nopython)

    @classmethod
    def Free_keyval(cls, keyval: int) -> int:
        """Free a datatype attribute key; returns ``KEYVAL_INVALID``."""
        return _world_call("Free_keyval", free_keyval, "type", keyval)

    def Set_attr(self, keyval: int, attrval: Any) -> None:
        """Attach ``attrval`` under ``keyval``, deleting any value already there first."""
        set_attr(self, self._live(), "type", keyval, attrval)

    def Get_attr(self, keyval: int) -> Any:
        """Value of attribute ``keyval``, or ``None`` when it is not set."""
        impl = self._live()
        entry = impl.attrs.get(lookup("type", keyval, "Get_attr").number)
        return None if entry is None else entry[1]

    def Delete_attr(self, keyval: int) -> None:
        """Remove attribute ``keyval`` (running its delete callback); absent is fine."""
        delete_attr(self, self._live(), "type", keyval)

    def Dup(self) -> Datatype:
        """Return a new datatype with the same type map (combiner ``COMBINER_DUP``).

        The copy callbacks of this datatype's attributes decide the new one's.
        """
        impl = self._live()
        new = self._from_impl(impl.duplicate())
        copy_attributes(self, impl, new._impl, "Dup")
        return new

    Create_dup = Dup


def _world_call(call: str, fn: Callable[..., Any], *args: Any) -> Any:
    """Run a call not tied to a communicator; errors go through COMM_WORLD's handler."""
    try:
        return fn(*args)
    except MPIException as exc:
        raise_through_world(exc, call)


def _free_self_attributes() -> None:
    """At ``Finalize``: delete ``COMM_SELF``'s attributes, last set first."""
    comm = PROCESS.self_comm
    impl = comm._impl if comm is not None else None
    if impl is not None:
        delete_attributes(comm, impl, "Finalize")


_finalize_hooks.register(_free_self_attributes)
