"""``%mpi show NAME...``: a variable on every rank, side by side.

Looking at ``a`` before and after a ``comm.Scatter`` is how a learner sees what
the call did. :func:`fetch` brings each name's value from the target ranks in
one request; :class:`RankView` shows them as one table (a row per name, a
column per rank), as HTML in a notebook and as text in a terminal. Arrays of
up to :data:`SMALL_ARRAY` elements are shown in full, larger ones summarised,
anything else by a truncated repr. A value equal on every rank is shown once;
otherwise the array entries (for arrays of one shape) or the cells that differ
from the most common value are highlighted, all of them when no value is more
common than every other; differing shapes, dtypes and types are named.

NaN equals NaN here. A name missing on some ranks shows as "not defined"
there; a value that cannot be pickled (a lambda, a lock) shows as its repr.
"""

from __future__ import annotations

import html
import pickle
import re
import reprlib
from collections.abc import Mapping, Sequence
from typing import Any, Callable, NamedTuple

import numpy as np

from ..core.ranksets import format_ranks, parse_targets

__all__ = [
    "NOT_DEFINED",
    "SMALL_ARRAY",
    "RankView",
    "ReprOnly",
    "collect_on_rank",
    "fetch",
    "reprs_on_rank",
    "show",
]

SMALL_ARRAY = 64  # arrays up to this many elements are shown in full
ROW_ITEMS = 16  # a 1-D array wraps after this many numbers
EDGE_ITEMS = 3  # first and last items of a summarised array
TEXT_WIDTH = 100  # a text table wider than this becomes one block per rank
REPR_CHARS = 60  # a repr in a cell is cut to this length
RANK_REPR_CHARS = 2000  # the longest repr a rank sends back

_MARK = "*"
_ODD = ' class="ipympi-odd"'
_LEGEND = "differs from the most common value"
_CSS = (
    ".ipympi-show table{border-collapse:collapse}.ipympi-show .ipympi-odd{background:#ffd6d6}"
    ".ipympi-show th,.ipympi-show td{padding:2px 8px;vertical-align:top;text-align:left;"
    "border:1px solid #ddd}.ipympi-show table.ipympi-array td{padding:0 4px;border:none;"
    "text-align:right;font-family:monospace}.ipympi-show .ipympi-note{font-size:smaller;"
    "color:#666}.ipympi-show .ipympi-same{font-size:smaller;color:#2a7a2a}"
    ".ipympi-show .ipympi-undefined{color:#888;font-style:italic}"
    ".ipympi-show .ipympi-odd{font-weight:bold}"
)


class _NotDefined:
    """The value of a name on a rank where it is not defined: :data:`NOT_DEFINED`."""

    def __repr__(self) -> str:
        return "not defined"

    def __reduce__(self) -> str:
        return "NOT_DEFINED"


NOT_DEFINED = _NotDefined()


class ReprOnly(NamedTuple):
    """A value that could not be brought from its rank: its repr there, and why."""

    text: str
    reason: str

    def __repr__(self) -> str:
        return self.text


def _make_repr(limit: int, items: int) -> reprlib.Repr:
    shortener = reprlib.Repr()
    shortener.maxlevel = 3
    shortener.maxstring = shortener.maxother = shortener.maxlong = limit
    shortener.maxlist = shortener.maxtuple = shortener.maxset = shortener.maxfrozenset = items
    shortener.maxdeque = shortener.maxarray = shortener.maxdict = items
    return shortener


_CELL_REPR = _make_repr(REPR_CHARS, 10)
_RANK_REPR = _make_repr(RANK_REPR_CHARS, 100)


def _cut(text: str, limit: int = REPR_CHARS) -> str:
    """``text`` on one line, at most ``limit`` characters long."""
    text = re.sub(r"\s*\n\s*", " ", text)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _bounded_repr(value: Any, shortener: reprlib.Repr = _CELL_REPR, limit: int = REPR_CHARS) -> str:
    try:
        text = shortener.repr(value)
    except Exception as exc:
        text = f"<{type(value).__name__} object; its repr failed: {type(exc).__name__}: {exc}>"
    return _cut(text, limit)


# -- on the ranks ------------------------------------------------------------------------
def _user_namespace() -> dict[str, Any]:
    from IPython import get_ipython

    shell = get_ipython()
    if shell is None:
        raise RuntimeError("show reads a rank's variables: it runs on the ranks of a session")
    return shell.user_ns


