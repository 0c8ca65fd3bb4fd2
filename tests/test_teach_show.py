"""``%mpi show``'s view and fetch: a variable on every rank, side by side.

The view is checked on values made by hand (equal, differing, 2-D, large,
mixed, missing, NaN, markup in values); fetch through a real cluster of three
ranks, around a real ``comm.Scatter``.
"""

from __future__ import annotations

from html.parser import HTMLParser

import numpy as np
import pytest

from ipympi.notebook.controller.cluster import Cluster
from ipympi.teach.show import NOT_DEFINED, SMALL_ARRAY, RankView, ReprOnly, fetch, show

pytestmark = pytest.mark.timeout(60)


class _Cells(HTMLParser):
    """The text of each ``<td>`` of a view's HTML, and of those highlighted."""

    def __init__(self, markup: str) -> None:
        super().__init__()
        self.open: list[tuple[bool, list[str]]] = []
        self.cells: list[str] = []
        self.odd: list[str] = []
        self.feed(markup)

    def handle_starttag(self, tag: str, attrs: list) -> None:
        if tag == "td":
            self.open.append(("ipympi-odd" in (dict(attrs).get("class") or ""), []))

    def handle_data(self, data: str) -> None:
        for _, parts in self.open:
            parts.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "td":
            odd, parts = self.open.pop()
            self.cells.append("".join(parts))
            if odd:
                self.odd.append("".join(parts))


def text_lines(view: RankView) -> list[str]:
    return repr(view).splitlines()


# -- the view, from values made by hand -----------------------------------------------------
def test_equal_values_are_shown_once_as_the_same_on_all_ranks() -> None:
    view = RankView({"x": {0: 5, 1: 5, 2: 5}, "v": {r: np.arange(3) for r in range(3)}})
    assert view.same_on_all_ranks("x") and view.same_on_all_ranks("v")
    markup = view._repr_html_()
    assert markup.count("same on all ranks") == 2
    assert markup.count('colspan="3"') == 2
    cells = _Cells(markup)
    assert cells.odd == []
    assert cells.cells.count("5same on all ranks") == 1
    assert text_lines(view) == [
        "name  rank 0  rank 1  rank 2",
        "----  ------  ------  ------",
        "x     same on all ranks: 5",
        "v     same on all ranks:",
        "      [0 1 2]",
        "      (3,) int64",
    ]


def test_differing_entries_of_equal_shape_arrays_are_highlighted_one_by_one() -> None:
    view = RankView({"a": {0: np.array([0, 1, 2]), 1: np.array([0, 9, 2]), 2: np.arange(3)}})
    assert not view.same_on_all_ranks("a")
    cells = _Cells(view._repr_html_())
    assert cells.odd == ["9"]  # only rank 1's middle entry; no whole cell
    lines = text_lines(view)
    assert lines[2] == "a     [0 1 2]     [0  9* 2 ]  [0 1 2]"
    assert lines[3] == "      (3,) int64  (3,) int64  (3,) int64"
    assert lines[-1] == "* differs from the most common value"


def test_without_a_most_common_value_every_differing_entry_is_highlighted() -> None:
    # after a Scatter every rank holds its own part
    view = RankView({"recv": {r: np.arange(3.0) + 3 * r for r in range(3)}})
    cells = _Cells(view._repr_html_())
    assert sorted(cells.odd, key=float) == [f"{x}." for x in range(9)]
    assert text_lines(view)[2].split("  ")[1:] == [
        "[0.* 1.* 2.*]",
        "[3.* 4.* 5.*]",
        "[6.* 7.* 8.*]",
    ]


def test_two_d_arrays_are_grids_with_the_odd_entry_marked() -> None:
    grids = {r: np.arange(6).reshape(2, 3) for r in range(3)}
    grids[2] = grids[2].copy()
    grids[2][1, 0] = -7
    view = RankView({"m": grids})
    markup = view._repr_html_()
    assert markup.count('<table class="ipympi-array">') == 3
    assert _Cells(markup).odd == ["-7"]
    assert text_lines(view)[2:5] == [
        "m     [[0 1 2]      [[0 1 2]      [[ 0   1   2 ]",
        "       [3 4 5]]      [3 4 5]]      [-7*  4   5 ]]",
        "      (2, 3) int64  (2, 3) int64  (2, 3) int64",
    ]


def test_large_arrays_are_summarised_and_the_differing_one_counted() -> None:
    big = {r: np.arange(1000) for r in range(3)}
    big[1] = big[1].copy()
    big[1][500] = 0
    view = RankView({"big": big})
    markup = view._repr_html_()
    assert '<table class="ipympi-array">' not in markup  # no grid of a thousand numbers
    cells = _Cells(markup)
    assert len(cells.odd) == 1
    assert "differs from rank 0 at 1 of 1000" in cells.odd[0]
    lines = repr(view)
    for shown in ("1000 items", "min 0  mean 499.5  max 999", "0 1 2 ... 997 998 999"):
        assert shown in lines
    assert "(1000,) int64" in lines
    assert f"{SMALL_ARRAY + 1} items" in repr(RankView({"f": {0: np.zeros(SMALL_ARRAY + 1)}}))


