"""``MPI.Group``: ordered sets of processes (MPI-3.0 §6.2.1, §6.3).

A group is an immutable ordered tuple of processes, each named by its rank in
``COMM_WORLD`` (its world rank): the member at position ``i`` has rank ``i`` in
the group. Group operations are local; they communicate nothing, and a process
may build a group it is not a member of. ``GROUP_EMPTY`` is a valid group with
no members, and every operation whose result is empty returns a handle to it
(``Incl([]) == GROUP_EMPTY``). ``GROUP_NULL`` (``MPI.Group()``) is the invalid
handle that ``Free`` leaves behind; any call on it raises ``ERR_GROUP``.

Groups have no error handler: their errors go through ``COMM_WORLD``'s handler,
as calls not tied to a communicator do. Error classes follow MPICH:

* ``Incl``, ``Excl``, ``Translate_ranks``: a rank outside the group, or a rank
  given twice to ``Incl``/``Excl``, is ``ERR_RANK``;
* ``Range_incl``, ``Range_excl``: a zero stride, a triplet whose stride points
  away from its last rank (``(3, 0, 1)``), a computed rank outside the group or
  computed twice is ``ERR_ARG``;
* a ``GROUP_NULL`` argument is ``ERR_GROUP``.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Sequence
from typing import Any, NoReturn

from ..core.constants import IDENT, PROC_NULL, SIMILAR, UNDEFINED, UNEQUAL
from ..core.errors import ERR_ARG, ERR_GROUP, ERR_OTHER, ERR_RANK
from ..core.errors import Exception as MPIException
from ..core.handle import Handle, Kind, register
from .args import c_int
from .errhandling import world_call
from .process import PROCESS

__all__ = ["GROUP_EMPTY", "GROUP_NULL", "Group"]

_REPR_RANKS = 16  # members shown by repr() before eliding the rest


class _GroupImpl:
    """The group object that :class:`Group` handles refer to.

    ``ranks`` holds the members' world ranks in group order (``None`` for the null
    group); ``index`` maps a world rank to its rank in the group.
    """

    __slots__ = ("__weakref__", "index", "ranks")

    def __init__(self, ranks: tuple[int, ...] | None) -> None:
        self.ranks = ranks
        self.index: dict[int, int] = {} if ranks is None else {r: i for i, r in enumerate(ranks)}


_NULL_IMPL = _GroupImpl(None)
_EMPTY_IMPL = _GroupImpl(())


def _null_error(call: str) -> MPIException:
    return MPIException(ERR_GROUP, f"{call}: invalid group: GROUP_NULL (null or freed handle)")


def _not_initialized(call: str) -> NoReturn:
    raise MPIException(ERR_OTHER, f"{call}: {PROCESS.why_unusable()}")


def _world_rank() -> int:
    """This process's rank in ``COMM_WORLD``."""
    rank = PROCESS.world_rank()
    if rank is None:
        _not_initialized("Get_rank")
    return rank


def _index_list(ranks: Iterable[Any], what: str) -> list[int]:
    """``ranks`` as a list of Python ints (``TypeError`` for non-integers)."""
    if isinstance(ranks, (str, bytes)):
        raise TypeError(f"{what} must be a sequence of integers, not {type(ranks).__name__}")
    try:
        return [operator.index(r) for r in ranks]
    except TypeError as exc:
        raise TypeError(f"{what} must be a sequence of integers: {exc}") from None


def _check_ranks(call: str, ranks: list[int], size: int) -> None:
    """``ERR_RANK`` unless every rank is valid in a group of ``size`` and distinct."""
    seen: set[int] = set()
    for i, r in enumerate(ranks):
        if not 0 <= r < size:
            raise MPIException(
                ERR_RANK, f"{call}: ranks[{i}] = {r} is not a rank of the group {_valid(size)}"
            )
        if r in seen:
            raise MPIException(ERR_RANK, f"{call}: rank {r} appears more than once in ranks")
        seen.add(r)


def _valid(size: int) -> str:
    if size == 0:
        return "(the group is empty)"
    return f"(size {size}: valid ranks are 0..{size - 1})"


