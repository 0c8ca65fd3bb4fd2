"""Which ranks a cell runs on, and how a set of ranks is written.

``%%px --targets SPEC`` (or ``-t SPEC``) picks the ranks of the session that
run a cell. :func:`parse_targets` turns SPEC into a sorted list of ranks; the
syntax is a small, safe subset of Python's (it never evaluates anything):

=================  =========================================================
SPEC               selects (session of 4 ranks, 0..3)
=================  =========================================================
``all`` / None     every rank: 0, 1, 2, 3
``2``              rank 2
``-1``             the last rank, 3 (negative ranks count from the end)
``1,3``            ranks 1 and 3 (whitespace around items is allowed)
``[0, 2]``         ranks 0 and 2 (a bracketed list, as Python writes it)
``::2``            ranks 0 and 2 (Python slice semantics over ``range(4)``)
``1:``             ranks 1, 2, 3
``0, 2:4``         ranks 0, 2, 3 (items and slices mix)
=================  =========================================================

Programs may also pass an int, a list, tuple or range of ints, or a slice.
A spec that selects no rank, names a rank outside the session, or cannot be
parsed raises :class:`TargetError`, whose message is meant for the user.

:func:`format_ranks` writes a set of ranks compactly (``0-3``, ``1,3``,
``0-2,5,7-9``); output labels such as ``[stdout:0-3]`` use it.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Iterable
from typing import Any

__all__ = ["TargetError", "format_ranks", "parse_targets", "ranks_phrase"]

_HINT = "expected e.g. 0, 1,3, ::2, all"
_INT_RE = re.compile(r"[+-]?\d+")
_SLICE_RE = re.compile(r"([+-]?\d+)?\s*:\s*([+-]?\d+)?(?:\s*:\s*([+-]?\d+)?)?")


class TargetError(ValueError):
    """A ``--targets`` spec that is malformed or selects no valid rank."""


def _show(spec: Any) -> str:
    return repr(list(spec) if isinstance(spec, range) else spec)


def _span(n: int) -> str:
    return "only rank 0" if n == 1 else f"ranks 0..{n - 1}"


def _rank(value: int, n: int) -> int:
    rank = value + n if value < 0 else value
    if not 0 <= rank < n:
        raise TargetError(f"rank {value} is out of range: the session has {_span(n)}")
    return rank


def _slice(s: slice, n: int, spec: Any) -> list[int]:
    if s.step == 0:
        raise TargetError(f"--targets {_show(spec)}: a slice step cannot be zero")
    return list(range(n)[s])


def _index(value: Any) -> int | None:
    """``value`` as an int, or None if it is not an integer (bools are not ranks)."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except TypeError:
        return None


def _parse_string(spec: str, n: int) -> list[int]:
    text = spec.strip()
    if text.lower() == "all":
        return list(range(n))
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
        if text.rstrip().endswith(","):  # Python allows "[0, 2,]"
            text = text.rstrip()[:-1]
    garbage = TargetError(f"cannot parse --targets {spec!r}: {_HINT}")
    ranks: list[int] = []
    for item in text.split(","):
        item = item.strip()
        if _INT_RE.fullmatch(item):
            ranks.append(_rank(int(item), n))
            continue
        match = _SLICE_RE.fullmatch(item)
        if not match:
            raise garbage
        start, stop, step = (None if g is None else int(g) for g in match.groups())
        ranks.extend(_slice(slice(start, stop, step), n, spec))
    return ranks


def parse_targets(spec: Any, n: int) -> list[int]:
    """The ranks of a session of ``n`` ranks that ``spec`` selects, sorted, without repeats.

    ``spec`` is None or ``"all"`` (every rank), an int, a list, tuple or range of
    ints, a slice, or a string as described in the module docstring. Raises
    :class:`TargetError` if ``n < 1``, if ``spec`` cannot be parsed, names a rank
    outside ``0..n-1``, has a slice step of 0, or selects no rank at all.
    """
    size = _index(n)
    if size is None or size < 1:
        raise TargetError(f"a session needs at least one rank, not {n!r}")
    n = size
    if spec is None:
        return list(range(n))
    if isinstance(spec, bool):
        raise TargetError(f"cannot use {spec!r} as --targets: {_HINT}")
    if isinstance(spec, str):
        ranks = _parse_string(spec, n)
    elif isinstance(spec, slice):
        for part in (spec.start, spec.stop, spec.step):
            if part is not None and _index(part) is None:
                raise TargetError(f"cannot use {spec!r} as --targets: {_HINT}")
        ranks = _slice(spec, n, spec)
    elif _index(spec) is not None:
        ranks = [_rank(operator.index(spec), n)]
    elif isinstance(spec, (list, tuple, range)):
        ranks = []
        for item in spec:
            value = _index(item)
            if value is None:
                raise TargetError(f"cannot use {item!r} in --targets {_show(spec)}: {_HINT}")
            ranks.append(_rank(value, n))
    else:
        raise TargetError(f"cannot use {spec!r} as --targets: {_HINT}")
    if not ranks:
        every = "0" if n == 1 else f"0..{n - 1}"
        raise TargetError(f"--targets {_show(spec)} selects no rank of {every}")
    return sorted(set(ranks))


def ranks_phrase(ranks: Iterable[int]) -> str:
    """``rank 2``, or ``ranks 0,2``: ranks named in a sentence."""
    ordered = sorted(set(ranks))
    return f"rank {ordered[0]}" if len(ordered) == 1 else f"ranks {format_ranks(ordered)}"


def format_ranks(ranks: Iterable[int]) -> str:
    """Compact text for a set of ranks: ``0-3``, ``1,3``, ``0-2,5,7-9``; ``""`` for none.

    A run of three or more consecutive ranks is written with a dash, a run of
    two with a comma (``1,2``), since ``1-2`` saves nothing and reads as a range.
    """
    ordered = sorted(set(ranks))
    parts: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        if j - i >= 2:
            parts.append(f"{ordered[i]}-{ordered[j]}")
        else:
            parts.extend(str(r) for r in ordered[i : j + 1])
        i = j + 1
    return ",".join(parts)
