"""Process groups (MPI-3.0 §6.2.1, §6.3): accessors, constructors, Free, handles.

Group operations are local, so most tests run in this process, a world of one rank
(world rank 0): groups over other world ranks are built with ``Group._from_ranks``
(what ``Comm.Get_group`` uses). One test checks ``Get_rank`` on several ranks.
"""

from __future__ import annotations

import pickle
from typing import Any, Callable

import pytest
from conftest import MPI_PRELUDE, RunMPI, assert_ok, mpi_program

from ipympi import MPI

Group = MPI.Group
U = MPI.UNDEFINED


def grp(*ranks: int) -> MPI.Group:
    """A group whose members are the given world ranks, in order."""
    return Group._from_ranks(ranks)


def members(group: MPI.Group) -> list[int]:
    """The world ranks of the group's members, in group order."""
    return group.Translate_ranks()


def error_class(fn: Callable[..., Any], *args: Any) -> int:
    with pytest.raises(MPI.Exception) as info:
        fn(*args)
    return info.value.Get_error_class()


def test_singleton_world() -> None:
    assert MPI.COMM_WORLD.Get_size() == 1
    assert MPI.COMM_WORLD.Get_rank() == 0


def test_exported_names() -> None:
    for name in ("Group", "GROUP_EMPTY", "GROUP_NULL", "IDENT", "SIMILAR", "UNEQUAL"):
        assert name in MPI.__all__
    assert MPI.Group is Group


# --- accessors (§6.3.1) ---------------------------------------------------------------


def test_size_and_rank() -> None:
    g = grp(2, 0, 1)
    assert g.Get_size() == g.size == 3
    assert g.Get_rank() == g.rank == 1  # world rank 0 is at position 1
    assert grp(3, 4).Get_rank() == U  # a process may build a group it is not in
    assert g._ranks == (2, 0, 1)


def test_translate_ranks() -> None:
    g1 = grp(0, 1, 2, 3, 4)
    g2 = grp(4, 2, 0, 7)
    assert g1.Translate_ranks([0, 1, 2, 3, 4], g2) == [2, U, 1, U, 0]
    assert g1.Translate_ranks(None, g2) == [2, U, 1, U, 0]  # None: every rank
    assert g1.Translate_ranks([], g2) == []
    assert Group.Translate_ranks(g2, [3, 0], g1) == [U, 4]
    assert g1.Translate_ranks(ranks=[4], group=g2) == [0]


def test_translate_ranks_proc_null() -> None:
    g1, g2 = grp(5, 6), grp(6)
    assert g1.Translate_ranks([MPI.PROC_NULL, 0, 1], g2) == [MPI.PROC_NULL, U, 0]
    assert g1.Translate_ranks([MPI.PROC_NULL], MPI.GROUP_EMPTY) == [MPI.PROC_NULL]


def test_translate_ranks_to_world() -> None:
    g = grp(3, 1, 0)
    assert g.Translate_ranks([0, 1]) == [3, 1]  # no group2: the world's ranks
    assert g.Translate_ranks() == [3, 1, 0]
    assert MPI.GROUP_EMPTY.Translate_ranks() == []


@pytest.mark.parametrize("bad", [3, -5, MPI.ANY_SOURCE, MPI.UNDEFINED])
def test_translate_ranks_invalid(bad: int) -> None:
    assert error_class(grp(0, 1, 2).Translate_ranks, [0, bad], grp(0)) == MPI.ERR_RANK


def test_translate_ranks_to_empty() -> None:
    assert grp(0, 1).Translate_ranks([0, 1], MPI.GROUP_EMPTY) == [U, U]