def _expand_ranges(call: str, ranges: Iterable[Any], size: int) -> list[int]:
    """The ranks that ``(first, last, stride)`` triplets denote (MPI-3.0 §6.3.2).

    A triplet gives ``first, first + stride, ..., first + floor((last - first) /
    stride) * stride``. Its three numbers are taken as mpi4py takes them, each like a
    scalar argument (:func:`~ipympi.mpi.args.c_int`: ``(0, size / 2, 1)`` stops at rank
    ``int(size / 2)``). Errors are ``ERR_ARG`` (as MPICH reports them).
    """
    if isinstance(ranges, (str, bytes)):
        raise TypeError(f"{call}: ranges must be a sequence of (first, last, stride) triplets")
    expanded: list[int] = []
    where: dict[int, int] = {}
    for i, triplet in enumerate(ranges):
        try:
            first, last, stride = (c_int(v) for v in triplet)
        except TypeError:
            raise TypeError(
                f"{call}: ranges[{i}] must be a (first, last, stride) triplet of integers, "
                f"not {triplet!r}"
            ) from None
        except ValueError:
            raise ValueError(
                f"{call}: ranges[{i}] must be a (first, last, stride) triplet, not {triplet!r}"
            ) from None
        desc = f"ranges[{i}] = ({first}, {last}, {stride})"
        if stride == 0:
            raise MPIException(ERR_ARG, f"{call}: {desc} has stride 0, which is invalid")
        if (last - first) * stride < 0:
            raise MPIException(
                ERR_ARG,
                f"{call}: {desc} never reaches its last rank: the stride must be "
                f"{'negative' if first > last else 'positive'} when first "
                f"{'>' if first > last else '<'} last",
            )
        count = (last - first) // stride + 1
        final = first + (count - 1) * stride
        for end in (first, final):
            if not 0 <= end < size:
                raise MPIException(
                    ERR_ARG,
                    f"{call}: {desc} includes rank {end}, which is not a rank of the group "
                    f"{_valid(size)}",
                )
        for r in range(first, final + (1 if stride > 0 else -1), stride):
            if r in where:
                raise MPIException(
                    ERR_ARG,
                    f"{call}: rank {r} is given twice, by ranges[{where[r]}] and ranges[{i}]",
                )
            where[r] = i
            expanded.append(r)
    return expanded


def _as_group(call: str, group: Any, what: str = "group") -> _GroupImpl:
    """The live group object behind argument ``group``."""
    if not isinstance(group, Group):
        raise TypeError(f"{call}: {what} must be an MPI.Group, not {type(group).__name__}")
    impl = group._impl
    if impl.ranks is None:
        raise MPIException(ERR_GROUP, f"{call}: {what} is GROUP_NULL (a null or freed handle)")
    return impl


