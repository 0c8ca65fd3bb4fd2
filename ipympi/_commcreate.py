"""Communicator constructors and comparison: ``Dup``, ``Create``, ``Split``, ``Create_group``.

Every constructor agrees on a new context id among the processes that will
share it (see :mod:`ipympi._contexts`): ``Dup``, ``Idup``, ``Create``, ``Split``
and ``Split_type`` in one ``allgather`` over the parent communicator, which also
carries the colors and keys of ``Split``; ``Create_group``, collective only over
the new group, with point-to-point messages among the group's members on the
parent's internal context (the leader, the group's rank 0, gathers the
contributions and answers with the result).

A new communicator inherits its parent's error handler, has no name (``""``),
and has no attributes, except that ``Dup`` and ``Idup`` run the copy callbacks.

``Idup`` (intra- and intercommunicators) is truly nonblocking: it starts the
agreement as a nonblocking collective (the protocol for agreements in progress
at the same time is in :mod:`ipympi._contexts`) and returns the new handle with
the request; the communicator becomes usable when the request completes, and
using it earlier raises ``ERR_COMM``. As the standard puts it, ``Idup`` behaves
as if ``Dup`` ran at the call: the copy callbacks run then, in the calling
thread, on the attributes as they are at that moment.
"""

from __future__ import annotations

import pickle
from typing import TYPE_CHECKING, Any

from . import _algorithms as algo
from . import _constants as K
from . import _contexts as ctx
from . import _errors
from ._errhandling import mpi_call
from ._errors import ERR_ARG, ERR_COMM, ERR_GROUP, ERR_OTHER, ERR_TAG
from ._errors import Exception as MPIException

if TYPE_CHECKING:
    from ._comm import Comm, CommImpl
    from ._request import Request

__all__ = ["CommConstructors", "IntraConstructors"]

SPLIT_TYPES = (
    K.COMM_TYPE_SHARED,
    K.COMM_TYPE_HW_GUIDED,
    K.COMM_TYPE_HW_UNGUIDED,
    K.COMM_TYPE_RESOURCE_GUIDED,
)


def _group_ranks(group: Any, call: str) -> tuple[int, ...]:
    """The world ranks of ``group``, or ``ERR_GROUP`` for a null or foreign object."""
    from ._group import Group

    ranks = group._ranks if isinstance(group, Group) else None
    if ranks is None:
        raise MPIException(
            ERR_GROUP, f"{call}: invalid group {group!r} (GROUP_NULL or not a group)"
        )
    return tuple(ranks)


def _new_impl(parent: CommImpl, context: int, world_ranks: list[int]) -> CommImpl:
    """The state of a new communicator of ``parent``'s process on ``context``."""
    me = parent.world_ranks[parent.rank]
    impl = type(parent)(
        parent.engine,
        context,
        list(world_ranks),
        world_ranks.index(me),
        "",
        _errors.Errhandler(parent.errhandler),
    )
    return impl


def _allgather(comm: Any, call: str, obj: Any) -> list[Any]:
    """Allgather of Python objects on ``comm``'s collective context, named ``call``."""
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)

    def plan(rank: int, size: int) -> tuple[Any, None]:
        return algo.allgather_objects(rank, size, data), None

    from ._coll import Collectives

    # unbound: a plain ``MPI.Comm`` handle on an intracommunicator works too
    wires = Collectives._collective(comm, call, "allgather", 0, plan, "blocking")
    return [pickle.loads(w) for w in wires]


def _agree(parts: list[ctx.Contribution], call: str) -> tuple[int, int]:
    try:
        return ctx.choose(parts)
    except OverflowError as exc:
        raise MPIException(ERR_OTHER, f"{call}: too many communicators in use") from exc