def test_compare() -> None:
    g = grp(0, 1, 2)
    assert g.Compare(g) == MPI.IDENT  # the same handle
    assert g.Compare(grp(0, 1, 2)) == MPI.IDENT  # same members, same order
    assert g.Compare(g.Dup()) == MPI.IDENT
    assert g.Compare(grp(2, 0, 1)) == MPI.SIMILAR  # same members, another order
    assert g.Compare(grp(0, 1)) == MPI.UNEQUAL
    assert g.Compare(grp(0, 1, 3)) == MPI.UNEQUAL
    assert g.Compare(MPI.GROUP_EMPTY) == MPI.UNEQUAL
    assert Group.Compare(g, grp(1, 0, 2)) == MPI.SIMILAR  # unbound form
    assert MPI.GROUP_EMPTY.Compare(g.Incl([])) == MPI.IDENT
    assert MPI.CONGRUENT not in {g.Compare(h) for h in (g, grp(1, 0, 2), grp(1))}


# --- set-like constructors (§6.3.2) ---------------------------------------------------


def test_union_order() -> None:
    a, b = grp(0, 1, 2, 3), grp(5, 3, 4, 1)
    assert members(Group.Union(a, b)) == [0, 1, 2, 3, 5, 4]
    assert members(Group.Union(b, a)) == [5, 3, 4, 1, 0, 2]  # not commutative
    assert Group.Union(a, b).Compare(Group.Union(b, a)) == MPI.SIMILAR


def test_intersection_order() -> None:
    a, b = grp(4, 0, 3, 1, 2), grp(2, 1, 9, 4)
    assert members(Group.Intersection(a, b)) == [4, 1, 2]  # in group1's order
    assert members(Group.Intersection(b, a)) == [2, 1, 4]
    assert members(Group.Intersect(a, b)) == [4, 1, 2]  # mpi4py's other name


def test_difference_order() -> None:
    a, b = grp(4, 0, 3, 1, 2), grp(2, 1, 9)
    assert members(Group.Difference(a, b)) == [4, 0, 3]
    assert members(Group.Difference(b, a)) == [9]


def test_set_operations_are_associative() -> None:
    a, b, c = grp(3, 0, 5), grp(1, 5, 2), grp(2, 4, 0, 3)
    for op in (Group.Union, Group.Intersection):
        assert op(op(a, b), c).Compare(op(a, op(b, c))) == MPI.IDENT


def test_set_operations_empty_result_is_group_empty() -> None:
    a, b = grp(0, 1), grp(2, 3)
    assert Group.Intersection(a, b) == MPI.GROUP_EMPTY
    assert Group.Difference(a, grp(1, 0)) == MPI.GROUP_EMPTY
    assert Group.Union(MPI.GROUP_EMPTY, MPI.GROUP_EMPTY) == MPI.GROUP_EMPTY
    assert Group.Union(a, MPI.GROUP_EMPTY).Compare(a) == MPI.IDENT
    assert Group.Union(MPI.GROUP_EMPTY, a).Compare(a) == MPI.IDENT
    assert Group.Difference(a, MPI.GROUP_EMPTY).Compare(a) == MPI.IDENT


def test_set_operations_as_classmethods() -> None:
    a, b = grp(0, 1), grp(1, 2)
    assert members(a.Union(a, b)) == [0, 1, 2]  # called through an instance
    with pytest.raises(TypeError):
        a.Union(b)  # type: ignore[call-arg]  # as in mpi4py: both groups are arguments
    with pytest.raises(TypeError):
        Group.Union(a, [1, 2])  # type: ignore[arg-type]


# --- Incl / Excl -----------------------------------------------------------------------


def test_incl_reorders() -> None:
    g = grp(10, 11, 12, 13)
    sub = g.Incl([3, 0, 2])
    assert members(sub) == [13, 10, 12]
    assert sub.Get_size() == 3
    assert g.Incl([3, 2, 1, 0]).Compare(g) == MPI.SIMILAR
    assert g.Incl((1,)).Translate_ranks([0], g) == [1]


def test_incl_empty_is_group_empty() -> None:
    assert grp(0, 1).Incl([]) == MPI.GROUP_EMPTY
    assert MPI.GROUP_EMPTY.Incl([]) == MPI.GROUP_EMPTY


def test_excl_keeps_order() -> None:
    g = grp(13, 11, 10, 12)
    assert members(g.Excl([2, 0])) == [11, 12]
    assert g.Excl(range(4)) == MPI.GROUP_EMPTY


