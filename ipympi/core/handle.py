"""The object model shared by the MPI handle classes (``Comm``, ``Datatype``, ``Op``, ...).

An MPI object (a communicator, a datatype, ...) is an implementation object, its
*target*; Python handles point at targets, as C handles do. What this module gives
every handle class, with mpi4py's semantics:

* construction: ``Cls()`` is a null handle and ``Cls(other)`` a new handle to the
  object ``other`` refers to; the work is done in ``__new__`` (there is no
  ``__init__``), so a subclass may define ``__new__(cls, obj=None)`` and pass
  anything it likes to ``super().__new__(cls, obj)``. A handle of another kind,
  or one whose object is not of the class's sort (``Intercomm(COMM_WORLD)``),
  is a ``TypeError``;
* identity: two handles are equal when they refer to the same object, a null
  handle is false, and handles are unhashable and unordered (``Free`` changes
  what a handle refers to);
* handle numbers: ``handle``, ``toint()`` and ``py2f()`` give an integer naming
  the object within this process, and ``fromhandle``/``fromint``/``f2py`` turn it
  back into a handle (see below);
* freeing: ``free()`` frees what the program created, drops a handle to a
  predefined object, and leaves the module's constants (``MPI.INT``) alone;
* pickling: a constant pickles as its name and unpickles as the same object; a
  handle to a predefined object as a new handle to it; objects the program
  created as their constructor's arguments where that is meaningful (each class's
  ``_reduce_created``), else ``ValueError``.

Handle numbers are laid out as in MPICH: ``kind << 26 | index``, the kind being
that of the class's :class:`Kind` (Comm 1, Group 2, Datatype 3, File 4,
Errhandler 5, Op 6, Info 7, Win 8, Request 11, Message 12, Session 14). Index 0
is the null handle, the predefined objects take 1, 2, ... as their modules
register them (so ``COMM_WORLD``'s number is the same in every process and
run), and other objects get the next free index when their number is first
asked for. Numbers fit in a C ``int``, as Fortran handles must. A number
maps back to its object only while that object is alive.
"""

from __future__ import annotations

import copyreg
import threading
import weakref
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, cast

from .errors import Exception as MPIException

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = ["HANDLE_SIZE", "Handle", "Kind", "UserLimit", "constant", "register"]

_SHIFT = 26
_INDEX_LIMIT = 1 << _SHIFT
HANDLE_SIZE = 4  # bytes of a handle number in C (an int, as in MPICH)

# id() of each constant handle object -> its name in the MPI module. Constants are
# never freed, so their ids stay theirs.
_CONSTANT_NAMES: dict[int, str] = {}
# ... and the other way round: the constant each name stands for (how they are unpickled).
_CONSTANTS: dict[str, Any] = {}

# The classes this package defines (not the program's subclasses of them).
_MPI_CLASSES: set[type] = set()


class Kind:
    """One kind of MPI object (communicators, datatypes, ...) and its handle numbers.

    ``null`` is what a null handle of the kind refers to; ``error`` the error class
    of an invalid handle (``ERR_COMM``, ...). The kind keeps the predefined objects'
    constant handles, and weak maps between the other objects and their numbers.
    """

    def __init__(self, name: str, tag: int, error: int, null: Any) -> None:
        self.name = name
        self.tag = tag
        self.error = error
        self.null = null
        self.constants: dict[int, Handle] = {}  # number -> constant handle
        self._lock = threading.Lock()
        self._next = 1
        self._targets: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
        self._numbers: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()

    def _add_constant(self, handle: Handle, null: bool) -> None:
        if null:
            self.constants[self.tag << _SHIFT] = handle
            return
        if any(c is handle for c in self.constants.values()):
            return  # an alias (MPI.SIGNED_INT is MPI.INT)
        with self._lock:
            self.constants[self.tag << _SHIFT | self._next] = handle
            self._next += 1

    def _predefined(self, target: Any) -> tuple[int, Handle] | None:
        """``(number, constant handle)`` of the predefined object ``target``, or ``None``.

        Looked up each time: ``COMM_WORLD``'s object changes at ``Init``.
        """
        for number, handle in self.constants.items():
            if handle._target() is target:
                return number, handle
        return None

    def constant_for(self, target: Any) -> Handle | None:
        """The constant handle of the predefined object ``target``, or ``None``."""
        found = self._predefined(target)
        return None if found is None else found[1]

    def number(self, target: Any) -> int:
        """The handle number of ``target``, assigning one on first use."""
        if target is self.null:
            return self.tag << _SHIFT
        found = self._predefined(target)
        if found is not None:
            return found[0]
        with self._lock:
            number = self._numbers.get(target)
            if number is None:
                if self._next >= _INDEX_LIMIT:
                    raise RuntimeError(f"no {self.name} handle numbers left in this process")
                number = self.tag << _SHIFT | self._next
                self._next += 1
                self._numbers[target] = number
                self._targets[number] = target
            return number

    def target(self, number: Any) -> Any:
        """The object named by handle number ``number``.

        Raises ``TypeError`` for a non-integer and ``MPI.Exception`` (the kind's
        error class) for a number that names no live object of this kind.
        """
        if not isinstance(number, int) or isinstance(number, bool):
            raise TypeError(f"a handle number must be an int, not {type(number).__name__}")
        if number == self.tag << _SHIFT:
            return self.null
        constant = self.constants.get(number)
        if constant is not None:
            return constant._target()
        found = self._targets.get(number)
        if found is None:
            raise MPIException(
                self.error, f"{number:#x} is not the handle of a live MPI.{self.name} object"
            )
        return found


