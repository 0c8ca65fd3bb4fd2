"""Communicator constructors and comparison: ``Dup``, ``Create``, ``Split``, ``Create_group``.

Every constructor agrees on a new context id among the processes that will
share it (see :mod:`ipympi.core.contexts`): ``Dup``, ``Idup``, ``Create``, ``Split``
and ``Split_type`` in one ``allgather`` over the parent communicator, which also
carries the colors and keys of ``Split``; ``Create_group``, collective only over
the new group, with point-to-point messages among the group's members on the
parent's internal context (the leader, the group's rank 0, gathers the
contributions and answers with the result).

A new communicator inherits its parent's error handler, has no name (``""``),
and has no attributes, except that ``Dup`` and ``Idup`` run the copy callbacks.

``Idup`` (intra- and intercommunicators) is truly nonblocking: it starts the
agreement as a nonblocking collective (the protocol for agreements in progress
at the same time is in :mod:`ipympi.core.contexts`) and returns the new handle with
the request; the communicator becomes usable when the request completes, and
using it earlier raises ``ERR_COMM``. As the standard puts it, ``Idup`` behaves
as if ``Dup`` ran at the call: the copy callbacks run then, in the calling
thread, on the attributes as they are at that moment.
"""

from __future__ import annotations

import pickle
from typing import TYPE_CHECKING, Any, cast

from ..core import algorithms as algo
from ..core import constants as K
from ..core import contexts as ctx
from ..core.errors import ERR_ARG, ERR_COMM
from ..core.errors import Exception as MPIException
from ..core.modes import NONBLOCKING
from ..core.schedule import signature
from . import commbuild as cb
from .args import c_int
from .attributes import copy_attributes, delete_attributes
from .coll.inter_core import InterCollOp, layout
from .coll.runner import CollOp, check_reported
from .commimpl import comm_class
from .errhandling import mpi_call
from .group import Group
from .groupcreate import GroupConstructors, subgroup_ranks
from .handles import CommMixin
from .info import new_info
from .intercomm import create_intercomm
from .process import PROCESS
from .request import Request

if TYPE_CHECKING:
    from typing_extensions import Self

    from .comm import Comm
    from .commimpl import CommImpl
    from .group import Group
    from .info import Info
    from .request import Request

__all__ = ["CommConstructors", "IntraConstructors"]

HW_RESOURCE_TYPE = "mpi_hw_resource_type"  # the info key of the guided split types
SHARED_MEMORY = "mpi_shared_memory"  # its value for the level of a host's shared memory
SPLIT_TYPES = (
    K.COMM_TYPE_SHARED,
    K.COMM_TYPE_HW_GUIDED,
    K.COMM_TYPE_HW_UNGUIDED,
    K.COMM_TYPE_RESOURCE_GUIDED,
)