def test_summary_of_floats_counts_nans_and_keeps_them_out_of_the_statistics() -> None:
    values = np.arange(100.0)
    values[[3, 50]] = np.nan
    text = repr(RankView({"f": {0: values, 1: values.copy()}}))
    assert "same on all ranks" in text
    assert "min 0.  mean 49.9694  max 99.  (2 NaN)" in text


def test_mixed_types_are_named_and_whole_cells_highlighted() -> None:
    view = RankView({"v": {0: [1, 2], 1: (1, 2), 2: [1, 2], 3: {"k": "<b>"}}})
    cells = _Cells(view._repr_html_())
    assert cells.odd == ["(1, 2)", "{'k': '<b>'}"]
    assert "v: types differ: list on ranks 0,2; tuple on rank 1; dict on rank 3" in repr(view)


def test_shape_and_dtype_mismatches_are_pointed_out() -> None:
    view = RankView({"d": {0: np.arange(3), 1: np.arange(3.0), 2: np.arange(4), 3: np.arange(3)}})
    text = repr(view)
    assert "d: shapes differ: (3,) on ranks 0,1,3; (4,) on rank 2" in text
    assert "d: dtypes differ: int64 on ranks 0,2,3; float64 on rank 1" in text
    markup = view._repr_html_()
    assert '<div class="ipympi-note ipympi-odd">(3,) float64</div>' in markup
    assert '<div class="ipympi-note ipympi-odd">(4,) int64</div>' in markup
    # same values, another dtype: no entry differs, the dtype does
    view = RankView({"e": {0: np.arange(3), 1: np.arange(3.0), 2: np.arange(3)}})
    assert _Cells(view._repr_html_()).odd == []
    assert "e: dtypes differ: int64 on ranks 0,2; float64 on rank 1" in repr(view)
    assert not view.same_on_all_ranks("e")


def test_a_name_missing_on_one_rank_shows_not_defined_there() -> None:
    view = RankView({"p": {0: 3, 1: 3, 2: NOT_DEFINED}, "q": {0: 1, 1: 1}})
    cells = _Cells(view._repr_html_())
    assert cells.odd == ["not defined", "not defined"]
    text = repr(view)
    assert "p: not defined on rank 2" in text
    assert "q: not defined on rank 2" in text  # a rank left out of the mapping
    assert text_lines(view)[2] == "p     3       3       not defined *"
    nowhere = RankView({"z": {0: NOT_DEFINED, 1: NOT_DEFINED}})
    assert "not defined on any rank" in repr(nowhere)
    assert "not defined on any rank" in nowhere._repr_html_()


def test_nan_equals_nan() -> None:
    nan = float("nan")
    view = RankView(
        {
            "f": {0: nan, 1: float("nan")},
            "l": {0: [1.0, nan], 1: [1.0, float("nan")]},
            "a": {0: np.array([1.0, nan]), 1: np.array([1.0, nan])},
        }
    )
    assert all(view.same_on_all_ranks(name) for name in "fla")
    arrays = {0: np.array([nan, 2.0]), 1: np.array([nan, 5.0]), 2: np.array([nan, 2.0])}
    view = RankView({"b": arrays})
    assert not view.same_on_all_ranks("b")
    assert _Cells(view._repr_html_()).odd == ["5."]  # the NaNs agree


def test_markup_in_names_values_and_reprs_is_escaped() -> None:
    view = RankView(
        {
            "s": {0: "<b>bold</b>", 1: "<b>bold</b>", 2: "<script>x</script>"},
            "r": {0: ReprOnly("<Lock & co>", "cannot be pickled: <why>"), 1: 1},
            "arr": {0: np.array(["<i>", "ok"]), 1: np.array(["<i>", "no"])},
        }
    )
    markup = view._repr_html_()
    for raw in ("<b>", "<script>", "<Lock", "<why>", "<i>"):
        assert raw not in markup
    for escaped in ("&lt;b&gt;bold&lt;/b&gt;", "&lt;script&gt;", "&lt;Lock &amp; co&gt;"):
        assert escaped in markup
    assert "&lt;why&gt;" in markup
    assert "'<b>bold</b>'" in repr(view)  # the text form stays as typed


def test_long_reprs_are_truncated_and_wide_tables_become_blocks_per_rank() -> None:
    view = RankView({"t": {0: "x" * 500, 1: "y"}, "w": {r: np.arange(40) * r for r in range(4)}})
    lines = text_lines(view)
    assert max(len(line) for line in lines) <= 100
    assert lines[0] == "rank 0:"
    assert lines[1].startswith("  t = 'xxxxxxxxxx") and "..." in lines[1]
    assert len(lines[1]) < len("  t = ") + 70
    assert [line for line in lines if line.startswith("rank ")] == [
        "rank 0:",
        "rank 1:",
        "rank 2:",
        "rank 3:",
    ]
    assert lines[2] == "  w = [0  0* 0* 0* 0* 0* 0* 0* 0* 0* 0* 0* 0* 0* 0* 0*"  # wrapped after 16
    assert lines[3].startswith("       0* 0* 0*")


