"""What the mixins of the handle classes use of the handle they are part of, as Protocols.

``MPI.Comm`` and its subclasses are assembled from mixins in several modules (point to
point, collectives, constructors, attributes, ...), as ``MPI.Datatype`` is (lookups,
derived datatypes, attributes). A mixin calls a few methods of the handle it ends up in,
or of a sibling mixin. The protocols here declare those once: a mixin derives from
:data:`CommMixin` (or one of the narrower ones, or :data:`DatatypeMixin`), which is the
protocol for the type checker and plain ``object`` at run time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NoReturn, Protocol

from ..core.modes import Form

if TYPE_CHECKING:
    from ..core import typemap as tm
    from ..core.errors import Exception as MPIException
    from ..core.modes import SendMode
    from ..progress.operation import Operation
    from .comm import Comm
    from .commimpl import CommImpl
    from .datatype import Datatype, _TypeImpl

__all__ = [
    "CollectiveHandle",
    "CommHandle",
    "DatatypeHandle",
    "InterHandle",
    "PointToPointHandle",
]


class CommHandle(Protocol):
    """A communicator handle: its state, its error handler, new handles of its class."""

    _impl: CommImpl | None  # its state (None: a null or freed handle; see ``_live``)

    def _live(self) -> CommImpl: ...

    def _raise(self, exc: MPIException, call: str, code: int | None = None) -> NoReturn: ...

    @classmethod
    def _from_impl(cls, impl: CommImpl | None, label: str = "") -> Comm: ...


class PointToPointHandle(CommHandle, Protocol):
    """... whose point-to-point mixin starts sends and receives (for ``Sendrecv``)."""

    def _send_checked(self, call: str, dest: Any, tag: Any) -> tuple[CommImpl, int, int]: ...

    def _recv_checked(self, call: str, source: Any, tag: Any) -> tuple[CommImpl, int, int]: ...

    def _start_send(
        self, impl: CommImpl, call: str, mem: Any, dest: int, tag: int, mode: SendMode
    ) -> Operation: ...

    def _start_recv(
        self, impl: CommImpl, call: str, mem: Any, source: int, tag: int, unpack: Any = None
    ) -> Operation: ...


class CollectiveHandle(CommHandle, Protocol):
    """... whose collectives mixin runs collectives (for the reductions)."""

    def _check_root(self, impl: CommImpl, root: Any, call: str) -> int: ...

    def _collective(self, call: str, kind: str, root: int, plan: Any, mode: Form) -> Any: ...

    def allgather(self, sendobj: Any) -> list[Any]: ...


class InterHandle(CommHandle, Protocol):
    """An intercommunicator handle (for its collectives)."""

    def Get_remote_size(self) -> int: ...


class DatatypeHandle(Protocol):
    """A datatype handle: its typemap, and new handles of its class."""

    _impl: _TypeImpl

    def _live(self) -> _TypeImpl: ...

    @classmethod
    def _from_impl(cls, impl: _TypeImpl) -> Datatype: ...

    @classmethod
    def _handle(cls, impl: _TypeImpl) -> Datatype: ...

    @classmethod
    def _derive(cls, layout: tm.Layout, combiner: int, contents: Any) -> Datatype: ...


if TYPE_CHECKING:
    CommMixin = CommHandle
    PointToPointMixin = PointToPointHandle
    CollectiveMixin = CollectiveHandle
    InterMixin = InterHandle
    DatatypeMixin = DatatypeHandle
else:
    CommMixin = PointToPointMixin = CollectiveMixin = InterMixin = DatatypeMixin = object