class CommConstructors(CommMixin):
    """Constructors, group access and comparison of ``MPI.Comm``."""

    __slots__ = ()

    # -- groups and comparison ---------------------------------------------------------
    @mpi_call
    def Get_group(self) -> Group:
        """The group of the communicator (the local group of an intercommunicator)."""

        return Group._from_ranks(self._live().world_ranks)

    @property
    def group(self) -> Group:
        return self.Get_group()

    @mpi_call
    def Compare(self, comm: Any) -> int:
        """``IDENT``, ``CONGRUENT``, ``SIMILAR`` or ``UNEQUAL``."""
        Comm = comm_class("Comm")

        mine = self._live()
        if not isinstance(comm, Comm):
            raise MPIException(ERR_COMM, f"Compare: {comm!r} is not a communicator")
        other = comm._live()
        if mine is other:
            return K.IDENT
        if self.Is_inter() != comm.Is_inter():  # type: ignore[attr-defined]
            return K.UNEQUAL
        pairs = [(mine.world_ranks, other.world_ranks)]
        if self.Is_inter():  # type: ignore[attr-defined]
            pairs.append((mine.remote_world_ranks, other.remote_world_ranks))
        if all(list(a) == list(b) for a, b in pairs):
            return K.CONGRUENT
        if all(sorted(a) == sorted(b) for a, b in pairs):
            return K.SIMILAR
        return K.UNEQUAL

    # -- duplication -------------------------------------------------------------------
    def _dup(self, call: str) -> Comm:
        impl = self._intra(call)
        parts = cb.allgather(self, call, ctx.contribution(impl.engine))
        context, base = cb.agree(parts, call)
        new = cb.new_impl(impl, context, impl.world_ranks)
        if getattr(impl, "topo", None) is not None:
            new.topo = impl.topo  # type: ignore[attr-defined]  # a Dup keeps the topology
        ctx.install(impl.engine, context, base)
        try:
            copy_attributes(self, impl, new, call)
        except BaseException:
            ctx.release(impl.engine, context)
            raise
        return type(self)._from_impl(new)

    def _hints_for(self, info: Any, call: str) -> dict[str, str]:
        return dict(self._live().info) if info is None else cb.hints_of(info, call)

    @mpi_call
    def Dup(self, info: Info | None = None) -> Self:
        """A new communicator with the same group, a new context and copied attributes.

        It keeps this communicator's hints, or takes those of ``info`` if given.
        """
        hints = self._hints_for(info, "Dup")
        comm = self._dup("Dup")
        comm._impl.info = hints  # type: ignore[union-attr]
        return cast("Self", comm)  # a communicator of this one's kind

    @mpi_call
    def Dup_with_info(self, info: Info) -> Self:
        """``Dup`` with the hints of ``info`` instead of this communicator's."""
        hints = cb.hints_of(info, "Dup_with_info")
        comm = self._dup("Dup_with_info")
        comm._impl.info = hints  # type: ignore[union-attr]
        return cast("Self", comm)

    @mpi_call
    def Clone(self) -> Self:
        """``Dup``: a communicator of the same kind, group, topology and hints."""
        return self.Dup()

    @mpi_call
    def Idup(self, info: Info | None = None) -> tuple[Self, Request]:
        """Nonblocking ``Dup``: ``(newcomm, request)``; use newcomm once the request completes."""
        return cast("tuple[Self, Request]", self._idup("Idup", self._hints_for(info, "Idup")))

    @mpi_call
    def Idup_with_info(self, info: Info) -> tuple[Self, Request]:
        """``Idup`` with the hints of ``info`` instead of this communicator's."""
        hints = cb.hints_of(info, "Idup_with_info")
        return cast("tuple[Self, Request]", self._idup("Idup_with_info", hints))

    # -- hints ---------------------------------------------------------------------------
    @mpi_call
    def Set_info(self, info: Info) -> None:
        """Replace the communicator's hints by those of ``info``."""
        impl = self._live()
        if info is None:
            raise TypeError("Set_info: info must be an MPI.Info, not None")
        if not info:
            raise MPIException(ERR_ARG, "Set_info: INFO_NULL carries no hints")
        impl.info = cb.hints_of(info, "Set_info")

    @mpi_call
    def Get_info(self) -> Info:
        """A new ``MPI.Info`` holding the communicator's hints (the caller frees it)."""
        return new_info(self._live().info)

    @property
    def info(self) -> Info:
        return self.Get_info()

    @info.setter
    def info(self, info: Info) -> None:
        self.Set_info(info)

    def _idup(self, call: str, hints: dict[str, str]) -> tuple[Comm, Request]:

        impl = self._live()
        engine = impl.engine
        inter = self.Is_inter()  # type: ignore[attr-defined]
        if inter:
            union, lo, _ = layout(impl)
            me, total = lo + impl.rank, len(union)
        else:
            me, total = impl.rank, impl.size
        # The new communicator's state exists from now on; its context comes
        # with the agreement's end. Until then the handle refuses every use.
        new = cb.new_impl(impl, -1, impl.world_ranks)
        new.info = hints
        if inter:
            new.remote_world_ranks = list(impl.remote_world_ranks)
        if getattr(impl, "topo", None) is not None:
            new.topo = impl.topo  # type: ignore[attr-defined]  # as Dup: the topology stays
        newcomm = type(self)._from_impl(_Unready(call, impl))  # type: ignore[arg-type]
        key: list[ctx.Key] = []
        failed: list[BaseException] = []

        def finish(agreed: tuple[int, int]) -> None:
            context, base = agreed
            if failed:  # the copy callbacks failed: the others still get their communicator
                return
            new.context = context
            ctx.install(engine, context, base)
            newcomm._impl = new
            newcomm._label = ""

        engine.enter()
        try:
            check_reported(engine, impl.context + 1, call)
            gen = _agreement(engine, key, me, total)
            sig = signature("dup", 0, NONBLOCKING)
            coll: CollOp
            if inter:
                coll = InterCollOp(self, call, gen, sig, finish, union, me)
            else:
                coll = CollOp(self, call, gen, sig, finish)
            key.append((impl.context, coll.seq))
            coll.start()
        finally:
            engine.leave()
        # As if Dup ran at this call: the copy callbacks see the attributes as they
        # are now, and run in the calling thread.
        try:
            copy_attributes(self, impl, new, call)
        except BaseException as exc:
            failed.append(exc)
            if newcomm._impl is new:  # the agreement had already completed
                newcomm._impl = None
                ctx.release(engine, new.context)
            raise
        return newcomm, Request._of(coll)

    # -- subsets -----------------------------------------------------------------------
    @mpi_call
    def Create(self, group: Group) -> Comm:
        """The communicator of ``group`` (a subgroup of this one) for its members.

        Collective over this communicator; processes may pass different, disjoint
        groups. Callers not in their group get ``COMM_NULL``.
        """
        impl = self._intra("Create")
        members = subgroup_ranks(group, impl.world_ranks, "Create", "the communicator")
        parts = cb.allgather(self, "Create", ctx.contribution(impl.engine))
        me = impl.world_ranks[impl.rank]
        if me not in members:
            return cb.null()
        context, base = cb.agree(parts, "Create")
        ctx.install(impl.engine, context, base)
        return cb.intracomm(cb.new_impl(impl, context, list(members)))

    @mpi_call
    def Split(self, color: int = 0, key: int = 0) -> Comm:
        """One new communicator per color, ranks ordered by key then old rank.

        ``color=UNDEFINED`` gives ``COMM_NULL``.
        """
        impl = self._intra("Split")
        color, key = c_int(color), c_int(key)
        if color < 0 and color != K.UNDEFINED:
            raise MPIException(
                ERR_ARG, f"Split: color must be non-negative or UNDEFINED, got {color}"
            )
        return self._split("Split", impl, color, key)

    @mpi_call
    def Split_type(self, split_type: int, key: int = 0, info: Info | None = None) -> Comm:
        """Split by type of shared resource; the only level ipympi knows is the host.

        ``COMM_TYPE_SHARED`` groups the processes of each host, as do the guided types
        (``COMM_TYPE_HW_GUIDED``, ``COMM_TYPE_RESOURCE_GUIDED``) when ``info`` asks for
        ``mpi_hw_resource_type=mpi_shared_memory``; another resource type, or none,
        gives ``COMM_NULL``. ``COMM_TYPE_HW_UNGUIDED`` splits by host only if that
        makes smaller communicators (and names the level in ``info``), else it gives
        ``COMM_NULL``, as does ``UNDEFINED``. On an intercommunicator the same-type
        processes of both groups form a new intercommunicator.
        """
        call = "Split_type"
        impl = self._live()
        split_type, key = c_int(split_type), c_int(key)
        if split_type != K.UNDEFINED and split_type not in SPLIT_TYPES:
            raise MPIException(ERR_ARG, f"{call}: invalid split_type {split_type}")
        hints = cb.hints_of(info, call)
        color: Any = K.UNDEFINED
        if split_type == K.COMM_TYPE_SHARED:
            color = ("host", PROCESS.host_name())
        elif split_type in (K.COMM_TYPE_HW_GUIDED, K.COMM_TYPE_RESOURCE_GUIDED):
            if hints.get(HW_RESOURCE_TYPE) == SHARED_MEMORY:
                color = ("host", PROCESS.host_name())
        elif split_type == K.COMM_TYPE_HW_UNGUIDED and len(set(self._local_hosts(call))) > 1:
            color = ("host", PROCESS.host_name())
            if info:  # an MPI.Info given: it names the level split at
                info.Set(HW_RESOURCE_TYPE, SHARED_MEMORY)
        return self._split(call, impl, color, key)

    def _local_hosts(self, call: str) -> list[str]:
        """The host of every process of the communicator, in rank order."""
        return cb.allgather(self, call, PROCESS.host_name())

    def _split(self, call: str, impl: CommImpl, color: Any, key: int) -> Comm:
        parts = cb.allgather(self, call, (color, key, ctx.contribution(impl.engine)))
        if color == K.UNDEFINED:
            return cb.null()
        context, base = cb.agree([p[2] for p in parts], call)
        order = sorted((k, r) for r, (c, k, _) in enumerate(parts) if c == color)
        members = [impl.world_ranks[r] for _, r in order]
        ctx.install(impl.engine, context, base)
        return cb.intracomm(cb.new_impl(impl, context, members))

    # -- freeing -----------------------------------------------------------------------
    def _free(self, impl: CommImpl) -> None:
        """Delete the attributes and release the context of a freed communicator."""

        delete_attributes(self, impl, "Free")
        if impl.lane is not None:
            impl.lane.close()
        _keep_pending(self, impl)
        ctx.release(impl.engine, impl.context)

    def _intra(self, call: str) -> CommImpl:
        impl = self._live()
        if self.Is_inter():  # type: ignore[attr-defined]
            raise MPIException(ERR_COMM, f"{call}: not available on an intercommunicator in ipympi")
        return impl