class CommConstructors:
    """Constructors, group access and comparison of ``MPI.Comm``."""

    __slots__ = ()

    if TYPE_CHECKING:

        def _live(self) -> CommImpl: ...

        def _raise(self, exc: MPIException, call: str) -> Any: ...

        @classmethod
        def _from_impl(cls, impl: CommImpl | None, label: str = "") -> Comm: ...

    # -- groups and comparison ---------------------------------------------------------
    @mpi_call
    def Get_group(self) -> Any:
        """The group of the communicator (the local group of an intercommunicator)."""
        from ._group import Group

        return Group._from_ranks(self._live().world_ranks)

    @property
    def group(self) -> Any:
        return self.Get_group()

    @mpi_call
    def Compare(self, comm: Any) -> int:
        """``IDENT``, ``CONGRUENT``, ``SIMILAR`` or ``UNEQUAL``."""
        from ._comm import Comm

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
        parts = _allgather(self, call, ctx.contribution(impl.engine))
        context, base = _agree(parts, call)
        new = _new_impl(impl, context, impl.world_ranks)
        if getattr(impl, "topo", None) is not None:
            new.topo = impl.topo  # type: ignore[attr-defined]  # a Dup keeps the topology
        ctx.install(impl.engine, context, base)
        try:
            from ._attributes import copy_attributes

            copy_attributes(self, impl, new, call)
        except BaseException:
            ctx.release(impl.engine, context)
            raise
        return type(self)._from_impl(new)

    @mpi_call
    def Dup(self, info: Any = None) -> Comm:
        """A new communicator with the same group, a new context and copied attributes."""
        return self._dup("Dup")

    @mpi_call
    def Dup_with_info(self, info: Any) -> Comm:
        """``Dup`` with hints (accepted and ignored)."""
        return self._dup("Dup_with_info")

    @mpi_call
    def Idup(self, info: Any = None) -> tuple[Comm, Request]:
        """``Dup`` returning ``(newcomm, request)``; the request is already complete."""
        return self._idup("Idup")

    @mpi_call
    def Idup_with_info(self, info: Any) -> tuple[Comm, Request]:
        """``Idup`` with hints (accepted and ignored)."""
        return self._idup("Idup_with_info")

    def _idup(self, call: str) -> tuple[Comm, Request]:
        from ._attributes import copy_attributes
        from ._collsched import CollOp, check_reported, signature
        from ._request import Request

        impl = self._live()
        engine = impl.engine
        inter = self.Is_inter()  # type: ignore[attr-defined]
        if inter:
            from ._intercoll_core import InterCollOp, layout

            union, lo, _ = layout(impl)
            me, total = lo + impl.rank, len(union)
        else:
            me, total = impl.rank, impl.size
        # The new communicator's state exists from now on; its context comes
        # with the agreement's end. Until then the handle refuses every use.
        new = _new_impl(impl, -1, impl.world_ranks)
        if inter:
            new.remote_world_ranks = list(impl.remote_world_ranks)
        if getattr(impl, "topo", None) is not None:
            new.topo = impl.topo  # type: ignore[attr-defined]  # as Dup: the topology stays
        newcomm = type(self)._from_impl(_Unready(call, impl))
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
            sig = signature("dup", 0, "nonblocking")
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
    def Create(self, group: Any) -> Comm:
        """The communicator of ``group`` (a subgroup of this one) for its members.

        Collective over this communicator; processes may pass different, disjoint
        groups. Callers not in their group get ``COMM_NULL``.
        """
        impl = self._intra("Create")
        members = _group_ranks(group, "Create")
        parent = set(impl.world_ranks)
        outside = [r for r in members if r not in parent]
        if outside:
            raise MPIException(
                ERR_GROUP,
                f"Create: the group is not a subgroup of the communicator "
                f"(world ranks {outside} are not members)",
            )
        parts = _allgather(self, "Create", ctx.contribution(impl.engine))
        me = impl.world_ranks[impl.rank]
        if me not in members:
            return _null()
        context, base = _agree(parts, "Create")
        ctx.install(impl.engine, context, base)
        return _intracomm(_new_impl(impl, context, list(members)))

    @mpi_call
    def Split(self, color: int = 0, key: int = 0) -> Comm:
        """One new communicator per color, ranks ordered by key then old rank.

        ``color=UNDEFINED`` gives ``COMM_NULL``.
        """
        impl = self._intra("Split")
        color, key = _int(color, "Split", "color"), _int(key, "Split", "key")
        if color < 0 and color != K.UNDEFINED:
            raise MPIException(
                ERR_ARG, f"Split: color must be non-negative or UNDEFINED, got {color}"
            )
        return self._split("Split", impl, color, key)

    @mpi_call
    def Split_type(self, split_type: int, key: int = 0, info: Any = None) -> Comm:
        """Split by type: ``COMM_TYPE_SHARED`` groups the ranks sharing a host.

        ``UNDEFINED`` gives ``COMM_NULL``; the hardware-guided types give
        ``COMM_NULL`` too (no finer hardware level is known).
        """
        from ._runtime import host_name

        impl = self._intra("Split_type")
        split_type = _int(split_type, "Split_type", "split_type")
        key = _int(key, "Split_type", "key")
        if split_type != K.UNDEFINED and split_type not in SPLIT_TYPES:
            raise MPIException(ERR_ARG, f"Split_type: invalid split_type {split_type}")
        color: Any = K.UNDEFINED
        if split_type == K.COMM_TYPE_SHARED:
            color = ("host", host_name())
        return self._split("Split_type", impl, color, key)

    def _split(self, call: str, impl: CommImpl, color: Any, key: int) -> Comm:
        parts = _allgather(self, call, (color, key, ctx.contribution(impl.engine)))
        if color == K.UNDEFINED:
            return _null()
        context, base = _agree([p[2] for p in parts], call)
        order = sorted((k, r) for r, (c, k, _) in enumerate(parts) if c == color)
        members = [impl.world_ranks[r] for _, r in order]
        ctx.install(impl.engine, context, base)
        return _intracomm(_new_impl(impl, context, members))

    # -- freeing -----------------------------------------------------------------------
    def _free(self, impl: CommImpl) -> None:
        """Delete the attributes and release the context of a freed communicator."""
        from ._attributes import delete_attributes

        delete_attributes(self, impl, "Free")
        _keep_pending(self, impl)
        ctx.release(impl.engine, impl.context)

    def _intra(self, call: str) -> CommImpl:
        impl = self._live()
        if self.Is_inter():  # type: ignore[attr-defined]
            raise MPIException(ERR_COMM, f"{call}: not available on an intercommunicator in ipympi")
        return impl


