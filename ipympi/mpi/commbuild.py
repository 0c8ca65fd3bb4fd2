"""What every communicator constructor does: agree on a context, make the new state.

The constructors (``commcreate``: ``Dup``/``Split``/...; ``groupcreate``:
``Create_group``/``Create_from_group``; ``intercomm``; ``topology`` and ``neighbor``:
``Create_cart``/``Sub``/...) share these steps: an allgather of Python objects on the
parent's collective context, the choice of a context id from every member's
contribution (:mod:`ipympi.core.contexts`), the new :class:`~.commimpl.CommImpl` with
the parent's error handler, the hints of an ``MPI.Info``, and waiting for a
communicator's pending operations (``Disconnect``, ``Free``).
"""

from __future__ import annotations

import pickle
from typing import Any

from ..core import algorithms as algo
from ..core import contexts as ctx
from ..core.errors import ERR_OTHER
from ..core.errors import Exception as MPIException
from ..core.modes import BLOCKING
from ..progress.engine import WaitInfo
from .coll.intra import Collectives
from .commimpl import CommImpl, comm_class
from .errhandling import Errhandler
from .info import info_items

__all__ = [
    "agree",
    "allgather",
    "hints_of",
    "intracomm",
    "new_impl",
    "new_inter_impl",
    "null",
    "wait_pending",
]


def new_impl(parent: CommImpl, context: int, world_ranks: list[int]) -> CommImpl:
    """The state of a new communicator of ``parent``'s process on ``context``."""
    me = parent.world_ranks[parent.rank]
    impl = type(parent)(
        parent.engine,
        context,
        list(world_ranks),
        world_ranks.index(me),
        "",
        Errhandler(parent.errhandler),
    )
    return impl


def new_inter_impl(
    parent: CommImpl, context: int, base: Any, local: list[int], remote: list[int]
) -> CommImpl:
    """The state of a new intercommunicator of ``parent``'s process: the agreed
    ``context`` installed (its collectives numbered from ``base``), the world ranks of
    its ``local`` and ``remote`` groups."""
    impl = new_impl(parent, context, local)
    impl.remote_world_ranks = list(remote)
    ctx.install(parent.engine, context, base)
    return impl


def allgather(comm: Any, call: str, obj: Any) -> list[Any]:
    """Allgather of Python objects on ``comm``'s collective context, named ``call``."""
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)

    def plan(rank: int, size: int) -> tuple[Any, None]:
        return algo.allgather_objects(rank, size, data), None

    # unbound: a plain ``MPI.Comm`` handle on an intracommunicator works too
    wires = Collectives._collective(comm, call, "allgather", 0, plan, BLOCKING)
    return [pickle.loads(w) for w in wires]


def hints_of(info: Any, call: str) -> dict[str, str]:
    """The hints of an ``MPI.Info`` as a plain dict (``None`` and ``INFO_NULL``: none).

    Communicators keep their hints in this form; ``Get_info`` hands them back as a
    new ``MPI.Info`` (:func:`ipympi.mpi.info.new_info`).
    """
    return {} if info is None else info_items(info, call)


def agree(parts: list[ctx.Contribution], call: str) -> tuple[int, int]:
    try:
        return ctx.choose(parts)
    except OverflowError as exc:
        raise MPIException(ERR_OTHER, f"{call}: too many communicators in use") from exc


def wait_pending(impl: CommImpl, call: str) -> None:
    """Wait until no operation on communicator ``impl`` is in progress (``Disconnect``)."""
    engine = impl.engine

    def settled() -> bool:
        return not any(
            getattr(getattr(op, "comm", None), "_impl", None) is impl for op in engine.operations()
        )

    engine.enter()
    try:
        if not settled():
            engine.wait_until(settled, lambda: WaitInfo(call, impl.label, -1, -1))
    finally:
        engine.leave()


def intracomm(impl: CommImpl | None) -> Any:
    return comm_class("Intracomm")._from_impl(impl, "" if impl is not None else "COMM_NULL")


def null() -> Any:
    """``COMM_NULL``, as an ``Intracomm`` handle (what mpi4py's constructors return)."""
    return intracomm(None)