def test_excl_nothing_is_identical_group() -> None:
    g = grp(2, 0, 1)
    same = g.Excl([])
    assert same.Compare(g) == MPI.IDENT
    assert MPI.GROUP_EMPTY.Excl([]) == MPI.GROUP_EMPTY


@pytest.mark.parametrize("method", ["Incl", "Excl"])
@pytest.mark.parametrize("ranks", [[4], [-1], [MPI.PROC_NULL], [0, 9], [1, 1], [0, 2, 0]])
def test_incl_excl_invalid_ranks(method: str, ranks: list[int]) -> None:
    g = grp(0, 1, 2, 3)
    assert error_class(getattr(g, method), ranks) == MPI.ERR_RANK


def test_incl_excl_message_names_the_rank() -> None:
    with pytest.raises(MPI.Exception) as info:
        grp(0, 1, 2, 3).Incl([0, 5])
    assert "5" in str(info.value) and "Incl" in str(info.value)
    assert error_class(MPI.GROUP_EMPTY.Incl, [0]) == MPI.ERR_RANK


def test_incl_rejects_non_integers() -> None:
    with pytest.raises(TypeError):
        grp(0, 1).Incl([1.0])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        grp(0, 1).Incl("01")  # type: ignore[arg-type]


# --- Range_incl / Range_excl -------------------------------------------------------------


def test_range_incl_expansion() -> None:
    g = grp(*range(10))
    assert members(g.Range_incl([(0, 9, 3)])) == [0, 3, 6, 9]
    assert members(g.Range_incl([(1, 8, 3)])) == [1, 4, 7]  # last not reached exactly
    assert members(g.Range_incl([(0, 13, 7)])) == [0, 7]  # last beyond the group: unused
    assert members(g.Range_incl([(2, 2, 1)])) == [2]
    assert members(g.Range_incl([(2, 2, -4)])) == [2]
    assert members(g.Range_incl([(0, 1, 1), (7, 5, -1)])) == [0, 1, 7, 6, 5]
    assert members(g.Range_incl([[4, 5, 1]])) == [4, 5]


def test_range_incl_negative_stride() -> None:
    g = grp(10, 11, 12, 13, 14)
    assert members(g.Range_incl([(4, 0, -2)])) == [14, 12, 10]
    assert members(g.Range_incl([(3, 0, -2)])) == [13, 11]


def test_range_incl_equals_incl() -> None:
    g = grp(5, 3, 8, 1, 0, 7)
    ranks = [4, 1, 5, 0]
    via_ranges = g.Range_incl([(r, r, 1) for r in ranks])
    assert via_ranges.Compare(g.Incl(ranks)) == MPI.IDENT


def test_range_incl_empty() -> None:
    assert grp(0, 1).Range_incl([]) == MPI.GROUP_EMPTY


def test_range_excl_keeps_group_order() -> None:
    g = grp(19, 18, 17, 16, 15, 14)
    assert members(g.Range_excl([(5, 1, -2)])) == [19, 17, 15]
    assert members(g.Range_excl([(0, 0, 1), (3, 4, 1)])) == [18, 17, 14]
    assert g.Range_excl([]).Compare(g) == MPI.IDENT
    assert g.Range_excl([(0, 5, 1)]) == MPI.GROUP_EMPTY
    ranks = [4, 1]
    assert g.Range_excl([(r, r, 1) for r in ranks]).Compare(g.Excl(ranks)) == MPI.IDENT


@pytest.mark.parametrize("method", ["Range_incl", "Range_excl"])
@pytest.mark.parametrize(
    "ranges",
    [
        [(0, 3, 0)],  # zero stride
        [(3, 0, 1)],  # never reaches last
        [(0, 3, -1)],
        [(0, 4, 1)],  # computed rank 4 outside a group of 4
        [(-1, 2, 1)],
        [(4, 0, -2)],
        [(0, 2, 1), (2, 3, 1)],  # rank 2 twice
        [(0, 3, 3), (3, 3, 1)],
    ],
)
def test_range_errors(method: str, ranges: list[tuple[int, int, int]]) -> None:
    # MPICH reports every invalid range as ERR_ARG, and so does ipympi.
    assert error_class(getattr(grp(0, 1, 2, 3), method), ranges) == MPI.ERR_ARG