class IntraConstructors(GroupConstructors):
    """Constructors of intracommunicators only: from groups, and ``Create_intercomm``."""

    __slots__ = ()

    @mpi_call
    def Create_intercomm(
        self, local_leader: int, peer_comm: Any, remote_leader: int, tag: int = 0
    ) -> Any:
        """The intercommunicator between this group and the remote leader's group.

        Collective over both groups; ``peer_comm``, ``remote_leader`` and ``tag``
        matter at the leaders only (see :mod:`ipympi.mpi.intercomm`).
        """
        return create_intercomm(self, local_leader, peer_comm, remote_leader, tag)


def _agreement(engine: Any, key: list[ctx.Key], me: int, total: int) -> Any:
    """The nonblocking context agreement (see :mod:`ipympi.core.contexts`) as a collective
    algorithm over ``total`` processes, ``me`` this one; returns ``(context, base)``.

    ``key`` holds the agreement's priority, set before the algorithm starts.
    Each attempt is an allgather of offers and, once an id is picked, an
    allgather of votes. Leaving the algorithm (returning, or being closed on a
    failure) withdraws the offer and any lock; the collective's finishing step,
    which installs the agreed id, runs right after the return, in the same
    engine step, so no other agreement can come in between.
    """
    try:
        attempt = 0
        while True:
            mine = ctx.offer(engine, key[0], attempt)
            wires = yield from algo.allgather_objects(me, total, pickle.dumps(mine))
            picked = ctx.pick([pickle.loads(w) for w in wires])
            attempt += 1
            if picked is None:
                continue
            context, base = picked
            yes = ctx.vote(engine, key[0], context)
            votes = yield from algo.allgather_objects(me, total, b"y" if yes else b"n")
            if all(v == b"y" for v in votes):
                return context, base
            ctx.unlock(engine, key[0], context)
    finally:
        if key:
            ctx.withdraw(engine, key[0])