class IntraConstructors:
    """``Create_group``: collective only over the new group's members."""

    __slots__ = ()

    if TYPE_CHECKING:

        def _live(self) -> CommImpl: ...

        def _raise(self, exc: MPIException, call: str) -> Any: ...

    @mpi_call
    def Create_group(self, group: Any, tag: int = 0) -> Any:
        """The communicator of ``group``, called only by the group's members.

        A caller outside the group (e.g. with ``GROUP_EMPTY``) gets ``COMM_NULL``
        without communicating.
        """
        from ._comm import CommImpl, Intracomm

        impl = self._live()
        members = _group_ranks(group, "Create_group")
        tag = _int(tag, "Create_group", "tag")
        if not 0 <= tag <= K.TAG_UB_VALUE:
            raise MPIException(ERR_TAG, f"Create_group: invalid tag {tag} (0..{K.TAG_UB_VALUE})")
        parent = set(impl.world_ranks)
        outside = [r for r in members if r not in parent]
        if outside:
            raise MPIException(
                ERR_GROUP,
                f"Create_group: the group is not a subgroup of the communicator "
                f"(world ranks {outside} are not members)",
            )
        me = impl.world_ranks[impl.rank]
        if me not in members:
            return _null()
        engine = impl.engine
        mine = ctx.contribution(engine)
        if len(members) == 1:
            context, base = _agree([mine], "Create_group")
        else:
            # Point-to-point among the members on the parent's internal context,
            # addressed by world rank: never matches user traffic on the parent.
            wire = CommImpl(
                engine,
                ctx.internal_context(impl.context),
                list(range(engine.size)),
                me,
                "Create_group",
                _errors.ERRORS_RETURN,  # errors are reported once, by Create_group
            )
            link = Intracomm._from_impl(wire, "Create_group")
            leader = members[0]
            if me == leader:
                parts = [mine]
                for r in members[1:]:
                    parts.append(link.recv(None, r, tag))
                try:
                    result: Any = _agree(parts, "Create_group")
                except MPIException as exc:
                    result = exc.Get_error_class()
                for r in members[1:]:
                    link.send(result, r, tag)
            else:
                link.send(mine, leader, tag)
                result = link.recv(None, leader, tag)
            if not isinstance(result, tuple):
                raise MPIException(int(result), "Create_group: too many communicators in use")
            context, base = result
        ctx.install(engine, context, base)
        return _intracomm(_new_impl(impl, context, list(members)))

    @mpi_call
    def Create_intercomm(
        self, local_leader: int, peer_comm: Any, remote_leader: int, tag: int = 0
    ) -> Any:
        """The intercommunicator between this group and the remote leader's group.

        Collective over both groups; ``peer_comm``, ``remote_leader`` and ``tag``
        matter at the leaders only (see :mod:`ipympi._intercomm`).
        """
        from ._intercomm import create_intercomm

        return create_intercomm(self, local_leader, peer_comm, remote_leader, tag)


def _agreement(engine: Any, key: list[ctx.Key], me: int, total: int) -> Any:
    """The nonblocking context agreement (see :mod:`ipympi._contexts`) as a collective
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
        ops = [recv.handle for recv in engine.matcher.pending_posted()]
        ops += list(engine._sends.values())
        ops += [entry[0] for entry in engine._rdv.values()]
        ops += list(engine.colls)
        private = None
        for op in ops:
            if getattr(op, "comm", None) is comm:
                if private is None:
                    private = type(comm)._from_impl(impl)
                op.comm = private
    finally:
        engine.leave()


def _intracomm(impl: CommImpl | None) -> Any:
    from ._comm import Intracomm

    return Intracomm._from_impl(impl, "" if impl is not None else "COMM_NULL")


def _null() -> Any:
    """``COMM_NULL``, as an ``Intracomm`` handle (what mpi4py's constructors return)."""
    return _intracomm(None)


def _int(value: Any, call: str, what: str) -> int:
    try:
        return int(value.__index__())
    except AttributeError:
        raise MPIException(ERR_ARG, f"{call}: {what} must be an integer, got {value!r}") from None