def test_range_malformed_triplet() -> None:
    with pytest.raises(ValueError):
        grp(0, 1).Range_incl([(0, 1)])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        grp(0, 1).Range_incl([(0, None, 1)])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        grp(0, 1).Range_excl([5])  # type: ignore[list-item]
    with pytest.raises(OverflowError):  # not a C int, as with mpi4py
        grp(0, 1).Range_incl([(0, 10**15, 1)])


def test_range_numbers_are_taken_as_scalar_arguments() -> None:
    """As mpi4py does: a course's ``(0, (size - 1) / 3, 1)`` works; floats truncate."""
    g = grp(*range(6))
    assert members(g.Range_incl([[0, 5 / 3, 1]])) == [0, 1]
    assert members(g.Range_incl([(5 / 3 + 1, 5, 1.0)])) == [2, 3, 4, 5]
    assert members(g.Range_excl([(0, 0.9, 1)])) == [1, 2, 3, 4, 5]


def test_huge_range_is_rejected_without_enumerating() -> None:
    assert error_class(grp(0, 1).Range_incl, [(0, 2**31 - 1, 1)]) == MPI.ERR_ARG


# --- GROUP_EMPTY, GROUP_NULL, Dup, Free, handles -----------------------------------------


def test_group_empty() -> None:
    e = MPI.GROUP_EMPTY
    assert e.Get_size() == 0 and e.Get_rank() == U
    assert bool(e)
    assert e.Dup() == e
    assert e.Translate_ranks([], grp(0)) == []
    assert repr(e) == "MPI.GROUP_EMPTY"


def test_group_null() -> None:
    null = MPI.GROUP_NULL
    assert not null and Group() == null and Group(None) == null
    assert null._ranks is None
    assert repr(null) == "MPI.GROUP_NULL"


@pytest.mark.parametrize(
    "call",
    [
        lambda g: g.Get_size(),
        lambda g: g.Get_rank(),
        lambda g: g.size,
        lambda g: g.rank,
        lambda g: g.Translate_ranks([0], grp(0)),
        lambda g: grp(0).Translate_ranks([0], g),
        lambda g: g.Compare(grp(0)),
        lambda g: grp(0).Compare(g),
        lambda g: g.Dup(),
        lambda g: Group.Union(g, grp(0)),
        lambda g: Group.Union(grp(0), g),
        lambda g: Group.Intersection(g, grp(0)),
        lambda g: Group.Difference(grp(0), g),
        lambda g: g.Incl([]),
        lambda g: g.Excl([]),
        lambda g: g.Range_incl([]),
        lambda g: g.Range_excl([]),
        lambda g: g.Free(),
    ],
)
def test_group_null_is_not_a_valid_argument(call: Callable[[MPI.Group], Any]) -> None:
    assert error_class(call, MPI.GROUP_NULL) == MPI.ERR_GROUP
    assert error_class(call, Group()) == MPI.ERR_GROUP


def test_dup() -> None:
    g = grp(1, 0)
    d = g.Dup()
    assert d != g  # a new group object ...
    assert d.Compare(g) == MPI.IDENT  # ... with the same members and order


def test_free() -> None:
    g = grp(0, 1)
    other = Group(g)
    sub = g.Incl([1])
    g.Free()
    assert g == MPI.GROUP_NULL and not g
    assert error_class(g.Free) == MPI.ERR_GROUP
    assert other.Get_size() == 2  # other handles, and groups built from it, still work
    assert members(sub) == [1]


