"""The state behind communicator handles, and the handle classes by name.

:class:`CommImpl` is what a communicator is (its context, members, error handler,
attributes, hints); :class:`TopoImpl` adds a topology. Handles (``MPI.Comm`` and its
subclasses) point at one.

The handle classes are made of the constructors' mixins (``Dup``, ``Split``,
``Create_cart``, ...), and those constructors must build handles of these very classes.
So the classes register here as they are defined (:func:`handle_class`), and the
constructors find them with :func:`comm_class` and :func:`topocomm_class`, importing
only this module; a class whose module was not imported yet (``MPI.Cartcomm``'s, when a
program's first topology is made before the name was ever used) is imported then.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, TypeVar

from ..core import constants as K

if TYPE_CHECKING:
    from .comm import Comm

__all__ = ["CommImpl", "TopoImpl", "comm_class", "handle_class", "topocomm_class"]

T = TypeVar("T", bound=type)

_CLASSES: dict[str, Any] = {}
_TOPOLOGY_CLASSES = {K.CART: "Cartcomm", K.GRAPH: "Graphcomm", K.DIST_GRAPH: "Distgraphcomm"}
# The module defining each handle class (the chapter MPI imports when the name is used).
_MODULES = dict.fromkeys(("Topocomm", *_TOPOLOGY_CLASSES.values()), ".neighbor")


def handle_class(cls: T) -> T:
    """Class decorator: record ``cls``, a communicator handle class of ipympi, by name."""
    _CLASSES[cls.__name__] = cls
    return cls


def comm_class(name: str) -> type[Comm]:
    """The communicator handle class called ``name`` (``"Intracomm"``, ``"Intercomm"``, ...)."""
    found = _CLASSES.get(name)
    if found is None:
        importlib.import_module(_MODULES.get(name, ".comm"), __package__)
        found = _CLASSES[name]
    return found


def topocomm_class(kind: int) -> type[Comm]:
    """The handle class of a topology kind (``CART``: ``Cartcomm``, ...)."""
    return comm_class(_TOPOLOGY_CLASSES[kind])


class CommImpl:
    """The state behind a communicator handle."""

    __slots__ = (
        "__weakref__",
        "attrs",
        "bsend",
        "context",
        "engine",
        "errhandler",
        "info",
        "lane",
        "locks",
        "name",
        "predefined",
        "rank",
        "remote_world_ranks",
        "size",
        "world_ranks",
    )

    def __init__(
        self,
        engine: Any,
        context: int,
        world_ranks: list[int],
        rank: int,
        name: str,
        errhandler: Any,
        predefined: bool = False,
    ) -> None:
        self.engine = engine
        self.context = context  # point-to-point context; context + 1 is collective
        self.world_ranks = world_ranks  # comm rank -> world rank (local group)
        self.remote_world_ranks = world_ranks  # differs for intercommunicators
        self.rank = rank
        self.size = len(world_ranks)
        self.name = name
        self.errhandler = errhandler
        self.predefined = predefined
        # keyval -> (Keyval, value), in the order set (see mpi.attributes)
        self.attrs: dict[int, tuple[Any, Any]] = {}
        self.lane: Any = None  # the straight path's view of it (``mpi.coll.fast.Lane``)
        self.bsend: Any = None  # its own buffer for buffered sends (``mpi.bsend.Pool``)
        self.info: dict[str, str] = {}  # hints (``Set_info``; see ``mpi.commcreate.hints_of``)
        self.locks: Any = None  # mpi4py's lock table, once asked for (``commlock``)

    @property
    def label(self) -> str:
        """The name for messages: ``Get_name``, or what the communicator is when unnamed."""
        if self.name:
            return self.name
        if self.remote_world_ranks is not self.world_ranks:
            return f"an unnamed intercommunicator ({self.size} local ranks)"
        return f"an unnamed communicator ({self.size} ranks)"


class TopoImpl(CommImpl):
    """The state of a communicator that may carry a topology (``None``: none)."""

    __slots__ = ("topo",)

    def __init__(self, *args: Any, topo: Any = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.topo = topo