class Handle:
    """Base of the MPI handle classes: construction, identity, numbers, freeing, pickling.

    A subclass sets ``_mpi_kind`` (its :class:`Kind`) and, when its handle state is
    not one ``_impl`` slot, overrides :meth:`_target`, :meth:`_become` and :meth:`_copy`.
    """

    __slots__ = ("__weakref__",)
    _mpi_kind: ClassVar[Kind]
    _impl: Any

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__module__.startswith(("ipympi.core.", "ipympi.mpi.")):  # the MPI objects' layers
            _MPI_CLASSES.add(cls)

    def __new__(cls, obj: Any = None) -> Self:
        self = object.__new__(cls)
        if obj is None:
            self._become(cls._mpi_kind.null)
            return self
        if not isinstance(obj, Handle) or obj._mpi_kind is not cls._mpi_kind:
            raise TypeError(f"expected an MPI.{cls._mpi_kind.name}, got {type(obj).__name__}")
        target = obj._target()
        if target is not cls._mpi_kind.null:
            natural = cls._class_for(target)
            if not issubclass(natural, mpi_class(cls)):
                wanted = mpi_class(cls).__name__
                raise TypeError(f"{obj!r} cannot be viewed as MPI.{wanted}")
        self._copy(obj)
        return self

    # -- what subclasses may override ---------------------------------------------------
    def _target(self) -> Any:
        """The object this handle refers to (the kind's ``null`` for a null handle)."""
        return self._impl

    def _become(self, target: Any) -> None:
        """Point this handle at ``target``."""
        self._impl = target

    def _copy(self, other: Handle) -> None:
        """Point this handle where ``other`` points (also copying any per-handle state)."""
        self._become(other._target())

    @classmethod
    def _class_for(cls, target: Any) -> type:
        """The class of this package that handles to the (non-null) object ``target``
        have: ``fromhandle`` makes one, and ``Cls(handle)`` needs ``Cls`` to be it or
        one of its bases. By default the package's class of ``cls``."""
        return mpi_class(cls)

    def _is_predefined(self) -> bool:
        """Whether the object is one MPI provides rather than one the program created."""
        return self._mpi_kind.constant_for(self._target()) is not None

    def _reduce_created(self) -> Any:
        """``__reduce__`` of an object the program created; by default it cannot be."""
        raise ValueError(f"cannot serialize {self!r}: MPI.{self._mpi_kind.name} objects are local")

    # -- identity -----------------------------------------------------------------------
    __hash__ = None  # type: ignore[assignment]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Handle) or other._mpi_kind is not self._mpi_kind:
            return NotImplemented
        return self._target() is other._target()

    def __ne__(self, other: object) -> bool:
        if not isinstance(other, Handle) or other._mpi_kind is not self._mpi_kind:
            return NotImplemented
        return self._target() is not other._target()

    def __bool__(self) -> bool:
        return self._target() is not self._mpi_kind.null

    def _drop(self) -> None:
        """Make this handle null, unless it is one of the module's constants."""
        if id(self) not in _CONSTANT_NAMES:
            self._become(self._mpi_kind.null)

    # -- handle numbers -----------------------------------------------------------------
    @property
    def handle(self) -> int:
        """The handle number: an integer naming the object within this process."""
        return self._mpi_kind.number(self._target())

    def toint(self) -> int:
        """The handle number as a C integer (the same as :attr:`handle`)."""
        return self.handle

    def py2f(self) -> int:
        """The Fortran handle (the same integer as :attr:`handle`, as in MPICH)."""
        return self.handle

    @classmethod
    def fromhandle(cls, handle: int) -> Self:
        """A new handle to the object whose handle number is ``handle``."""
        target = cls._mpi_kind.target(handle)
        # as in mpi4py, a class of this package, not the program's subclass; the one
        # the object needs (``Comm.fromhandle(COMM_WORLD.handle)`` is an ``Intracomm``)
        null = target is cls._mpi_kind.null
        obj: Handle = object.__new__(mpi_class(cls) if null else cls._class_for(target))
        obj._become(target)
        return cast("Self", obj)

    @classmethod
    def fromint(cls, arg: int) -> Self:
        """A new handle from a C integer handle (see :meth:`fromhandle`)."""
        return cls.fromhandle(arg)

    @classmethod
    def f2py(cls, arg: int) -> Self:
        """A new handle from a Fortran handle (see :meth:`fromhandle`)."""
        return cls.fromhandle(arg)

    # -- freeing ------------------------------------------------------------------------
    def free(self) -> None:
        """Call ``Free()`` if the program created the object; otherwise null this handle.

        Null handles and the module's constants are left as they are.
        """
        if id(self) in _CONSTANT_NAMES or not self:
            return
        if self._is_predefined():
            self._become(self._mpi_kind.null)
        else:
            self.Free()  # type: ignore[attr-defined]

    # -- pickling -----------------------------------------------------------------------
    def __reduce__(self) -> Any:
        name = _CONSTANT_NAMES.get(id(self))
        if name is not None:
            return (constant, (name,))
        predefined = self._mpi_kind.constant_for(self._target())
        if predefined is not None:
            return (copyreg.__newobj__, (type(self), predefined))  # type: ignore[attr-defined]
        return self._reduce_created()


