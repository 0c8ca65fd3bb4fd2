"""Intercommunicators: ``Create_intercomm``, accessors and constructors.

An intercommunicator joins two disjoint groups. Its state is a
:class:`~ipympi.mpi.comm.CommImpl` whose ``world_ranks`` are the local group and
whose ``remote_world_ranks`` are the remote group, so point-to-point calls
address ranks of the remote group with no further work: a message carries the
sender's local rank, which is its rank in the receiver's remote group.

Both groups share one context id, free on every member of both: the leaders
exchange their groups' world ranks and context contributions over the peer
communicator (on its internal context, with the user's tag, so that the traffic
never meets the user's messages on the peer communicator), and each leader
hands the result to its group with a broadcast on the local communicator.

The constructors (``Dup``, ``Merge``, ``Split``, ``Create``) agree on a context
with one allgather over both groups. That allgather, and every collective, runs
in the union rank space of :mod:`ipympi.mpi.coll.inter_core`; :class:`InterMethods`
extends the collectives' mixin, :class:`~ipympi.mpi.coll.inter.InterCollectives`.
``Idup`` (nonblocking) is shared with intracommunicators, in :mod:`ipympi.mpi.commcreate`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..core import algorithms as algo
from ..core import constants as K
from ..core import contexts as ctx
from ..core import errors as _errors
from ..core.errors import ERR_COMM, ERR_RANK
from ..core.errors import Exception as MPIException
from ..core.modes import BLOCKING
from ..core.schedule import Algorithm
from . import commbuild as cb
from .args import c_int, send_tag
from .attributes import copy_attributes
from .coll.inter import InterCollectives
from .coll.inter_core import layout
from .coll.intra import Collectives
from .commimpl import CommImpl, comm_class
from .errhandling import ERRORS_RETURN, mpi_call
from .group import Group
from .groupcreate import create_from_groups, subgroup_ranks
from .pickling import pickle
from .process import PROCESS

if TYPE_CHECKING:
    from .comm import Comm
    from .commimpl import CommImpl
    from .info import Info

__all__ = ["InterMethods", "create_intercomm"]

# -- construction ------------------------------------------------------------------------


def _bcast_object(comm: Any, call: str, obj: Any, root: int) -> Any:
    """Broadcast of a Python object on the intracommunicator ``comm``, named ``call``."""

    impl = comm._live()
    data = pickle.dumps(obj) if impl.rank == root else None

    def plan(rank: int, size: int) -> tuple[Any, None]:
        return algo.bcast_objects(rank, size, root, data), None

    return pickle.loads(Collectives._collective(comm, call, "bcast", root, plan, BLOCKING))


def _leader_exchange(
    impl: CommImpl, parts: list[Any], peer_comm: Any, remote_leader: int, tag: int
) -> tuple[list[int], int, int]:
    """At the local leader: trade groups and contributions with the remote leader."""
    Comm = comm_class("Comm")
    Intracomm = comm_class("Intracomm")

    call = "Create_intercomm"
    if not isinstance(peer_comm, Comm):
        raise MPIException(ERR_COMM, f"{call}: peer_comm {peer_comm!r} is not a communicator")
    peer = peer_comm._live()
    remote_leader = c_int(remote_leader)
    if not 0 <= remote_leader < len(peer.remote_world_ranks):
        raise MPIException(
            ERR_RANK,
            f"{call}: remote_leader {remote_leader} is not a rank of the peer communicator "
            f"(size {len(peer.remote_world_ranks)})",
        )
    engine = impl.engine
    me = impl.world_ranks[impl.rank]
    other = peer.remote_world_ranks[remote_leader]
    if other in impl.world_ranks:
        raise MPIException(
            ERR_COMM, f"{call}: the remote leader (world rank {other}) is in the local group"
        )
    # On the peer's internal context, addressed by world rank: never matches the
    # user's traffic on peer_comm, even a receive with ANY_TAG.
    wire = CommImpl(
        engine,
        ctx.internal_context(peer.context),
        list(range(engine.size)),
        me,
        call,
        ERRORS_RETURN,
    )
    link = Intracomm._from_impl(wire, call)
    request = link.isend((list(impl.world_ranks), parts), other, tag)
    remote_ranks, remote_parts = link.recv(None, other, tag)
    request.wait()
    overlap = sorted(set(remote_ranks) & set(impl.world_ranks))
    if overlap:
        raise MPIException(
            ERR_COMM, f"{call}: the groups overlap (world ranks {overlap} are in both)"
        )
    context, base = cb.agree(parts + remote_parts, call)
    return list(remote_ranks), context, base


def create_intercomm(
    local: Any, local_leader: int, peer_comm: Any, remote_leader: int, tag: int
) -> Any:
    """``Intracomm.Create_intercomm``: collective over both groups."""
    Intercomm = comm_class("Intercomm")

    call = "Create_intercomm"
    impl = local._live()
    if local.Is_inter():
        raise MPIException(ERR_COMM, f"{call}: the local communicator must be an intracommunicator")
    local_leader = c_int(local_leader)
    tag = c_int(tag)
    if not 0 <= local_leader < impl.size:
        raise MPIException(
            ERR_RANK, f"{call}: local_leader {local_leader} is not a rank (size {impl.size})"
        )
    tag = send_tag(tag, call)
    engine = impl.engine
    parts = cb.allgather(local, call, ctx.contribution(engine))
    result: Any
    if impl.rank == local_leader:
        try:
            result = _leader_exchange(impl, parts, peer_comm, remote_leader, tag)
        except MPIException as exc:
            result = (exc.Get_error_class(), str(exc))
    else:
        result = None
    result = _bcast_object(local, call, result, local_leader)
    if len(result) == 2:
        raise MPIException(result[0], result[1])
    remote_ranks, context, base = result
    new = cb.new_inter_impl(impl, context, base, impl.world_ranks, remote_ranks)
    return Intercomm._from_impl(new)


class InterMethods(InterCollectives):
    """Accessors and constructors of ``MPI.Intercomm``; collectives from the mixin."""

    __slots__ = ()

    # -- machinery ------------------------------------------------------------------
    def _union_allgather(self, call: str, obj: Any) -> tuple[list[Any], int, int]:
        """Every process's object, by union rank; and the local and remote offsets."""
        impl = self._live()
        data = pickle.dumps(obj)
        union, lo, ro = layout(impl)

        def build(rank: int, n: int, lo: int, ro: int) -> tuple[Algorithm, None]:
            return algo.allgather_objects(lo + rank, len(union), data), None

        wires = self._inter(call, "allgather", 0, build)
        return [pickle.loads(w) for w in wires], lo, ro

    # -- accessors --------------------------------------------------------------------
    @mpi_call
    def Get_remote_size(self) -> int:
        return len(self._live().remote_world_ranks)

    @property
    def remote_size(self) -> int:
        return self.Get_remote_size()

    @mpi_call
    def Get_remote_group(self) -> Any:

        return Group._from_ranks(self._live().remote_world_ranks)

    @property
    def remote_group(self) -> Any:
        return self.Get_remote_group()

    # -- constructors -------------------------------------------------------------------
    def _dup(self, call: str) -> Comm:
        impl = self._live()
        parts, _, _ = self._union_allgather(call, ctx.contribution(impl.engine))
        context, base = cb.agree(parts, call)
        new = cb.new_inter_impl(impl, context, base, impl.world_ranks, impl.remote_world_ranks)
        try:
            copy_attributes(self, impl, new, call)
        except BaseException:
            ctx.release(impl.engine, context)
            raise
        return type(self)._from_impl(new)

    @mpi_call
    def Merge(self, high: bool = False) -> Any:
        """The intracommunicator of both groups; the ``high=False`` group comes first."""
        Intracomm = comm_class("Intracomm")

        impl = self._live()
        parts, lo, ro = self._union_allgather("Merge", (bool(high), ctx.contribution(impl.engine)))
        n, m = impl.size, len(impl.remote_world_ranks)
        mine, theirs = parts[lo][0], parts[ro][0]
        # the same flag on both sides: the union order, the same on every process
        local_first = not mine if mine != theirs else lo == 0
        local, remote = list(impl.world_ranks), list(impl.remote_world_ranks)
        members = local + remote if local_first else remote + local
        assert len(members) == n + m
        context, base = cb.agree([p[1] for p in parts], "Merge")
        ctx.install(impl.engine, context, base)
        return Intracomm._from_impl(cb.new_impl(impl, context, members))

    @mpi_call
    def Split(self, color: int = 0, key: int = 0) -> Comm:
        """Same-color processes of both groups form a new intercommunicator.

        ``UNDEFINED``, or a color present in one group only, gives ``COMM_NULL``.
        """
        impl = self._live()
        color, key = c_int(color), c_int(key)
        if color < 0 and color != K.UNDEFINED:
            raise MPIException(
                _errors.ERR_ARG, f"Split: color must be non-negative or UNDEFINED, got {color}"
            )
        return self._split("Split", impl, color, key)

    def _split(self, call: str, impl: CommImpl, color: Any, key: int) -> Comm:
        """Same-color processes of both groups form a new intercommunicator (``Split``,
        ``Split_type``); ``UNDEFINED``, or a color of one group only, gives ``COMM_NULL``."""
        parts, lo, ro = self._union_allgather(call, (color, key, ctx.contribution(impl.engine)))
        n, m = impl.size, len(impl.remote_world_ranks)
        if color == K.UNDEFINED:
            return type(self)._from_impl(None, "COMM_NULL")
        local = sorted((parts[lo + r][1], r) for r in range(n) if parts[lo + r][0] == color)
        remote = sorted((parts[ro + r][1], r) for r in range(m) if parts[ro + r][0] == color)
        if not remote:
            return type(self)._from_impl(None, "COMM_NULL")
        context, base = cb.agree([p[2] for p in parts], call)
        mine = [impl.world_ranks[r] for _, r in local]
        theirs = [impl.remote_world_ranks[r] for _, r in remote]
        new = cb.new_inter_impl(impl, context, base, mine, theirs)
        return type(self)._from_impl(new)

    def _local_hosts(self, call: str) -> list[str]:
        """The host of every process of the local group, in rank order."""
        impl = self._live()
        parts, lo, _ = self._union_allgather(call, PROCESS.host_name())
        return parts[lo : lo + impl.size]

    @mpi_call
    def Create(self, group: Group) -> Comm:
        """The intercommunicator of ``group`` (a subgroup of the local group) and the
        subgroup the remote processes pass; ``COMM_NULL`` if the caller is not in its
        group or either group is empty."""
        impl = self._live()
        members = subgroup_ranks(group, impl.world_ranks, "Create", "the local group")
        parts, _, ro = self._union_allgather("Create", (members, ctx.contribution(impl.engine)))
        remote = list(parts[ro][0])
        me = impl.world_ranks[impl.rank]
        if me not in members or not remote:
            return type(self)._from_impl(None, "COMM_NULL")
        context, base = cb.agree([p[1] for p in parts], "Create")
        new = cb.new_inter_impl(impl, context, base, list(members), remote)
        return type(self)._from_impl(new)

    @classmethod
    def Create_from_groups(
        cls,
        local_group: Any,
        local_leader: int,
        remote_group: Any,
        remote_leader: int,
        stringtag: str = "org.mpi4py",
        info: Info | None = None,
        errhandler: Any = None,
    ) -> Any:
        """The intercommunicator of two disjoint groups, without a parent communicator.

        Every member of both groups calls it, naming its own group first; the
        leaders are ranks in their groups. See :mod:`ipympi.mpi.groupcreate`.
        """

        return create_from_groups(
            local_group, local_leader, remote_group, remote_leader, stringtag, info, errhandler
        )

    def Create_group(self, group: Group, tag: int = 0) -> Any:
        raise MPIException(ERR_COMM, "Create_group: not defined on an intercommunicator")