def collect_on_rank(names: Sequence[str]) -> dict[str, tuple | None]:
    """On a rank: each name's value pickled, its repr if it cannot be, None if undefined."""
    namespace = _user_namespace()
    found: dict[str, tuple | None] = {}
    for name in names:
        if name not in namespace:
            found[name] = None
            continue
        value = namespace[name]
        try:
            found[name] = ("pickle", pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
        except Exception as exc:
            reason = f"cannot be pickled: {type(exc).__name__}: {exc}"
            found[name] = ("repr", _bounded_repr(value, _RANK_REPR, RANK_REPR_CHARS), reason)
    return found


def reprs_on_rank(names: Sequence[str]) -> dict[str, str | None]:
    """On a rank: each name's repr (bounded), None if undefined."""
    namespace = _user_namespace()
    return {
        name: _bounded_repr(namespace[name], _RANK_REPR, RANK_REPR_CHARS)
        if name in namespace
        else None
        for name in names
    }


# -- on the controller -------------------------------------------------------------------
def _check_names(names: str | Sequence[str]) -> list[str]:
    wanted = [names] if isinstance(names, str) else list(names)
    if not wanted:
        raise ValueError("show needs at least one variable name")
    for name in wanted:
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"{name!r} is not a variable name (show takes names like a, recvbuf)")
    return list(dict.fromkeys(wanted))


def _ranks_label(ranks: Sequence[int]) -> str:
    return f"rank{'s' * (len(ranks) > 1)} {format_ranks(ranks)}"


def fetch(
    cluster: Any, names: str | Sequence[str], targets: Any = None
) -> dict[str, dict[int, Any]]:
    """Each name's value on each target rank: ``{name: {rank: value}}``, in one request.

    On a rank where a name is undefined its value is :data:`NOT_DEFINED`; a
    value that cannot be pickled there (or unpickled here) is a
    :class:`ReprOnly`. A name undefined on every target rank raises NameError.
    """
    wanted = _check_names(names)
    ranks = parse_targets(targets, cluster.n)
    replies = cluster.apply(collect_on_rank, wanted, targets=ranks)
    values: dict[str, dict[int, Any]] = {name: {} for name in wanted}
    unreadable: dict[int, dict[str, str]] = {}  # rank -> name -> why it cannot be read here
    for rank, reply in zip(ranks, replies):
        for name in wanted:
            entry = reply[name]
            if entry is None:
                values[name][rank] = NOT_DEFINED
            elif entry[0] == "repr":
                values[name][rank] = ReprOnly(entry[1], entry[2])
            else:
                try:
                    values[name][rank] = pickle.loads(entry[1])
                except Exception as exc:
                    why = f"cannot be unpickled here: {type(exc).__name__}: {exc}"
                    unreadable.setdefault(rank, {})[name] = why
    if unreadable:  # rare (a class defined only on the ranks): one more request for reprs
        asked = sorted({name for why in unreadable.values() for name in why})
        texts = cluster.apply(reprs_on_rank, asked, targets=sorted(unreadable))
        for (rank, reasons), text in zip(sorted(unreadable.items()), texts):
            for name, reason in reasons.items():
                shown = text[name]
                values[name][rank] = NOT_DEFINED if shown is None else ReprOnly(shown, reason)
    nowhere = [n for n in wanted if all(v is NOT_DEFINED for v in values[n].values())]
    if nowhere:
        listed = ", ".join(repr(n) for n in nowhere)
        said = "name {} is" if len(nowhere) == 1 else "names {} are"
        where = "any rank" if len(ranks) == cluster.n else _ranks_label(ranks)
        error = NameError(f"{said.format(listed)} not defined on {where}")
        error.name = nowhere[0]
        raise error
    return values


def show(cluster: Any, names: str | Sequence[str], targets: Any = None) -> RankView:
    """The names' values on the target ranks, side by side (see :class:`RankView`)."""
    return RankView(fetch(cluster, names, targets))


# -- comparing ---------------------------------------------------------------------------
def _plain(item: Any) -> Any:
    return item.item() if isinstance(item, np.generic) else item


def _is_nan(x: Any) -> bool:
    try:
        return bool(x != x)
    except Exception:
        return False


