"""Communicators made collectively over their members only, from groups.

``Intracomm.Create_group`` (MPI 3: over a parent communicator, called by the
group's members only), ``Intracomm.Create_from_group`` and
``Intercomm.Create_from_groups`` (MPI 4: no parent at all, the members named by
world rank in their groups, matched by a string tag).

All three agree on a new context id the same way (:func:`agree_among`): a leader
gathers every member's context contribution by point-to-point messages on an
internal context, chooses, and answers each member. ``Create_group`` talks on
its parent's internal context with the user's tag; the MPI 4 constructors, which
have no parent, talk on a world-level internal context reserved for them
(``FROM_GROUP``), with a tag derived from the string tag, so that calls with
different string tags in progress at once never take each other's messages.
"""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING, Any

from ..core import constants as K
from ..core import contexts as ctx
from ..core import errors as _errors
from ..core.errors import ERR_GROUP, ERR_RANK
from ..core.errors import Exception as MPIException
from . import commbuild as cb
from .args import c_int, send_tag
from .commimpl import CommImpl, comm_class
from .errhandling import ERRORS_RETURN, Errhandler, mpi_call, world_call
from .group import Group
from .handles import CommMixin
from .process import PROCESS

if TYPE_CHECKING:
    from .commimpl import CommImpl
    from .info import Info

__all__ = ["FROM_GROUP", "GroupConstructors", "agree_among", "create_from_groups"]

# Internal context of the MPI 4 constructors from groups: the internal flag on
# COMM_WORLD's collective context, which no constructor's traffic uses otherwise.
FROM_GROUP = ctx.internal_context(1)


def group_ranks(group: Any, call: str) -> tuple[int, ...]:
    """The world ranks of ``group``, or ``ERR_GROUP`` for a null or foreign object."""

    ranks = group._ranks if isinstance(group, Group) else None
    if ranks is None:
        raise MPIException(
            ERR_GROUP, f"{call}: invalid group {group!r} (GROUP_NULL or not a group)"
        )
    return tuple(ranks)


def subgroup_ranks(group: Any, world_ranks: Any, call: str, whose: str) -> tuple[int, ...]:
    """The world ranks of ``group``, which must be a subgroup of ``world_ranks`` (the
    processes of ``whose``, for the message); else ``ERR_GROUP``."""
    members = group_ranks(group, call)
    parent = set(world_ranks)
    outside = [r for r in members if r not in parent]
    if outside:
        raise MPIException(
            ERR_GROUP,
            f"{call}: the group is not a subgroup of {whose} "
            f"(world ranks {outside} are not members)",
        )
    return members


def agree_among(
    engine: Any, context: int, leader: int, members: Any, tag: int, call: str
) -> tuple[int, int]:
    """A context id (and collective base) free on every process of ``members``.

    ``members`` are world ranks, ``leader`` one of them; every member calls this
    with the same leader and members. Messages travel on ``context`` (an internal
    context, addressed by world rank) with ``tag``.
    """
    Intracomm = comm_class("Intracomm")

    me = engine.rank
    mine = ctx.contribution(engine)
    others = [r for r in members if r != leader]
    if not others:
        return cb.agree([mine], call)
    wire = CommImpl(
        engine,
        context,
        list(range(engine.size)),
        me,
        call,
        ERRORS_RETURN,  # errors are reported once, by the constructor
    )
    link = Intracomm._from_impl(wire, call)
    if me == leader:
        parts = [mine]
        for r in others:
            parts.append(link.recv(None, r, tag))
        try:
            result: Any = cb.agree(parts, call)
        except MPIException as exc:
            result = exc.Get_error_class()
        for r in others:
            link.send(result, r, tag)
    else:
        link.send(mine, leader, tag)
        result = link.recv(None, leader, tag)
    if not isinstance(result, tuple):
        raise MPIException(int(result), f"{call}: too many communicators in use")
    return result


def _string_tag(stringtag: Any, call: str) -> int:
    """The message tag of a string tag: the same on every process, spread over the tags."""
    if not isinstance(stringtag, str):
        raise TypeError(f"{call}: stringtag must be a str, not {type(stringtag).__name__}")
    return zlib.crc32(stringtag.encode()) % (K.TAG_UB_VALUE + 1)


def _errhandler(errhandler: Any, call: str) -> Any:
    """The new communicator's error handler: ``None`` means ``ERRORS_RETURN``, as in mpi4py."""
    if errhandler is None:
        return ERRORS_RETURN
    if not isinstance(errhandler, Errhandler):
        raise TypeError(f"{call}: errhandler must be an MPI.Errhandler, not {errhandler!r}")
    if not errhandler:
        raise MPIException(_errors.ERR_ERRHANDLER, f"{call}: ERRHANDLER_NULL cannot be attached")
    return Errhandler(errhandler)