class Group(Handle):
    """A handle to a group of processes.

    ``Group(group)`` makes a new handle to the same group as ``group`` (equal to
    it); ``Group()`` is a null handle, equal to ``GROUP_NULL``. Groups come from
    ``Comm.Get_group()`` and from the constructors below.
    """

    __slots__ = ("_impl",)
    _mpi_kind = Kind("Group", 2, ERR_GROUP, _NULL_IMPL)
    _impl: _GroupImpl

    @classmethod
    def _from_impl(cls, impl: _GroupImpl) -> Group:
        handle = object.__new__(cls)
        handle._impl = impl
        return handle

    @classmethod
    def _from_ranks(cls, world_ranks: Iterable[int]) -> Group:
        """A new group whose member ``i`` is the process of world rank ``world_ranks[i]``.

        For the communicator code (``Comm.Get_group``); the ranks must be distinct
        world ranks. An empty sequence gives ``GROUP_EMPTY``.
        """
        ranks = tuple(operator.index(r) for r in world_ranks)
        return cls._new(ranks)

    @classmethod
    def _new(cls, ranks: tuple[int, ...]) -> Group:
        if not ranks:
            return cls._from_impl(_EMPTY_IMPL)
        impl = _GroupImpl(ranks)
        if len(impl.index) != len(ranks):
            raise ValueError(f"a group's processes must be distinct, got {ranks}")
        return cls._from_impl(impl)

    @property
    def _ranks(self) -> tuple[int, ...] | None:
        """The members' world ranks in group order; ``None`` for ``GROUP_NULL``."""
        return self._impl.ranks

    def _live(self, call: str) -> _GroupImpl:
        """The group object, or ``ERR_GROUP`` for a null handle."""
        impl = self._impl
        if impl.ranks is None:
            raise _null_error(call)
        return impl

    # -- accessors (§6.3.1) ---------------------------------------------------------------
    @world_call
    def Get_size(self) -> int:
        """Return the number of processes in the group."""
        return len(self._live("Get_size").ranks)  # type: ignore[arg-type]

    @world_call
    def Get_rank(self) -> int:
        """Return this process's rank in the group, or ``UNDEFINED`` if it is not a member."""
        impl = self._live("Get_rank")
        if not impl.ranks:
            return UNDEFINED
        return impl.index.get(_world_rank(), UNDEFINED)

    @property
    def size(self) -> int:
        """Number of processes in the group."""
        return self.Get_size()

    @property
    def rank(self) -> int:
        """Rank of this process in the group (``UNDEFINED`` if not a member)."""
        return self.Get_rank()

    @world_call
    def Translate_ranks(
        self, ranks: Sequence[int] | None = None, group: Group | None = None
    ) -> list[int]:
        """Return the ranks in ``group`` of the processes with ``ranks`` in this group.

        A process not in ``group`` gives ``UNDEFINED``; ``PROC_NULL`` gives
        ``PROC_NULL``. ``ranks=None`` means every rank of this group, in order, and
        ``group=None`` the group of ``COMM_WORLD`` (giving world ranks).
        """
        impl = self._live("Translate_ranks")
        members = impl.ranks
        assert members is not None
        # The processes are named by world rank: with no group2, that is the answer.
        target = None if group is None else _as_group("Translate_ranks", group).index
        if ranks is None:
            ranks1 = list(range(len(members)))
        else:
            ranks1 = _index_list(ranks, "Translate_ranks: ranks")
        result: list[int] = []
        for i, r in enumerate(ranks1):
            if r == PROC_NULL:
                result.append(PROC_NULL)
                continue
            if not 0 <= r < len(members):
                raise MPIException(
                    ERR_RANK,
                    f"Translate_ranks: ranks[{i}] = {r} is not a rank of the group "
                    f"{_valid(len(members))}",
                )
            process = members[r]
            result.append(process if target is None else target.get(process, UNDEFINED))
        return result

    @world_call
    def Compare(self, group: Group) -> int:
        """Compare with ``group``: ``IDENT`` (same members, same order), ``SIMILAR``
        (same members, another order) or ``UNEQUAL``."""
        mine = self._live("Compare").ranks
        other = _as_group("Compare", group).ranks
        if mine == other:
            return IDENT
        assert mine is not None and other is not None
        if len(mine) == len(other) and set(mine) == set(other):
            return SIMILAR
        return UNEQUAL

    # -- constructors (§6.3.2) ------------------------------------------------------------
    @world_call
    def Dup(self) -> Group:
        """Return a new group with the same members in the same order (``IDENT``)."""
        ranks = self._live("Dup").ranks
        assert ranks is not None
        return type(self)._new(ranks)

    @classmethod
    @world_call
    def Union(cls, group1: Group, group2: Group) -> Group:
        """The members of ``group1`` in its order, then those of ``group2`` not in
        ``group1`` in ``group2``'s order."""
        first = _as_group("Union", group1, "group1")
        second = _as_group("Union", group2, "group2")
        assert first.ranks is not None and second.ranks is not None
        extra = tuple(r for r in second.ranks if r not in first.index)
        return cls._new(first.ranks + extra)

    @classmethod
    @world_call
    def Intersection(cls, group1: Group, group2: Group) -> Group:
        """The members of ``group1`` that are also in ``group2``, in ``group1``'s order."""
        first = _as_group("Intersection", group1, "group1")
        second = _as_group("Intersection", group2, "group2")
        assert first.ranks is not None
        return cls._new(tuple(r for r in first.ranks if r in second.index))

    Intersect = Intersection

    @classmethod
    @world_call
    def Difference(cls, group1: Group, group2: Group) -> Group:
        """The members of ``group1`` that are not in ``group2``, in ``group1``'s order."""
        first = _as_group("Difference", group1, "group1")
        second = _as_group("Difference", group2, "group2")
        assert first.ranks is not None
        return cls._new(tuple(r for r in first.ranks if r not in second.index))

    @world_call
    def Incl(self, ranks: Sequence[int]) -> Group:
        """The group whose rank ``i`` is the process of rank ``ranks[i]`` in this group.

        The ranks must be valid and distinct (``ERR_RANK``); no ranks gives
        ``GROUP_EMPTY``.
        """
        members = self._live("Incl").ranks
        assert members is not None
        chosen = _index_list(ranks, "Incl: ranks")
        _check_ranks("Incl", chosen, len(members))
        return type(self)._new(tuple(members[r] for r in chosen))

    @world_call
    def Excl(self, ranks: Sequence[int]) -> Group:
        """This group without the processes of ``ranks``, in this group's order.

        The ranks must be valid and distinct (``ERR_RANK``); no ranks gives a new
        group identical to this one.
        """
        members = self._live("Excl").ranks
        assert members is not None
        dropped = _index_list(ranks, "Excl: ranks")
        _check_ranks("Excl", dropped, len(members))
        gone = set(dropped)
        return type(self)._new(tuple(p for i, p in enumerate(members) if i not in gone))

    @world_call
    def Range_incl(self, ranks: Sequence[tuple[int, int, int]]) -> Group:
        """``Incl`` of the ranks that ``(first, last, stride)`` triplets denote.

        A triplet gives ``first, first + stride, ...`` up to ``last``; the stride may
        be negative (with ``first > last``) but not zero.
        """
        members = self._live("Range_incl").ranks
        assert members is not None
        chosen = _expand_ranges("Range_incl", ranks, len(members))
        return type(self)._new(tuple(members[r] for r in chosen))

    @world_call
    def Range_excl(self, ranks: Sequence[tuple[int, int, int]]) -> Group:
        """``Excl`` of the ranks that ``(first, last, stride)`` triplets denote."""
        members = self._live("Range_excl").ranks
        assert members is not None
        gone = set(_expand_ranges("Range_excl", ranks, len(members)))
        return type(self)._new(tuple(p for i, p in enumerate(members) if i not in gone))

    @classmethod
    def Create_from_session_pset(cls, session: Any, pset_name: str) -> Group:
        """The group of process set ``pset_name`` of ``session`` (``Session.Create_group``)."""
        group: Group = session.Create_group(pset_name)
        return group

    # -- destructor (§6.3.3) --------------------------------------------------------------
    @world_call
    def Free(self) -> None:
        """Release this handle, which becomes ``GROUP_NULL`` (``ERR_GROUP`` if it is null).

        Other handles to the group stay valid. Freeing a handle to ``GROUP_EMPTY`` is
        allowed; the constant ``MPI.GROUP_EMPTY`` itself stays usable.
        """
        self._live("Free")
        self._drop()

    # -- handle semantics -----------------------------------------------------------------
    def __repr__(self) -> str:
        ranks = self._impl.ranks
        if ranks is None:
            return "MPI.GROUP_NULL"
        if self._impl is _EMPTY_IMPL:
            return "MPI.GROUP_EMPTY"
        shown = ", ".join(str(r) for r in ranks[:_REPR_RANKS])
        if len(ranks) > _REPR_RANKS:
            shown += ", ..."
        return f"<MPI.Group size={len(ranks)} world ranks ({shown})>"


GROUP_NULL: Group = Group._from_impl(_NULL_IMPL)
GROUP_EMPTY: Group = Group._from_impl(_EMPTY_IMPL)
register(globals(), __all__)  # the module's constants (see core.handle)