def _equal(a: Any, b: Any) -> bool:
    """Equal values of one type; NaN equals NaN; arrays need the same shape and dtype."""
    try:
        if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
            if not (isinstance(a, np.ndarray) and isinstance(b, np.ndarray)):
                return False
            if a.shape != b.shape or a.dtype != b.dtype:
                return False
            if a.dtype.kind in "biufcmMSUV":
                return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
            return all(_equal(x, y) for x, y in zip(a.flat, b.flat))
        if type(a) is not type(b):
            return False
        if isinstance(a, (list, tuple)):
            return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
        if isinstance(a, dict):
            return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
        return a is b or (_is_nan(a) and _is_nan(b)) or bool(a == b)
    except Exception:  # no usable ==: compare what a reader would see
        return _bounded_repr(a, _RANK_REPR) == _bounded_repr(b, _RANK_REPR)


def _item_equal(x: Any, y: Any) -> bool:
    """Array entries: equal numbers are equal whatever their dtype."""
    x, y = _plain(x), _plain(y)
    numbers = (bool, int, float, complex)
    if isinstance(x, numbers) and isinstance(y, numbers):
        return bool(x == y) or (_is_nan(x) and _is_nan(y))
    return _equal(x, y)


def _groups(items: Sequence[Any], same: Callable[[Any, Any], bool]) -> list[list[int]]:
    """Indices of ``items`` grouped by ``same``, in order of first appearance."""
    groups: list[list[int]] = []
    for i, item in enumerate(items):
        for group in groups:
            if same(items[group[0]], item):
                group.append(i)
                break
        else:
            groups.append([i])
    return groups


def _majority(groups: list[list[int]]) -> list[int] | None:
    """The group larger than every other one, if there is one."""
    sizes = sorted((len(g) for g in groups), reverse=True)
    if len(sizes) == 1 or sizes[0] > sizes[1]:
        return max(groups, key=len)
    return None


def _count_differences(value: Any, reference: np.ndarray) -> int | None:
    """Entries of ``value`` that differ from ``reference`` (same shape), or None if unknown."""
    try:
        same = np.asarray(value == reference, dtype=bool)
        if value.dtype.kind in "fc" and reference.dtype.kind in "fc":
            same |= np.isnan(value) & np.isnan(reference)
    except Exception:
        return None
    return int(same.size - np.count_nonzero(same)) if same.shape == reference.shape else None


def _kind(value: Any) -> str:
    return "repr only" if isinstance(value, ReprOnly) else type(value).__name__


class _Row:
    """One name across the ranks: whether it is the same everywhere, and what differs."""

    def __init__(self, name: str, ranks: list[int], cells: list[Any]) -> None:
        self.name = name
        self.cells = cells
        self.same = len(_groups(cells, _equal)) == 1
        self.odd_cells: set[int] = set()  # cells that differ as a whole
        self.odd_items: dict[int, np.ndarray] = {}  # cell -> mask of the entries that differ
        self.odd_captions: set[int] = set()  # cells whose shape or dtype differs
        self.cell_notes: dict[int, str] = {}
        self.notes: list[str] = []
        if not self.same:
            self._compare(ranks)

    def _compare(self, ranks: list[int]) -> None:
        cells = self.cells
        defined = [i for i, v in enumerate(cells) if v is not NOT_DEFINED]
        missing = [ranks[i] for i, v in enumerate(cells) if v is NOT_DEFINED]
        if missing:
            self.notes.append(f"not defined on {_ranks_label(missing)}")
        arrays = [cells[i] for i in defined]
        all_arrays = all(isinstance(a, np.ndarray) for a in arrays)
        self._note_kinds(ranks, defined, all_arrays)
        one_shape = all_arrays and len({a.shape for a in arrays}) == 1
        if one_shape and 0 < arrays[0].size <= SMALL_ARRAY:
            self.odd_cells = {i for i, v in enumerate(cells) if v is NOT_DEFINED}
            self._compare_entries(defined)
            return
        main = _majority(_groups(cells, _equal))
        self.odd_cells = {i for i in range(len(cells)) if main is None or i not in main}
        if one_shape and main is not None and cells[main[0]] is not NOT_DEFINED:
            reference = cells[main[0]]
            for i in sorted(self.odd_cells.intersection(defined)):
                counted = _count_differences(cells[i], reference)
                if counted:
                    where = f"rank {ranks[main[0]]} at {counted} of {reference.size}"
                    self.cell_notes[i] = f"differs from {where}"

    def _note_kinds(self, ranks: list[int], defined: list[int], all_arrays: bool) -> None:
        """Name the types, or shapes and dtypes of arrays, that differ between ranks."""
        if all_arrays:
            aspects = [("shapes", lambda v: str(v.shape)), ("dtypes", lambda v: str(v.dtype))]
        else:
            aspects = [("types", _kind)]
        for label, describe in aspects:
            kinds = [describe(self.cells[i]) for i in defined]
            groups = _groups(kinds, str.__eq__)
            if len(groups) < 2:
                continue
            said = [
                f"{kinds[g[0]]} on {_ranks_label([ranks[defined[i]] for i in g])}" for g in groups
            ]
            self.notes.append(f"{label} differ: " + "; ".join(said))
            if all_arrays:
                main = _majority(groups)
                self.odd_captions.update(defined[i] for g in groups if g is not main for i in g)

    def _compare_entries(self, defined: list[int]) -> None:
        """Mark each array entry that differs from the most common one at its place."""
        arrays = [self.cells[i] for i in defined]
        masks = [np.zeros(arrays[0].shape, dtype=bool) for _ in arrays]
        for index in np.ndindex(arrays[0].shape):
            groups = _groups([a[index] for a in arrays], _item_equal)
            if len(groups) > 1:
                main = _majority(groups)
                for k, mask in enumerate(masks):
                    mask[index] = main is None or k not in main
        self.odd_items = {i: mask for i, mask in zip(defined, masks) if mask.any()}