def _leader(ranks: tuple[int, ...], leader: Any, call: str, what: str) -> int:
    """The world rank of rank ``leader`` of a group of world ranks ``ranks``."""
    leader = c_int(leader)
    if not 0 <= leader < len(ranks):
        raise MPIException(
            ERR_RANK, f"{call}: {what} {leader} is not a rank of its group (size {len(ranks)})"
        )
    return ranks[leader]


def _impl(engine: Any, context: int, local: tuple[int, ...], errhandler: Any) -> CommImpl:

    return CommImpl(engine, context, list(local), local.index(engine.rank), "", errhandler)


@world_call
def create_from_group(group: Any, stringtag: Any, info: Any, errhandler: Any) -> CommImpl | None:
    """``Intracomm.Create_from_group``: the state of the new communicator (``None``
    for a caller outside ``group``)."""
    call = "Create_from_group"
    members = group_ranks(group, call)
    tag = _string_tag(stringtag, call)
    hints = cb.hints_of(info, call)
    handler = _errhandler(errhandler, call)
    engine = PROCESS.live_engine("MPI call")
    if engine.rank not in members:
        return None
    context, base = agree_among(engine, FROM_GROUP, members[0], members, tag, call)
    ctx.install(engine, context, base)
    impl = _impl(engine, context, members, handler)
    impl.info = hints
    return impl


@world_call
def create_from_groups(
    local_group: Any,
    local_leader: Any,
    remote_group: Any,
    remote_leader: Any,
    stringtag: Any = "org.mpi4py",
    info: Any = None,
    errhandler: Any = None,
) -> Any:
    """``Intercomm.Create_from_groups``: the intercommunicator of two disjoint groups,
    called by every member of both, each naming its own group as the local one."""
    Intercomm = comm_class("Intercomm")
    call = "Create_from_groups"
    local = group_ranks(local_group, call)
    remote = group_ranks(remote_group, call)
    mine = _leader(local, local_leader, call, "local_leader")
    theirs = _leader(remote, remote_leader, call, "remote_leader")
    tag = _string_tag(stringtag, call)
    hints = cb.hints_of(info, call)
    handler = _errhandler(errhandler, call)
    overlap = sorted(set(local) & set(remote))
    if overlap:
        raise MPIException(
            ERR_GROUP, f"{call}: the groups overlap (world ranks {overlap} are in both)"
        )
    engine = PROCESS.live_engine("MPI call")
    if engine.rank not in local:
        raise MPIException(ERR_GROUP, f"{call}: the calling process is not in local_group")
    # Both sides name the same two leaders: the lower world rank leads the agreement.
    context, base = agree_among(engine, FROM_GROUP, min(mine, theirs), local + remote, tag, call)
    ctx.install(engine, context, base)
    impl = _impl(engine, context, local, handler)
    impl.remote_world_ranks = list(remote)
    impl.info = hints
    return Intercomm._from_impl(impl)


class GroupConstructors(CommMixin):
    """``Create_group`` and ``Create_from_group`` of ``MPI.Intracomm``."""

    __slots__ = ()

    @mpi_call
    def Create_group(self, group: Group, tag: int = 0) -> Any:
        """The communicator of ``group``, called only by the group's members.

        A caller outside the group (e.g. with ``GROUP_EMPTY``) gets ``COMM_NULL``
        without communicating.
        """
        call = "Create_group"
        impl = self._live()
        members = subgroup_ranks(group, impl.world_ranks, call, "the communicator")
        tag = send_tag(tag, call)
        engine = impl.engine
        if engine.rank not in members:
            return cb.null()
        internal = ctx.internal_context(impl.context)
        context, base = agree_among(engine, internal, members[0], members, tag, call)
        ctx.install(engine, context, base)
        return cb.intracomm(cb.new_impl(impl, context, list(members)))

    @classmethod
    def Create_from_group(
        cls,
        group: Group,
        stringtag: str = "org.mpi4py",
        info: Info | None = None,
        errhandler: Any = None,
    ) -> Any:
        """The communicator of ``group``, called by its members only, without a parent.

        Calls in progress at once are told apart by ``stringtag``. The new
        communicator gets ``errhandler`` (``ERRORS_RETURN`` if ``None``) and the hints
        of ``info``; a caller outside the group gets ``COMM_NULL``.
        """
        return cb.intracomm(create_from_group(group, stringtag, info, errhandler))