def test_mimebundle_has_text_and_html_and_bad_input_is_refused() -> None:
    view = RankView({"x": {0: 1, 1: 2}})
    bundle = view._repr_mimebundle_()
    assert bundle == {"text/plain": repr(view), "text/html": view._repr_html_()}
    assert repr(RankView({})) == "no variables to show"
    with pytest.raises(TypeError, match="name"):
        RankView([("x", {0: 1})])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be ints"):
        RankView({"x": {"0": 1}})
    with pytest.raises(ValueError, match="at least one rank"):
        RankView({"x": {}})
    with pytest.raises(KeyError, match="'y' is not shown"):
        view.same_on_all_ranks("y")


# -- fetch and show through a real cluster -------------------------------------------------
@pytest.fixture(scope="module")
def cluster():
    with Cluster(3) as c:
        c.start()
        yield c


def run(cluster: Cluster, code: str) -> None:
    cluster.execute(code, display=False)


def test_show_around_a_scatter(cluster: Cluster) -> None:
    run(
        cluster,
        "import numpy as np\n"
        "sendbuf = np.arange(9.0) if rank == 0 else None\n"
        "recvbuf = np.zeros(3)\n",
    )
    before = show(cluster, ["sendbuf", "recvbuf"])
    assert before.same_on_all_ranks("recvbuf")
    assert not before.same_on_all_ranks("sendbuf")
    assert "sendbuf: types differ: ndarray on rank 0; NoneType on ranks 1,2" in repr(before)
    run(cluster, "comm.Scatter(sendbuf, recvbuf, root=0)")
    after = show(cluster, "recvbuf")
    for rank in range(3):
        assert np.array_equal(after.values["recvbuf"][rank], np.arange(3.0) + 3 * rank)
    assert len(_Cells(after._repr_html_()).odd) == 9


def test_fetch_asks_once_for_all_names_and_honours_targets(cluster: Cluster, monkeypatch) -> None:
    run(cluster, "first, second = rank, [rank] * 2")
    calls = []
    real_apply = Cluster.apply

    def counting_apply(self, func, *args, **kwargs):
        calls.append(func.__name__)
        return real_apply(self, func, *args, **kwargs)

    monkeypatch.setattr(Cluster, "apply", counting_apply)
    values = fetch(cluster, ["first", "second", "first"])
    assert calls == ["collect_on_rank"]
    assert values == {"first": {0: 0, 1: 1, 2: 2}, "second": {0: [0, 0], 1: [1, 1], 2: [2, 2]}}
    assert fetch(cluster, "first", targets="::2") == {"first": {0: 0, 2: 2}}


def test_a_name_missing_on_one_rank_or_everywhere(cluster: Cluster) -> None:
    run(cluster, "if rank != 1:\n    partly = rank * 10")
    assert fetch(cluster, "partly") == {"partly": {0: 0, 1: NOT_DEFINED, 2: 20}}
    assert "partly: not defined on rank 1" in repr(show(cluster, "partly"))
    with pytest.raises(NameError, match="'nowhere_at_all' is not defined on any rank") as info:
        fetch(cluster, ["partly", "nowhere_at_all"])
    assert info.value.name == "nowhere_at_all"
    with pytest.raises(NameError, match="not defined on rank 1"):
        fetch(cluster, "partly", targets=[1])


def test_unpicklable_values_come_back_as_their_repr(cluster: Cluster) -> None:
    run(
        cluster,
        "import threading\n"
        "square = lambda x: x * x\n"
        "guard = threading.Lock()\n"
        "class OnlyHere:\n"
        "    def __repr__(self):\n"
        "        return f'OnlyHere(rank={rank})'\n"
        "here = OnlyHere()\n"
        "plain = 7\n",
    )
    values = fetch(cluster, ["square", "guard", "here", "plain"])
    assert values["plain"] == {0: 7, 1: 7, 2: 7}
    for rank in range(3):
        square, guard, here = (values[n][rank] for n in ("square", "guard", "here"))
        assert isinstance(square, ReprOnly) and square.text.startswith("<function <lambda>")
        assert "cannot be pickled" in square.reason
        assert isinstance(guard, ReprOnly) and "lock" in guard.text
        assert isinstance(here, ReprOnly) and here.text == f"OnlyHere(rank={rank})"
        assert "cannot be unpickled here" in here.reason
    view = RankView(values)
    assert "repr only: cannot be pickled" in view._repr_html_()
    assert "OnlyHere(rank=2)" in repr(view)


def test_bad_names_are_refused(cluster: Cluster) -> None:
    with pytest.raises(ValueError, match=r"'a\.b' is not a variable name"):
        fetch(cluster, ["a.b"])
    with pytest.raises(ValueError, match="at least one variable name"):
        fetch(cluster, [])