# -- one value, as parts both renderings share ---------------------------------------------
def _format_item(item: Any) -> str:
    item = _plain(item)
    if isinstance(item, (bool, int)):
        return str(item)
    if isinstance(item, float):
        text = format(item, ".6g")
        return text + "." if text.lstrip("-").isdigit() else text  # 1. is a float, 1 an int
    if isinstance(item, complex):
        return f"{item.real:.4g}{item.imag:+.4g}j"
    return _bounded_repr(item, _CELL_REPR, 20)


def _array_stats(array: np.ndarray) -> str:
    """min / mean / max of a numeric array (NaNs left out, and counted)."""
    kind = array.dtype.kind
    try:
        if kind == "b":
            return f"True at {int(np.count_nonzero(array))} of {array.size}"
        if kind == "c":
            return f"mean {_format_item(array.mean())}"
        if kind not in "iuf":
            return ""
        nans = int(np.count_nonzero(np.isnan(array))) if kind == "f" else 0
        if nans == array.size:
            return "all NaN"
        low: Any = np.nanmin(array)
        mean: Any = np.nanmean(array)
        high: Any = np.nanmax(array)
    except (TypeError, ValueError, ArithmeticError):
        return ""
    nan_note = f"  ({nans} NaN)" if nans else ""
    shown = [_format_item(x) for x in (low, mean, high)]
    return "min {}  mean {}  max {}".format(*shown) + nan_note


def _summary(array: np.ndarray) -> list[str]:
    """A large (or empty) array in a few lines: size, statistics, first and last items."""
    if not array.size:
        return ["empty"]
    flat = array.reshape(-1)
    first = " ".join(_format_item(x) for x in flat[:EDGE_ITEMS])
    last = " ".join(_format_item(x) for x in flat[-EDGE_ITEMS:])
    stats = _array_stats(array)
    return [f"{array.size} items", *([stats] if stats else []), f"{first} ... {last}"]