def test_free_group_empty() -> None:
    e = Group(MPI.GROUP_EMPTY)
    e.Free()  # allowed: Comm.Get_group may return GROUP_EMPTY
    assert e == MPI.GROUP_NULL
    MPI.GROUP_EMPTY.Free()  # the constant itself stays usable
    assert MPI.GROUP_EMPTY and MPI.GROUP_EMPTY.Get_size() == 0


def test_lowercase_free() -> None:
    g = grp(0)
    g.free()
    assert g == MPI.GROUP_NULL
    g.free()  # null: nothing to do
    MPI.GROUP_EMPTY.free()  # predefined: nothing to do
    assert MPI.GROUP_EMPTY.Get_size() == 0


def test_handle_equality() -> None:
    g = grp(0, 1)
    copy = Group(g)
    assert copy == g
    with pytest.raises(TypeError):
        hash(copy)  # handles are unhashable, as in mpi4py
    assert (copy != g) is False
    assert g != grp(0, 1)  # equal members, another group object
    assert g != MPI.GROUP_NULL and g != MPI.GROUP_EMPTY
    assert g != MPI.COMM_WORLD and g != 0
    assert Group(MPI.GROUP_EMPTY) == MPI.GROUP_EMPTY != g
    with pytest.raises(TypeError):
        Group(5)  # type: ignore[arg-type]


def test_repr() -> None:
    assert repr(grp(2, 0)) == "<MPI.Group size=2 world ranks (2, 0)>"
    assert "..." in repr(grp(*range(40)))


def test_pickle_only_predefined() -> None:
    for constant in (MPI.GROUP_NULL, MPI.GROUP_EMPTY):
        assert pickle.loads(pickle.dumps(constant)) is constant
    with pytest.raises(ValueError):
        pickle.dumps(grp(0))


def test_from_ranks() -> None:
    assert Group._from_ranks([]) == MPI.GROUP_EMPTY
    assert Group._from_ranks(range(3))._ranks == (0, 1, 2)
    with pytest.raises(ValueError):
        Group._from_ranks([1, 1])


def test_create_from_session_pset() -> None:
    session = MPI.Session.Init()
    try:
        group = Group.Create_from_session_pset(session, "mpi://SELF")
        assert group.Get_size() == 1 and group.Get_rank() == 0
        group.Free()
    finally:
        session.Finalize()
    with pytest.raises(MPI.Exception) as info:
        Group.Create_from_session_pset(MPI.SESSION_NULL, "mpi://WORLD")
    assert info.value.Get_error_class() == MPI.ERR_SESSION


def test_errors_go_through_comm_world_handler() -> None:
    seen: list[int] = []
    handler = MPI.Comm.Create_errhandler(lambda comm, code: seen.append(code))
    old = MPI.COMM_WORLD.Get_errhandler()
    MPI.COMM_WORLD.Set_errhandler(handler)
    try:
        with pytest.raises(MPI.Exception):
            grp(0).Incl([3])
        with pytest.raises(MPI.Exception):
            Group.Union(MPI.GROUP_NULL, grp(0))
    finally:
        MPI.COMM_WORLD.Set_errhandler(old)
    assert seen == [MPI.ERR_RANK, MPI.ERR_GROUP]


# --- Get_rank on several ranks ------------------------------------------------------------


def test_get_rank_on_three_ranks(run_mpi: RunMPI) -> None:
    body = """
    world = MPI.Group._from_ranks(range(size))
    assert world.Get_rank() == rank and world.rank == rank
    backwards = MPI.Group._from_ranks(reversed(range(size)))
    assert backwards.Get_rank() == size - 1 - rank
    assert backwards.Compare(world) == MPI.SIMILAR
    assert world.Translate_ranks([rank], backwards) == [size - 1 - rank]
    others = world.Excl([rank])
    assert others.Get_rank() == MPI.UNDEFINED and others.Get_size() == size - 1
    evens = world.Range_incl([(0, size - 1, 2)])
    assert evens.Get_rank() == (rank // 2 if rank % 2 == 0 else MPI.UNDEFINED)
    """
    proc = run_mpi(3, mpi_program(MPI_PRELUDE, body))
    assert_ok(proc, 3)