class _Unready:
    """The state behind the handle ``Idup`` returns, until its request completes.

    Using the new communicator before then is erroneous (MPI 6.4.2, "It is
    erroneous to use the communicator newcomm as an input argument to other MPI
    functions before the MPI_COMM_IDUP operation completes"): every use raises
    ``ERR_COMM`` saying so, through the parent's error handler.
    """

    __slots__ = ("__weakref__", "call", "errhandler", "name", "size")

    def __init__(self, call: str, parent: CommImpl) -> None:
        self.call = call
        self.errhandler = parent.errhandler
        self.name = ""
        self.size = parent.size

    def __getattr__(self, attr: str) -> Any:
        raise MPIException(
            ERR_COMM,
            f"the communicator returned by {self.call} cannot be used before its request "
            "completes (Wait or Test the request first)",
        )


def _keep_pending(comm: Any, impl: CommImpl) -> None:
    """Operations still pending on ``comm`` complete normally after it is freed.

    They refer to the handle, which ``Free`` nulls: point them at a private
    handle on the same communicator instead.
    """
    engine = impl.engine
    engine.enter()
    try:
        private = None
        for op in engine.operations():
            if getattr(op, "comm", None) is comm:
                if private is None:
                    private = type(comm)._from_impl(impl)  # type: ignore[union-attr]
                op.comm = private
    finally:
        engine.leave()