class _Shown:
    """How one value is shown: a grid of entries, or lines of text; and a caption."""

    def __init__(self, value: Any, mask: np.ndarray | None) -> None:
        self.grid: list[list[tuple[str, bool]]] = []  # rows of (entry, differs)
        self.nested = False  # the grid has rows of rows (2-D and more)
        self.bracketed = False  # not a 0-d array
        self.lines: list[str] = []
        self.caption = ""
        self.undefined = value is NOT_DEFINED
        self.marked = mask is not None
        if self.undefined:
            self.lines = ["not defined"]
        elif isinstance(value, ReprOnly):
            self.lines = [_cut(value.text)]
            self.caption = _cut(f"repr only: {value.reason}")
        elif isinstance(value, np.ndarray):
            shape = f"{value.shape}" if value.ndim else "0-d"
            self.caption = f"{shape} {value.dtype}"
            if 0 < value.size <= SMALL_ARRAY:
                self._fill_grid(value, mask)
            else:
                self.lines = _summary(value)
        elif isinstance(value, np.generic):
            self.lines, self.caption = [_format_item(value)], str(value.dtype)
        else:
            self.lines = [_bounded_repr(value)]

    def _fill_grid(self, array: np.ndarray, mask: np.ndarray | None) -> None:
        if mask is None:
            mask = np.zeros(array.shape, dtype=bool)
        flat, odd = array.reshape(-1), mask.reshape(-1)
        self.nested = array.ndim > 1  # a grid; more dimensions as rows of the last axis
        self.bracketed = array.ndim > 0
        width = array.shape[-1] if self.nested else ROW_ITEMS  # a 1-D row wraps
        rows = [range(i, min(i + width, flat.size)) for i in range(0, flat.size, width)]
        self.grid = [[(_format_item(flat[j]), bool(odd[j])) for j in row] for row in rows]

    def text(self) -> list[str]:
        if not self.grid:
            return [*self.lines, *([self.caption] if self.caption else [])]
        width = max(len(text) for row in self.grid for text, _ in row)
        lines = []
        for k, row in enumerate(self.grid):
            items = [
                text.rjust(width) + ((_MARK if odd else " ") if self.marked else "")
                for text, odd in row
            ]
            first, last = k == 0, k == len(self.grid) - 1
            if not self.bracketed:
                lines.append(items[0])
            elif self.nested:
                lines.append(("[[" if first else " [") + " ".join(items) + ("]]" if last else "]"))
            else:
                lines.append(("[" if first else " ") + " ".join(items) + ("]" if last else ""))
        return [*lines, self.caption]

    def html(self, odd_caption: bool) -> str:
        esc = html.escape
        if self.undefined:
            return '<span class="ipympi-undefined">not defined</span>'
        if self.grid:
            rows = (
                "".join(f"<td{_ODD * odd}>{esc(t)}</td>" for t, odd in row) for row in self.grid
            )
            body = '<table class="ipympi-array"><tr>' + "</tr><tr>".join(rows) + "</tr></table>"
        else:
            body = "".join(f"<div><code>{esc(line)}</code></div>" for line in self.lines)
        if self.caption:
            kind = "ipympi-note ipympi-odd" if odd_caption else "ipympi-note"
            body += f'<div class="{kind}">{esc(self.caption)}</div>'
        return body


