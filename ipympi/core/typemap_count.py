"""Counting the basic elements of packed data (``Status.Get_elements``, partial receives).

A message of a derived datatype is its leaves in typemap order (the packed form of
:mod:`ipympi.core.typemap`). These functions locate a byte count within that sequence using
the layout's run-length encoded signature and cumulative tables of it, so that no
function loops over elements: a whole number of datatype elements is counted by
multiplication, the rest by a binary search over signature entries.
"""

from __future__ import annotations

from .constants import UNDEFINED
from .lazynumpy import np
from .typemap import Layout, leaf_table, leaves

__all__ = ["bytes_of_elements", "complete_bytes", "elements_in"]


def _entry_table(layout: Layout) -> tuple[np.ndarray, np.ndarray]:
    """Cumulative packed bytes and basic elements at the end of each signature entry."""
    cached = layout._cache.get("entries")
    if cached is None:
        packed, parts = leaf_table()
        cached = (
            np.cumsum(packed[layout.sig_leaf] * layout.sig_count),
            np.cumsum(parts[layout.sig_leaf] * layout.sig_count),
        )
        layout._cache["entries"] = cached
    return cached


def _prefix(layout: Layout, nbytes: int) -> tuple[int, int, bool]:
    """For ``0 <= nbytes < layout.packed``: the basic elements complete within the first
    ``nbytes`` packed bytes of one element, the byte just past the last of them, and
    whether ``nbytes`` falls on an element boundary (or in padding)."""
    if nbytes == 0:
        return 0, 0, True
    byte_end, elem_end = _entry_table(layout)
    entry = int(np.searchsorted(byte_end, nbytes, side="right"))
    byte0 = int(byte_end[entry - 1]) if entry else 0
    elem0 = int(elem_end[entry - 1]) if entry else 0
    leaf = leaves()[int(layout.sig_leaf[entry])]
    whole, rest = divmod(nbytes - byte0, leaf.packed)
    elements = elem0 + whole * len(leaf.parts)
    start = byte0 + whole * leaf.packed
    end, exact = start, rest == 0
    for offset, dtype in leaf.parts:
        if offset + dtype.itemsize <= rest:
            elements += 1
            end = start + offset + dtype.itemsize
            exact = True
        elif offset < rest:
            exact = False
            break
    return elements, end, exact


def elements_in(layout: Layout, nbytes: int) -> int:
    """Basic elements in ``nbytes`` of packed data, or ``UNDEFINED`` when ``nbytes`` ends
    inside a basic element (``Status.Get_elements``)."""
    if layout.packed == 0:
        return 0 if nbytes == 0 else UNDEFINED
    whole, rest = divmod(nbytes, layout.packed)
    elements, _, exact = _prefix(layout, rest)
    return whole * layout.nelem + elements if exact else UNDEFINED


def complete_bytes(layout: Layout, nbytes: int) -> int:
    """The longest prefix of ``nbytes`` packed bytes made of whole basic elements."""
    if layout.packed == 0:
        return 0
    whole, rest = divmod(nbytes, layout.packed)
    return whole * layout.packed + _prefix(layout, rest)[1]


def bytes_of_elements(layout: Layout, count: int) -> int:
    """Packed bytes of the first ``count`` basic elements (``Status.Set_elements``)."""
    if layout.nelem == 0:
        return 0
    whole, rest = divmod(count, layout.nelem)
    nbytes = whole * layout.packed
    if rest:
        byte_end, elem_end = _entry_table(layout)
        entry = int(np.searchsorted(elem_end, rest, side="right"))
        byte0 = int(byte_end[entry - 1]) if entry else 0
        elem0 = int(elem_end[entry - 1]) if entry else 0
        leaf = leaves()[int(layout.sig_leaf[entry])]
        leaves_done, parts_done = divmod(rest - elem0, len(leaf.parts))
        nbytes += byte0 + leaves_done * leaf.packed
        if parts_done:
            offset, dtype = leaf.parts[parts_done - 1]
            nbytes += offset + dtype.itemsize
    return nbytes