def mpi_class(cls: type) -> type:
    """The class of this package that ``cls`` is, or derives from."""
    return next(c for c in cls.__mro__ if c in _MPI_CLASSES)


def constant(name: str) -> Any:
    """The ``MPI`` module's constant called ``name`` (how constants are unpickled)."""
    return _CONSTANTS[name]


def register(namespace: Mapping[str, Any], names: Iterable[str]) -> None:
    """Record the handles among ``namespace[name]`` as constants of the ``MPI`` module
    (each module defining some calls this once they exist).

    In the order given, each distinct handle gets its kind's next fixed number
    (``*_NULL`` names the null handle, number index 0) and keeps its first name.
    """
    for name in names:
        value = namespace[name]
        if isinstance(value, Handle) and id(value) not in _CONSTANT_NAMES:
            _CONSTANT_NAMES[id(value)] = name
            _CONSTANTS[name] = value
            value._mpi_kind._add_constant(value, null=name.endswith("_NULL"))


class UserLimit:
    """At most ``limit`` live user-defined objects of one sort, as in mpi4py.

    mpi4py keeps user-defined reduction operations and error handlers in tables of
    32 slots and raises ``RuntimeError`` past that; the same limit here makes a
    program that leaks them fail here as it would with mpi4py. An object's slot is
    given back when it is freed or garbage-collected.
    """

    def __init__(self, limit: int, what: str) -> None:
        self.limit = limit
        self.what = what
        self._live: weakref.WeakSet[Any] = weakref.WeakSet()
        self._lock = threading.Lock()

    def take(self, obj: Any) -> None:
        """Count ``obj`` as live; ``RuntimeError`` when ``limit`` objects already are."""
        with self._lock:
            if len(self._live) >= self.limit:
                raise RuntimeError(
                    f"cannot create too many user-defined {self.what} (at most {self.limit} "
                    "at once, as with mpi4py); free the ones no longer needed"
                )
            self._live.add(obj)

    def give_back(self, obj: Any) -> None:
        """``obj`` was freed: its slot is free again."""
        with self._lock:
            self._live.discard(obj)