# -- the view ----------------------------------------------------------------------------
class RankView:
    """Variables on every rank side by side; displays as a table (HTML or text).

    ``values`` maps each name to its value per rank, as :func:`fetch` returns
    it; a rank missing from a name's mapping counts as "not defined" there.
    """

    def __init__(self, values: Mapping[str, Mapping[int, Any]]) -> None:
        if not isinstance(values, Mapping):
            raise TypeError(
                f"RankView needs {{name: {{rank: value}}}}, not {type(values).__name__}"
            )
        for name, per_rank in values.items():
            if not isinstance(name, str) or not isinstance(per_rank, Mapping):
                raise TypeError(f"RankView needs {{name: {{rank: value}}}}; got {name!r}")
            if not all(isinstance(r, int) and not isinstance(r, bool) for r in per_rank):
                raise TypeError(f"the ranks of {name!r} must be ints, not {list(per_rank)!r}")
        self.values = {name: dict(per_rank) for name, per_rank in values.items()}
        self.ranks = sorted({r for per_rank in self.values.values() for r in per_rank})
        if self.values and not self.ranks:
            raise ValueError("RankView needs the value of at least one rank")
        self._rows = [
            _Row(name, self.ranks, [per_rank.get(r, NOT_DEFINED) for r in self.ranks])
            for name, per_rank in self.values.items()
        ]

    def same_on_all_ranks(self, name: str) -> bool:
        """Whether ``name`` has one value on every rank shown."""
        for row in self._rows:
            if row.name == name:
                return row.same
        raise KeyError(f"{name!r} is not shown here; shown: {', '.join(self.values)}")

    def _highlights(self) -> bool:
        return any(r.odd_cells or r.odd_items or r.odd_captions for r in self._rows)

    # -- HTML --------------------------------------------------------------------------
    def _repr_html_(self) -> str:
        if not self._rows:
            return "<p>no variables to show</p>"
        esc = html.escape
        head = "<th>name</th>" + "".join(f"<th>rank {r}</th>" for r in self.ranks)
        body = []
        for row in self._rows:
            notes = "".join(f'<div class="ipympi-note">{esc(n)}</div>' for n in row.notes)
            cells = f"<th><code>{esc(row.name)}</code>{notes}</th>"
            span = f'<td colspan="{len(self.ranks)}">'
            if row.same and row.cells[0] is NOT_DEFINED:
                cells += span + '<span class="ipympi-undefined">not defined on any rank</span></td>'
            elif row.same:
                same = '<div class="ipympi-same">same on all ranks</div>'
                cells += span + _Shown(row.cells[0], None).html(False) + same + "</td>"
            for i, value in enumerate([] if row.same else row.cells):
                shown = _Shown(value, row.odd_items.get(i)).html(i in row.odd_captions)
                if i in row.cell_notes:
                    shown += f'<div class="ipympi-note">{esc(row.cell_notes[i])}</div>'
                cells += f"<td{_ODD if i in row.odd_cells else ''}>{shown}</td>"
            body.append(f"<tr>{cells}</tr>")
        legend = ""
        if self._highlights():
            said = f"<span{_ODD}>highlighted</span>: {_LEGEND}"
            legend = f'<div class="ipympi-note">{said}</div>'
        return (
            f'<div class="ipympi-show"><style>{_CSS}</style><table>'
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>{legend}</div>"
        )

    # -- text --------------------------------------------------------------------------
    def _cell_lines(self, row: _Row, i: int) -> list[str]:
        lines = _Shown(row.cells[i], row.odd_items.get(i)).text()
        if i in row.odd_cells:
            lines[0] += " " + _MARK
        if i in row.odd_captions:
            lines[-1] += " " + _MARK
        if i in row.cell_notes:
            lines.append(row.cell_notes[i])
        return lines

    def __repr__(self) -> str:
        if not self._rows:
            return "no variables to show"
        lines = self._columns() or self._blocks()
        if self._highlights():
            lines.append(f"{_MARK} {_LEGEND}")
        lines += [f"{row.name}: {note}" for row in self._rows for note in row.notes]
        return "\n".join(lines)

    def _columns(self) -> list[str] | None:
        """Ranks as columns, or None if they do not fit in TEXT_WIDTH characters."""
        heads = ["name"] + [f"rank {r}" for r in self.ranks]
        widths = [max(len(heads[0]), *(len(row.name) for row in self._rows))]
        widths += [len(h) for h in heads[1:]]
        cells = {}
        for row in self._rows:
            for i in [] if row.same else range(len(row.cells)):
                cells[row.name, i] = self._cell_lines(row, i)
                widths[i + 1] = max(widths[i + 1], *(len(t) for t in cells[row.name, i]))
        if sum(widths) + 2 * (len(widths) - 1) > TEXT_WIDTH:
            return None
        lines = ["  ".join(h.ljust(w) for h, w in zip(heads, widths)).rstrip()]
        lines.append("  ".join("-" * w for w in widths))
        for row in self._rows:
            lead = row.name.ljust(widths[0]) + "  "
            if row.same:
                value = _Shown(row.cells[0], None).text()
                if row.cells[0] is NOT_DEFINED:
                    lines.append(lead + "not defined on any rank")
                elif len(value) == 1:
                    lines.append(f"{lead}same on all ranks: {value[0]}")
                else:
                    lines.append(f"{lead}same on all ranks:")
                    lines += [" " * len(lead) + text for text in value]
                continue
            columns = [cells[row.name, i] for i in range(len(row.cells))]
            for k in range(max(len(c) for c in columns)):
                parts = [row.name if k == 0 else ""]
                parts += [c[k] if k < len(c) else "" for c in columns]
                lines.append("  ".join(p.ljust(w) for p, w in zip(parts, widths)).rstrip())
        return lines

    def _blocks(self) -> list[str]:
        """One block per rank (after one for the values equal on every rank)."""
        lines = []

        def entry(name: str, value_lines: list[str]) -> None:
            lead = f"  {name} = "
            lines.append(lead + value_lines[0])
            lines.extend(" " * len(lead) + text for text in value_lines[1:])

        same = [row for row in self._rows if row.same]
        if same:
            lines.append("same on all ranks:")
            for row in same:
                entry(row.name, _Shown(row.cells[0], None).text())
        differing = [row for row in self._rows if not row.same]
        for i, rank in enumerate(self.ranks if differing else []):
            lines.append(f"rank {rank}:")
            for row in differing:
                entry(row.name, self._cell_lines(row, i))
        return lines

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        return {"text/plain": repr(self), "text/html": self._repr_html_()}
